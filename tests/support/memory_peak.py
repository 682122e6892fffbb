"""The measured side of the memory estimate (course_lib/engines/memory_fit.py): a corpus of a chosen
vocabulary, and the peak resident memory of a fresh process that trains on it.

The peak is what the issue defines: the largest resident set of the process above its resident set
right after its imports, on the CPU, one thread. Linux keeps the largest in /proc/self/status's VmHWM,
so the child reads its resident set once after the imports and VmHWM once at the end. Not
``ru_maxrss``: at exec Linux folds the parent's peak into it, so a child of a large test process (the
suite's, after an hour of tests) reported the parent's size, 499-523 MiB where its own was 345. Shared by
tests/test_memory_estimate.py (a few cases) and bench/bench_memory_estimate.py (the issue's grid).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

from course_lib.engines.memory_fit import Held, TrainingMemory, training_memory
from course_lib.shelf.local_engine import inflight_per_stage, make_plan
from course_lib.shelf.reference import TrainConfig

ROOT = Path(__file__).resolve().parents[2]
CHILD = """
import json, resource, sys
import torch
import course_lib.engines, course_lib.schedules
from course_lib.shelf.reference import TrainConfig, train
from course_lib.shelf.local_engine import LocalPipelineTrainer
torch.set_num_threads(1)
with open("/proc/self/statm") as f:
    base = int(f.read().split()[1]) * resource.getpagesize()
schedule, cfg = sys.argv[1], TrainConfig(**json.loads(sys.argv[2]))
if schedule == "reference":
    train(cfg, progress=False)
else:
    LocalPipelineTrainer(cfg, schedule, 4).train(progress=False)
with open("/proc/self/status") as f:  # VmHWM: this process's own peak (see the module docstring)
    peak = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
print(peak - base)
"""


def write_corpus(path: Path, vocab: int, chars: int = 300_000) -> Path:
    """A UTF-8 text of `chars` characters, exactly `vocab` of them distinct (code points from '!' on,
    surrogates skipped), seeded; `vocab` 40 or less: the shipped corpus's alphabet is not needed."""
    points = [c for c in range(0x21, 0x21 + vocab + 2048) if not 0xD800 <= c <= 0xDFFF][:vocab]
    rng = random.Random(0)
    text = "".join(map(chr, points)) + "".join(chr(rng.choice(points)) for _ in range(chars - vocab))
    path.write_text(text, encoding="utf-8")
    return path


def estimate(schedule: str, cfg: TrainConfig) -> TrainingMemory:
    """The estimate for `schedule` on the local engine at 4 stages ("reference": the reference trainer)."""
    if schedule == "reference":
        return training_memory(cfg)
    plan = make_plan(cfg, schedule, 4)
    return training_memory(cfg, None, Held.of(inflight_per_stage(plan.schedule), plan.partition.sizes))


def measured_peak(schedule: str, cfg: dict) -> int:
    """Bytes above the baseline at the peak of a fresh process training TrainConfig(**cfg)."""
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, schedule, json.dumps(cfg)],
        capture_output=True, text=True, timeout=600, env=env, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout.split()[-1])
