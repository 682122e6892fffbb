"""Issue 42: the memory estimate (course_lib/engines/memory_fit.py) against the measured peak, on the
issue's grid: 3 model sizes x 3 vocabularies x GPipe and 1F1B on the local engine (4 stages, 4
micro-batches of 4 x 64 tokens, 2 steps), each in a fresh process on the CPU. The peak is the
largest resident set above the one right after the imports (tests/support/memory_peak.py). Target:
every estimate within 20% of its peak; tests/test_memory_estimate.py checks three of the cases.
About 3 minutes on 2 cores. Run::

    .venv/bin/python bench/bench_memory_estimate.py
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # tests/support: the measuring child, shared with the test

from support.memory_peak import estimate, measured_peak, write_corpus  # noqa: E402

from course_lib.shelf.reference import TrainConfig  # noqa: E402

MODELS = (dict(n_layers=8, d_model=256), dict(n_layers=8, d_model=384), dict(n_layers=12, d_model=512))
VOCABULARIES = (40, 4096, 16384)
SCHEDULES = ("gpipe", "1f1b")


def main_bench() -> None:
    print(
        f"{'schedule':8} {'layers':>6} {'width':>5} {'vocab':>6} {'peak MiB':>9} {'estimate':>9} {'ratio':>6}"
    )
    ratios = []
    with tempfile.TemporaryDirectory() as folder:
        for model in MODELS:
            for vocab in VOCABULARIES:
                corpus = write_corpus(Path(folder) / f"v{vocab}.txt", vocab)
                for schedule in SCHEDULES:
                    cfg = dict(model, steps=2, eval_batches=1, data_path=str(corpus))
                    start = time.perf_counter()
                    peak = measured_peak(schedule, cfg)
                    need = estimate(schedule, TrainConfig(**cfg)).total
                    ratios.append(need / peak)
                    print(
                        f"{schedule:8} {model['n_layers']:6} {model['d_model']:5} {vocab:6} "
                        f"{peak / 2**20:9.0f} {need / 2**20:9.0f} {need / peak:6.2f}  "
                        f"({time.perf_counter() - start:.0f} s)",
                        flush=True,
                    )
    print(
        f"estimate / peak: {min(ratios):.2f} .. {max(ratios):.2f} over {len(ratios)} cases "
        "(target 0.80 .. 1.20)"
    )


if __name__ == "__main__":
    main_bench()
