"""`make gpu-check`: every GPU path of the course, run once, and a report of what passed.

    python bench/gpu_check.py                      # PASS / SKIP / FAIL per section, exit 1 on a FAIL
    python bench/gpu_check.py --json               # the same report as JSON
    python bench/gpu_check.py --layers 8 --steps 3

Sections: reference training on the accelerator; the local engine with all p stages on it (simulated
devices); the distributed engine over NCCL (one rank per GPU, so 2 GPUs or more); tensor parallelism
in one process on the accelerator, and over NCCL (2 GPUs or more); memory by saved-tensor counting
and by the allocator's peak; the bubble measured vs simulated; FLOP/s and MFU against the card's peak;
on a CUDA GPU only, bf16 and fp16 autocast (``TrainConfig.precision``) against FP32.

On a GPU it trains the lessons' GPU size (``accelerator_config()``: 80 layers, 512 wide) for a few
steps, sized to finish within 5 minutes on one card. Without a GPU it runs the same sections on the CPU
at toy sizes and says so at the top; what needs a GPU says SKIP and why.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace

import torch
from gpu_sections import CUDA_SECTIONS, FAIL, PASS, SECTIONS, SKIP, CheckRun, Outcome

from course_lib.lesson import accelerator_config, describe_devices
from course_lib.shelf.errors import CourseError, require
from course_lib.shelf.model import load_corpus
from course_lib.shelf.reference import TrainConfig
from course_lib.shelf.stage import accelerator, gpu_count, resolve_device


@dataclass
class Section:
    name: str
    status: str
    reason: str
    numbers: dict = field(default_factory=dict)


def run_section(name: str, check: Callable[[CheckRun], Outcome], run: CheckRun) -> Section:
    try:
        status, reason, numbers = check(run)
    except Exception as exc:  # noqa: BLE001  a broken path is reported; the other sections still run
        return Section(name, FAIL, f"{type(exc).__name__}: {exc}")
    finally:  # hand the memory back before the next section (and the ranks it may start)
        gc.collect()
        if run.device.type == "cuda":
            torch.cuda.empty_cache()
    return Section(name, status, reason, numbers)


def plan_run(steps: int | None = None, layers: int | None = None) -> CheckRun:
    """The lessons' GPU size on an accelerator, a small toy on the CPU."""
    require(steps is None or steps >= 2, f"--steps must be >= 2 (the first step is warm-up), got {steps}")
    require(layers is None or layers >= 2, f"--layers must be >= 2 (4 stages need 4 layers), got {layers}")
    device, gpus = str(resolve_device("auto")), gpu_count()
    if accelerator():
        cfg = accelerator_config(steps=steps or 5, eval_batches=1, device=device)
    else:
        cfg = TrainConfig(n_layers=8, batch_size=8, microbatches=4, steps=steps or 3, eval_batches=1)
    cfg = replace(cfg, n_layers=layers or cfg.n_layers)
    cfg.check()
    return CheckRun(cfg, stages=min(gpus, 4) if gpus >= 2 else 4, gpus=gpus, corpus=load_corpus())


def header(run: CheckRun) -> str:
    c = run.cfg
    where = (
        f"gpu-check on {describe_devices()}"
        if accelerator()
        else "gpu-check WITHOUT A GPU: no GPU here, so the same sections run on the CPU at toy sizes"
    )
    return (
        f"{where}\nsizes: {c.n_layers} layers x d_model {c.d_model}, batch {c.batch_size} x {c.seq_len} "
        f"tokens in {c.microbatches} micro-batches, p={run.stages} stages, {c.steps} steps"
    )


def to_json(run: CheckRun, sections: list[Section], seconds: float) -> dict:
    return {
        "machine": describe_devices(),
        "on_gpu": accelerator() is not None,
        "stages": run.stages,
        "config": asdict(run.cfg),
        "sections": [asdict(s) for s in sections],
        "counts": {k: sum(s.status == k for s in sections) for k in (PASS, SKIP, FAIL)},
        "passed": all(s.status != FAIL for s in sections),
        "seconds": seconds,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python bench/gpu_check.py", description="make gpu-check")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--steps", type=int, help="training steps per engine (default 5 on a GPU, 3 on a CPU)"
    )
    parser.add_argument("--layers", type=int, help="transformer blocks (default 80 on a GPU, 8 on a CPU)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    # the lessons' thread policy: the toy is too small for threads, and a busy machine punishes them
    torch.set_num_threads(1)
    try:
        run = plan_run(args.steps, args.layers)
    except CourseError as exc:
        print(f"gpu-check: {exc}", file=sys.stderr)
        return 2
    if not args.json:
        print(header(run), flush=True)
    sections = []
    for name, check in SECTIONS + (CUDA_SECTIONS if run.device.type == "cuda" else ()):
        sections.append(run_section(name, check, run))
        if not args.json:
            print(f"{sections[-1].status}  {name:<38} {sections[-1].reason}", flush=True)
    report = to_json(run, sections, time.perf_counter() - start)
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        counts = report["counts"]
        print(f"{counts[PASS]} PASS, {counts[SKIP]} SKIP, {counts[FAIL]} FAIL in {report['seconds']:.0f} s")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
