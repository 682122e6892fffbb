"""Every registered schedule on the distributed engine: the simulator's step against the measured one.

For each schedule in ``SCHEDULES`` (its default stages per device: 2 for interleaved and V-shape ones),
p = 2 gloo processes train the toy model for a few steps. For every step after the warm-up, the
simulator replays the schedule with that step's own measured per-stage costs (``costs.costs_from``:
median F, I, W per stage; free links, as on localhost a message costs well under a millisecond) and
predicts the makespan, which is set against the measured makespan of the same step. Printed per
schedule: the medians, over steps, of the measured and the simulated makespan and of their ratio.
Target: ratio within 15% (0.85..1.15).

All schedules run in one launch (the same processes, one after the other), so starting processes is
paid once. Timings on a shared machine move with its load: run it on a quiet one.

Run::

    .venv/bin/python bench/bench_schedules_measured.py                 # 16 layers, m = 8, 4 steps
    .venv/bin/python bench/bench_schedules_measured.py --layers 24 --steps 6 --microbatches 8
"""

from __future__ import annotations

import argparse
import statistics

from course_lib.shelf.costs import costs_from
from course_lib.shelf.distributed_engine import launch, make_spec
from course_lib.shelf.errors import CourseError
from course_lib.shelf.first_schedules import SCHEDULES
from course_lib.shelf.reference import TrainConfig
from course_lib.shelf.simulator import simulate

RANKS = 2
TARGET = 0.15


def specs(cfg: TrainConfig) -> tuple[list[str], list]:
    """One spec per schedule that takes these sizes (the names, and the specs, in the same order)."""
    names, built = [], []
    for name, info in SCHEDULES.items():
        try:
            spec = make_spec(cfg, name, RANKS, virtual=info.default_virtual, track_memory=False, threads=1)
        except CourseError as err:  # a size this schedule refuses (e.g. interleaving's rounds rule)
            print(f"  {name}: skipped, {err}")
            continue
        names.append(name)
        built.append(spec)
    return names, built


def compare(schedule, result, warmup: int) -> tuple[float, float, float]:
    """(median measured makespan, median simulated makespan, median simulated / measured), seconds."""
    steps = result.timelines[warmup:] or result.timelines
    measured = [tl.makespan for tl in steps]
    predicted = [simulate(schedule, costs_from([tl])).makespan for tl in steps]
    ratios = [sim / meas for sim, meas in zip(predicted, measured, strict=True)]
    return statistics.median(measured), statistics.median(predicted), statistics.median(ratios)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--microbatches", type=int, default=8)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=1, help="steps left out (allocations, lazy init)")
    args = parser.parse_args(argv)
    cfg = TrainConfig(
        n_layers=args.layers, d_model=args.width, n_heads=4, seq_len=args.seq_len, batch_size=args.batch_size,
        microbatches=args.microbatches, steps=args.steps,
    )  # fmt: skip
    print(f"p={RANKS} gloo processes, {args.layers} blocks, width {args.width}, m={args.microbatches}, "
          f"{args.steps} steps ({args.warmup} warm-up left out)")  # fmt: skip
    names, built = specs(cfg)
    results = launch(built)
    print(
        f"\n  {'schedule':<18} {'v':>2} {'measured ms':>12} {'simulated ms':>13} {'sim/meas':>9}  within 15%"
    )
    for name, spec, result in zip(names, built, results, strict=True):
        measured, simulated, ratio = compare(spec.schedule, result, args.warmup)
        ok = "yes" if abs(ratio - 1) <= TARGET else "NO"
        ms = f"{measured * 1e3:>12.1f} {simulated * 1e3:>13.1f}"
        print(f"  {name:<18} {spec.virtual:>2} {ms} {ratio:>9.3f}  {ok}")
    print("\n  measured: wall clock of the distributed engine (one step's makespan over both ranks);")
    print("  simulated: the simulator fed that step's measured per-stage F, I, W (free links)")


if __name__ == "__main__":
    main()
