"""Benchmark the automatic zero-bubble scheduler (course_lib/autoschedule/auto_zero_bubble.py).

Prints, each as the median of a few repeats:

1. auto_zero_bubble at p=32, m=256 under 1F1B's memory (limit p) and at 2p, with the Zero Bubble
   paper's 1.5B profile (arXiv 2401.10241 Table 9) and its link time: target < 2 s each on 2 cores.
   That is the whole call: 6 runs of the heuristic (its grid), plus simulating ZB-H1 / ZB-H2 to
   compare with them;
2. the heuristic's grid alone and one simulation of its result, for the same sizes.

Each figure is given twice: wall-clock time, and the CPU time the process used. The scheduler is
single-threaded, so on a quiet machine the two agree; on a shared one (other jobs on the same cores)
the wall clock also counts the time the process waited for a core, and the CPU time is what a quiet
machine would take. The verdict is on the CPU time (and says so).

Run::

    .venv/bin/python bench/bench_auto_scheduler.py
    .venv/bin/python bench/bench_auto_scheduler.py --repeats 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from course_lib.autoschedule.auto_zero_bubble import auto_zero_bubble, heuristic_orders, problem
from course_lib.shelf.costs import Link, StageCosts
from course_lib.shelf.simulator import simulate

COSTS = StageCosts(18.522, 18.086, 9.337)  # ms, arXiv 2401.10241 Table 9, 1.5B
COMM = 0.601
TARGET_S = 2.0


def median_seconds(fn, repeats: int) -> tuple[float, float]:
    """Median wall-clock and median CPU seconds of `repeats` calls of fn."""
    wall, cpu = [], []
    for _ in range(repeats):
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - w0)
        cpu.append(time.process_time() - c0)
    return statistics.median(wall), statistics.median(cpu)


def main() -> None:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    p, m = 32, 256
    for limit in (p, 2 * p):
        build = lambda limit=limit: auto_zero_bubble(p, m, limit, COSTS, COMM)  # noqa: E731
        wall, cpu = median_seconds(build, args.repeats)
        verdict = "ok" if cpu < TARGET_S else "SLOW"
        print(f"auto_zero_bubble p={p} m={m} limit={limit}: {cpu:.2f} s CPU, {wall:.2f} s wall "
              f"(target < {TARGET_S:.0f} s, on the CPU time) {verdict}")  # fmt: skip
    pb = problem(p, m, 2 * p, COSTS, COMM)
    grid_wall, grid_cpu = median_seconds(lambda: heuristic_orders(pb), args.repeats)
    schedule = auto_zero_bubble(p, m, 2 * p, COSTS, COMM)
    link = Link(latency_s=COMM)
    sim_wall, sim_cpu = median_seconds(lambda: simulate(schedule, COSTS, links=link), args.repeats)
    print(f"  of which the heuristic's 6-point grid: {grid_cpu:.2f} s CPU ({grid_wall:.2f} s wall); "
          f"one simulation: {sim_cpu:.2f} s CPU ({sim_wall:.2f} s wall)")
    print(f"  load average over the last minute: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")

if __name__ == "__main__":
    main()
