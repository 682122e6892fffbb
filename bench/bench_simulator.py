"""Benchmark the simulator and the Gantt chart; compare with PyTorch's own schedule simulator.

Prints, each as the median of a few repeats:

0. simulate 1F1B at p=8, m=32 through the shelf's plain loop, the validator's checks included: what a
   lesson runs (target < 10 ms);

Rows 1-4 run the fast path (course_lib.fast_simulator), chosen explicitly with ``fast=True``:

1. simulate 1F1B at p=8, m=64 and render its Gantt chart to PNG (target <= 120 ms);
2. simulate 1F1B at p=64, m=1024, 131k actions (target <= 0.30 s);
3. our simulation time over torch.distributed.pipelining's ``_simulate_comms_compute`` on the same
   1F1B order, the two taking turns in one run (target <= 0.30). Theirs steps every rank in
   lock-step to find deadlocks and idle steps; ours models durations, link latency and bandwidth
   queues and memory, and builds a Timeline;
4. build + simulate + Gantt PNG at p=8, m=64 for the schedules of issue 13 (looped BFS and
   interleaved zero bubble at v=2, ZB-H2, ZB-V, DualPipeV; target <= 120 ms each);
5. lesson 10's largest paper setting (p=32, m=256): 1F1B, ZB-H1 and ZB-H2 built and simulated
   (target <= 2 s).

Run::

    .venv/bin/python bench/bench_simulator.py            # every row
    .venv/bin/python bench/bench_simulator.py --repeats 3
    .venv/bin/python bench/bench_simulator.py --family   # only 4.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import matplotlib

matplotlib.use("Agg")

import course_lib.fast_simulator  # noqa: E402, F401  (registers the fast path: fast=True below)
import course_lib.schedules  # noqa: E402, F401  (registers every schedule by name)
from course_lib.charts.gantt import save_timeline_png  # noqa: E402
from course_lib.lessons.zero_bubble_frontier import PAPER_SETTINGS, published_vs_predicted  # noqa: E402
from course_lib.shelf.first_schedules import build_schedule  # noqa: E402
from course_lib.shelf.simulator import simulate  # noqa: E402


def median_seconds(fn, repeats: int) -> float:
    """Median wall-clock seconds of `repeats` calls (CPU seconds go to CPU_TIMES, see main)."""
    times, cpu = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    CPU_TIMES.append(statistics.median(cpu))
    return statistics.median(times)


# CPU seconds of each measurement: on a shared machine wall time includes waiting for a core
CPU_TIMES: list[float] = []


def bench_gantt(repeats: int, name: str = "1f1b", virtual: int = 1, build: bool = False) -> float:
    """Simulate + Gantt PNG of `name` at p=8, m=64 (and the build too, if `build`)."""
    schedule = build_schedule(name, 8, 64, virtual)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "gantt.png")
        save_timeline_png(simulate(schedule, fast=True), path)  # warm up matplotlib's font cache

        def run() -> None:
            built = build_schedule(name, 8, 64, virtual) if build else schedule
            save_timeline_png(simulate(built, fast=True), path)

        return median_seconds(run, repeats)


# issue 13's schedules, with the stages per device the CLI gives them by default
FAMILY = (("looped-bfs", 2), ("interleaved-zb", 2), ("zb-h2", 1), ("zb-v", 2), ("dualpipe-v", 2))


def bench_family(repeats: int) -> None:
    for name, v in FAMILY:
        t = bench_gantt(repeats, name, v, build=True)
        print(
            f"4. {name} p=8, m=64, v={v}: build + simulate + Gantt PNG: {t * 1e3:.0f} ms wall, "
            f"{CPU_TIMES[-1] * 1e3:.0f} ms CPU (target <= 120 ms)"
        )


def bench_lesson(repeats: int) -> float:
    """Seconds per call of the plain loop on 1F1B at p=8, m=32 (validation included), the median of
    `repeats` turns of 20 calls each (a call takes a few milliseconds; CPU seconds go to CPU_TIMES)."""
    schedule = build_schedule("1f1b", 8, 32)
    return median_seconds(lambda: [simulate(schedule, fast=False) for _ in range(20)], repeats) / 20


def bench_large(repeats: int) -> float:
    schedule = build_schedule("1f1b", 64, 1024)
    return median_seconds(lambda: simulate(schedule, fast=True), repeats)


def bench_vs_torch(p: int, m: int, repeats: int) -> tuple[float, float] | str:
    """(ours, torch's) seconds for the same 1F1B order, or a reason it could not run."""
    try:
        from torch.distributed.pipelining.schedules import _Action, _add_send_recv, _simulate_comms_compute
    except ImportError as err:  # private API: a future torch may move it
        return f"skipped: torch's private schedule API is not where torch 2.13 had it ({err})"
    schedule = build_schedule("1f1b", p, m)
    compute = {d: [_Action.from_str(str(a)) for a in order] for d, order in enumerate(schedule.orders)}

    def stage_to_rank(stage: int) -> int:
        return schedule.stage_to_device[stage]

    # torch's simulator needs the explicit SEND/RECV actions its runtime would execute
    with_comms = _add_send_recv(compute, stage_to_rank, schedule.n_stages)
    ours, theirs = [], []
    for _ in range(repeats):  # taking turns, so that load from other processes hits both alike
        theirs.append(per_call(lambda: _simulate_comms_compute(with_comms, stage_to_rank, schedule.n_stages)))
        ours.append(per_call(lambda: simulate(schedule, fast=True)))
    return statistics.median(ours), statistics.median(theirs)


def per_call(fn, at_least_s: float = 0.05) -> float:
    """Seconds per call of `fn`, called until `at_least_s` have passed (one call of a few ms is at
    the mercy of the scheduler on a busy machine; a turn of 50 ms much less)."""
    calls, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < at_least_s or calls == 0:
        fn()
        calls += 1
    return elapsed / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--family", action="store_true", help="only 4.: issue 13's schedules")
    args = parser.parse_args()
    r = args.repeats
    if args.family:
        bench_family(r)
        return

    t = bench_lesson(r)
    print(
        f"0. 1F1B p=8, m=32 (512 actions): the plain loop, checks included: {t * 1e3:.2f} ms wall, "
        f"{CPU_TIMES[-1] / 20 * 1e3:.2f} ms CPU (target < 10 ms)"
    )
    t = bench_gantt(r)
    print(
        f"1. 1F1B p=8, m=64: simulate + Gantt PNG: {t * 1e3:.0f} ms wall, {CPU_TIMES[-1] * 1e3:.0f} ms CPU "
        "(target <= 120 ms)"
    )
    t = bench_large(max(1, min(r, 3)))
    print(
        f"2. 1F1B p=64, m=1024 (131,072 actions): simulate: {t:.2f} s wall, {CPU_TIMES[-1]:.2f} s CPU "
        "(target <= 0.30 s)"
    )
    for p, m in ((8, 64), (16, 128)):
        result = bench_vs_torch(p, m, r)
        if isinstance(result, str):
            print(f"3. {result}")
            break
        ours, theirs = result
        print(
            f"3. 1F1B p={p}, m={m}: ours {ours * 1e3:.1f} ms, torch _simulate_comms_compute "
            f"{theirs * 1e3:.1f} ms: ratio ours/theirs = {ours / theirs:.3f} (target <= 0.30)"
        )
    bench_family(r)
    t = median_seconds(lambda: published_vs_predicted([PAPER_SETTINGS[-1]]), max(1, min(r, 3)))
    print(
        f"5. lesson 10's p=32, m=256, three schedules: {t:.2f} s wall, {CPU_TIMES[-1]:.2f} s CPU "
        "(target <= 2 s)"
    )
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"(median of {r} runs; {os.cpu_count()} CPU cores visible, load average {load:.1f}: "
        "when it exceeds the cores, wall time includes waiting for one)"
    )


if __name__ == "__main__":
    main()
