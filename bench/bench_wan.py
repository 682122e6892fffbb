"""Plain and latency-aware 1F1B over an injected slow link, measured on real processes (issue 6).

Prints, from one launch of p processes (``course_lib/lessons/wan_measured.py``):

1. plain 1F1B's measured step at each latency L, beside the replay of its measured op costs and the
   formula (m + p - 1)(t_f + t_b) + 2L[(p - 1) + floor((m - 1)(p - 1)/p)], and the growth over L = 0;
2. latency-aware 1F1B at --aware-latency for k = 1, 2, ... extra micro-batches per link: measured step
   and worst device idle against the flush bound (p - 1)(t_f + t_b) + 2 sum(L);
3. the two effects (median against median) beside their spread (the ranges of the repeats) and the ratio.

Every op is paced to --pace forward/backward seconds (the real op, then a sleep to the end of the slot)
unless --bare; every run is repeated --repeats times, taking turns. Lesson 06's figure (sec 6), then the
test's shorter variant (tests/lessons/test_wan_measured.py), then bare ops::

    .venv/bin/python bench/bench_wan.py --latency 0 0.07 0.23 --aware-latency 0.07 --extras 3 4 5 6 --steps 3
    .venv/bin/python bench/bench_wan.py --extras 1 2 3 4 5             # 4 blocks, L = 0, 40, 80 ms, paced
    .venv/bin/python bench/bench_wan.py --bare --layers 32 --latency 0 0.02 0.04 --aware-latency 0.02
"""

from __future__ import annotations

import argparse
import time

from course_lib.lessons.wan_measured import WanExperiment, run_wan_experiment


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    d = WanExperiment()
    parser.add_argument("--layers", type=int, default=d.n_layers)
    parser.add_argument("--stages", "-p", type=int, default=d.p)
    parser.add_argument("--microbatches", "-m", type=int, default=d.m)
    parser.add_argument("--latency", type=float, nargs="+", default=list(d.latencies_s), help="seconds")
    parser.add_argument(
        "--aware-latency", type=float, default=d.aware_latency_s, help="seconds, one of --latency"
    )
    parser.add_argument("--extras", type=int, nargs="+", default=None, help="k values (default 1, 2, ...)")
    parser.add_argument("--steps", type=int, default=d.steps)
    parser.add_argument("--repeats", type=int, default=d.repeats)
    parser.add_argument("--pace", type=float, nargs=2, default=list(d.pace_s), help="F and B slot, seconds")
    parser.add_argument("--bare", action="store_true", help="time the bare ops (no pacing)")
    parser.add_argument("--png", default=None, help="also save the summary and Gantt charts here")
    args = parser.parse_args()
    e = WanExperiment(
        n_layers=args.layers, p=args.stages, m=args.microbatches, latencies_s=tuple(args.latency),
        steps=args.steps, aware_latency_s=args.aware_latency, repeats=args.repeats,
        pace_s=None if args.bare else tuple(args.pace),
        extras=tuple(args.extras) if args.extras else None,
    )  # fmt: skip
    start = time.perf_counter()
    res = run_wan_experiment(e, progress=False)
    print(res.table())
    runs = len(res.plain) + len(res.aware)
    print(f"\none launch, {runs} runs: {time.perf_counter() - start:.1f} s wall clock")
    if args.png:
        import matplotlib

        matplotlib.use("Agg")
        res.plot_summary().savefig(args.png, dpi=100)
        gantt = args.png.rsplit(".", 1)[0] + "_gantt.png"
        res.plot_gantt().savefig(gantt, dpi=100)
        print(f"saved {args.png} and {gantt}")


if __name__ == "__main__":
    main()
