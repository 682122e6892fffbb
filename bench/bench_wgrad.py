"""Benchmark the zero-bubble split of backward: what a W costs next to its I, and what ZB-H1 buys.

Part 1, W / I: the local engine runs ZB-H1 on the 80-layer model (default TrainConfig: batch 16,
4 micro-batches) and times every I and every W; the ratio is sum(W) / sum(I) over all stages and
micro-batches (per stage too). On a GPU a layer's weight gradient is one matmul like its input
gradient, so W / I is close to 1 (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", section 2,
assume T_W ~ T_B); target here <= 1.5.

Part 2, the step: ZB-H1 against 1F1B at the same p and m, both measured.
- local engine: its timeline is measured compute + simulated links (one process cannot run stages
  side by side), so the figure compared is that timeline's makespan, from the same run's medians;
  the sequential wall time of one step (all the work, no overlap) is printed next to it.
- distributed engine (``--distributed``): one process per stage, gloo on the CPU; the measured
  median step time. On a machine with fewer cores than ranks the stages share cores, and the
  pipeline overlap the schedules differ in cannot show: read it with the core count printed.

The memory probe (a saved-tensors hook) is off in every timed run. Run::

    .venv/bin/python bench/bench_wgrad.py                      # p=4, m=4, 80 layers
    .venv/bin/python bench/bench_wgrad.py --distributed        # and the distributed engine at p=2
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from dataclasses import replace

import torch

from course_lib.engines.local import LocalPipelineTrainer
from course_lib.reference import TrainConfig, train_batches
from course_lib.schedules.ir import Kind


def local_run(cfg: TrainConfig, schedule: str, stages: int, steps: int) -> dict:
    """Run `steps` batches (gradients only, no optimizer step) after one warm-up batch; returns
    per-kind durations, the sequential wall time per step, and the measured-compute makespan."""
    trainer = LocalPipelineTrainer(cfg, schedule, stages, track_memory=False)
    batches = list(train_batches(trainer.corpus, cfg, steps + 1))
    all_stats, walls = [], []
    for k, (x, y) in enumerate(batches):
        trainer.optimizer.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        _, stats = trainer.compute_gradients(x, y)
        if k > 0:  # the first batch pays for warm-up
            walls.append(time.perf_counter() - t0)
            all_stats.append(stats)
    timeline, _ = trainer.timeline_from(all_stats)
    durations: dict[Kind, list[list[float]]] = {
        kind: [[t for st in all_stats for t in st.durations.get((s, kind), [])] for s in range(stages)]
        for kind in (Kind.F, Kind.B, Kind.I, Kind.W)
    }
    return {"durations": durations, "wall": statistics.median(walls), "makespan": timeline.makespan}


def w_over_i(run: dict) -> tuple[float, list[float]]:
    """sum(W) / sum(I) over everything, and per stage."""
    i, w = run["durations"][Kind.I], run["durations"][Kind.W]
    per_stage = [sum(ws) / sum(is_) for is_, ws in zip(i, w, strict=True)]
    return sum(map(sum, w)) / sum(map(sum, i)), per_stage


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:8.1f} ms"


def report_ratio(zb: dict) -> None:
    total, per_stage = w_over_i(zb)
    medians = {k.name: [statistics.median(d) for d in zb["durations"][k]] for k in (Kind.F, Kind.I, Kind.W)}
    print("median per action and stage (ms):")
    for name, values in medians.items():
        print(f"  {name}: " + "  ".join(f"{v * 1e3:7.2f}" for v in values))
    print(f"W / I = {total:.2f}  (per stage: {', '.join(f'{r:.2f}' for r in per_stage)}; target <= 1.5)")


def report_steps(zb: dict, ofob: dict) -> None:
    print("local engine (measured compute + simulated links):")
    for name, run in (("1f1b", ofob), ("zb-h1", zb)):
        print(f"  {name:6s} makespan {ms(run['makespan'])}   sequential wall {ms(run['wall'])}")
    print(f"  zb-h1 / 1f1b makespan = {zb['makespan'] / ofob['makespan']:.3f}")


def distributed_steps(cfg: TrainConfig, steps: int) -> None:
    from course_lib.engines.distributed import launch, make_spec

    cfg = replace(cfg, steps=steps + 1)
    specs = [make_spec(cfg, name, 2, track_memory=False) for name in ("1f1b", "zb-h1")]
    results = launch(specs)
    print(f"distributed engine, p=2, gloo, {os.cpu_count()} cores (median step, first step left out):")
    step = {}
    for spec, result in zip(specs, results, strict=True):
        step[spec.schedule.name] = statistics.median(result.step_times_s[1:])
        print(f"  {spec.schedule.name:6s} {ms(step[spec.schedule.name])}")
    print(f"  zb-h1 / 1f1b = {step['zb-h1'] / step['1f1b']:.3f}")


def main() -> None:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("--stages", type=int, default=4)
    parser.add_argument("--steps", type=int, default=5, help="timed batches (after one warm-up batch)")
    parser.add_argument("--n-layers", type=int, default=TrainConfig.n_layers)
    parser.add_argument("--distributed", action="store_true", help="also the distributed engine at p=2")
    parser.add_argument("--threads", type=int, default=1, help="torch threads for the local runs")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    cfg = TrainConfig(n_layers=args.n_layers)
    print(f"{cfg.n_layers} layers, batch {cfg.batch_size}, m={cfg.microbatches}, p={args.stages}")
    zb = local_run(cfg, "zb-h1", args.stages, args.steps)
    ofob = local_run(cfg, "1f1b", args.stages, args.steps)
    report_ratio(zb)
    report_steps(zb, ofob)
    if args.distributed:
        distributed_steps(cfg, args.steps)


if __name__ == "__main__":
    main()
