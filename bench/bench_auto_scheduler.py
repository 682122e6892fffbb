"""Benchmark the automatic zero-bubble scheduler (course_lib/autoschedule/zero_bubble.py).

Prints, each as the median of a few repeats:

1. auto_zero_bubble at p=32, m=256 under 1F1B's memory (limit p) and at 2p, with the Zero Bubble
   paper's 1.5B profile (arXiv 2401.10241 Table 9) and its link time: target < 2 s each on 2 cores.
   That is the whole call: 6 runs of the heuristic (its grid), plus simulating ZB-H1 / ZB-H2 to
   compare with them;
2. the heuristic's grid alone and one simulation of its result, for the same sizes.

Run::

    .venv/bin/python bench/bench_auto_scheduler.py
    .venv/bin/python bench/bench_auto_scheduler.py --repeats 3
"""

from __future__ import annotations

import argparse
import statistics
import time

from course_lib.autoschedule.zero_bubble import auto_zero_bubble, heuristic_plans, problem
from course_lib.costs import StageCosts
from course_lib.links import Link
from course_lib.simulator import simulate

COSTS = StageCosts(18.522, 18.086, 9.337)  # ms, arXiv 2401.10241 Table 9, 1.5B
COMM = 0.601
TARGET_S = 2.0


def median_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    p, m = 32, 256
    for limit in (p, 2 * p):
        seconds = median_seconds(lambda limit=limit: auto_zero_bubble(p, m, limit, COSTS, COMM), args.repeats)
        verdict = "ok" if seconds < TARGET_S else "SLOW"
        print(f"auto_zero_bubble p={p} m={m} limit={limit}: {seconds:.2f} s "
              f"(target < {TARGET_S:.0f} s) {verdict}")  # fmt: skip
    pb = problem(p, m, 2 * p, COSTS, COMM)
    grid_s = median_seconds(lambda: heuristic_plans(pb), args.repeats)
    schedule = auto_zero_bubble(p, m, 2 * p, COSTS, COMM)
    sim_s = median_seconds(lambda: simulate(schedule, COSTS, links=Link(latency_s=COMM)), args.repeats)
    print(f"  of which the heuristic's 6-point grid: {grid_s:.2f} s; one simulation: {sim_s:.2f} s")


if __name__ == "__main__":
    main()
