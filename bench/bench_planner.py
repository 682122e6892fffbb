"""Benchmark the planner: every layout of the 1T-parameter model on 3,072 GPUs (target < 2 s on 2 cores).

Prints the median wall-clock and CPU seconds of a few repeats of
``plan("megatron-1t", "a100-selene", gpus=3072, global_batch=3072)``: the closed forms rank every
candidate that fits memory, the simulator replays the three leaders. Also the published-vs-predicted
table (planner/published.py), as the lesson prints it.

Run::

    .venv/bin/python bench/bench_planner.py
    .venv/bin/python bench/bench_planner.py --repeats 5 --no-table
"""

from __future__ import annotations

import argparse
import statistics
import time

from course_lib.planner import plan
from course_lib.planner.published import published_table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-table", action="store_true", help="skip the published-vs-predicted table")
    args = parser.parse_args()
    wall, cpu = [], []
    for _ in range(args.repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        result = plan("megatron-1t", "a100-selene", gpus=3072, global_batch=3072)
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    best = result.best
    print(
        f"plan megatron-1t on 3,072 A100s: {result.candidates} layouts, {len(result.layouts)} fit; "
        f"median {statistics.median(wall):.2f} s wall, {statistics.median(cpu):.2f} s CPU (target < 2 s); "
        f"best (t, p, d) = ({best.t}, {best.p}, {best.d}), b {best.b}, {best.schedule}, v {best.v}"
    )
    if not args.no_table:
        print(f"{'model':14s} {'GPUs':>6s}  t   p    d published predicted error")
        for row in published_table():
            mark = "  (calibration)" if row["calibration"] else ""
            print(
                f"{row['model']:14s} {row['gpus']:6d} {row['t']:2d} {row['p']:3d} {row['d']:4d} "
                f"{row['published']:9.0f} {row['predicted']:9.1f} {row['error']:+6.1%}{mark}"
            )


if __name__ == "__main__":
    main()
