"""Benchmark the distributed engine against torch.distributed.pipelining and against the simulator.

Part 1: the same model, partition (uniform), schedule, batches and weights, p = 2 gloo processes on
the CPU, run by our distributed engine and by torch.distributed.pipelining (``PipelineStage`` +
``Schedule1F1B`` or ``ScheduleGPipe``, via ``course_lib.torch_pipelining``). Step time = wall clock
of one optimizer step on the rank holding the last stage, as torch's side measures it; median of the
steps after warm-up. Target: ours / torch <= 1.05. The two alternate, ``--rounds`` times each, so
that load from other processes on a shared machine hits both alike.

Part 2: the simulator's predicted step from measured op costs against the measured step. The op
costs are the medians of our run's own measured spans per stage (F, and B split as b + w with
w = 0, since B runs as one piece); the simulator replays the schedule with them (free links: on
localhost a message costs well under a millisecond) and predicts the schedule's makespan, which is
compared with the measured makespan of each step (median). Target: within 15%.

Run::

    .venv/bin/python bench/bench_distributed.py                      # 80 layers, 1F1B, p=2, m=4
    .venv/bin/python bench/bench_distributed.py --schedule gpipe --steps 8 --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict

from course_lib.engines.distributed import launch, make_spec
from course_lib.errors import CourseError
from course_lib.reference import TrainConfig
from course_lib.schedules.ir import Kind
from course_lib.simulator import StageCosts, simulate
from course_lib.torch_pipelining import launch as torch_launch
from course_lib.torch_pipelining import make_spec as torch_spec


def measured_costs(result, n_stages: int, warmup: int) -> StageCosts:
    """Median F and B time per stage, read off the measured Timelines after warm-up."""
    seen: dict[tuple[int, Kind], list[float]] = defaultdict(list)
    for tl in result.timelines[warmup:]:
        for span in tl.spans:
            seen[(span.action.stage, span.action.kind)].append(span.duration)
    f = [statistics.median(seen[(s, Kind.F)]) for s in range(n_stages)]
    b = [statistics.median(seen[(s, Kind.B)]) for s in range(n_stages)]
    return StageCosts(f=f, b=b, w=[0.0] * n_stages)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedule", default="1f1b", choices=["1f1b", "gpipe"])
    parser.add_argument("--layers", type=int, default=80)
    parser.add_argument("--microbatches", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--steps", type=int, default=6, help="measured steps per run, after warm-up")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2, help="runs of each engine, alternating")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per rank (both engines)")
    args = parser.parse_args(argv)
    p = 2
    cfg = TrainConfig(
        n_layers=args.layers,
        batch_size=args.batch_size,
        microbatches=args.microbatches,
        steps=args.warmup + args.steps,
    )
    try:  # torch measures no memory: time our engine without its memory probes too, if it can
        ours_spec = make_spec(cfg, args.schedule, p, threads=args.threads, track_memory=False)
        probes = "off (like torch)"
    except CourseError:
        ours_spec = make_spec(cfg, args.schedule, p, threads=args.threads)
        probes = "on (StageRuntime has no switch; they cost about 10% CPU on this model)"
    theirs_spec = torch_spec(cfg, args.schedule, p, threads=args.threads)
    ours_times, torch_times, ours_runs = [], [], []
    for r in range(args.rounds):
        print(f"round {r + 1}/{args.rounds}: our distributed engine, then torch.distributed.pipelining ...")
        ours = launch([ours_spec])[0]
        ours_runs.append(ours)
        ours_times += ours.step_times_s[p - 1][args.warmup :]  # rank p-1 holds the last stage
        theirs = torch_launch([theirs_spec])[0]
        torch_times += theirs.step_times_s[args.warmup :]
        assert abs(ours.losses[-1] - theirs.losses[-1]) < 1e-4, (ours.losses, theirs.losses)
    ours_med, torch_med = statistics.median(ours_times), statistics.median(torch_times)
    print(
        f"\n{cfg.n_layers} layers, schedule {args.schedule}, p={p}, m={cfg.microbatches}, batch "
        f"{cfg.batch_size}, gloo on CPU, {args.threads} thread(s) per rank; median of "
        f"{len(ours_times)} steps after {args.warmup} warm-up steps per run; our memory probes {probes}"
    )
    print(f"  our distributed engine:       {ours_med * 1000:8.1f} ms per step (measured)")
    print(f"  torch.distributed.pipelining: {torch_med * 1000:8.1f} ms per step (measured)")
    print(f"  ratio ours / torch:           {ours_med / torch_med:8.3f}   (target <= 1.05)")

    makespans, predicted = [], []
    schedule = ours_spec.build_schedule()
    for run in ours_runs:
        costs = measured_costs(run, schedule.n_stages, args.warmup)
        predicted.append(simulate(schedule, costs, source="simulated").makespan)
        makespans += [tl.makespan for tl in run.timelines[args.warmup :]]
    sim, meas = statistics.median(predicted), statistics.median(makespans)
    print(f"\n  simulated makespan from measured op costs: {sim * 1000:8.1f} ms (simulated)")
    print(f"  measured makespan of the same steps:        {meas * 1000:8.1f} ms (measured)")
    print(f"  simulated / measured:                       {sim / meas:8.3f}   (target within 0.85..1.15)")


if __name__ == "__main__":
    main()
