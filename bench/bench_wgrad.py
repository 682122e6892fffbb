"""Benchmark the zero-bubble split of backward: what a W costs next to its I, and what ZB-H1 buys.

Part 1, W / I: the local engine runs ZB-H1 on the 80-layer model (default TrainConfig: batch 16,
4 micro-batches) and times every I and every W (wall clock); the ratio is sum(W) / sum(I) over all
stages and micro-batches (per stage too). On a GPU a layer's weight gradient is one matmul like its
input gradient, so W / I is close to 1 (Qi et al. 2024, "Zero Bubble Pipeline Parallelism",
section 2); target here <= 1.5. On a shared machine wall clock swings with the load, so the same
ratio is also measured in CPU time (``time.process_time``) on each stage alone: F, then B, then F,
I and W again, alternating, with (I + W) / B, what the split costs over a full backward.

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

import course_lib.engines  # noqa: F401  (registers the split backward)
from course_lib.shelf.costs import StageCosts
from course_lib.shelf.first_schedules import build_schedule
from course_lib.shelf.local_engine import LocalPipelineTrainer
from course_lib.shelf.model import split_microbatches, stage_modules, uniform
from course_lib.shelf.reference import TrainConfig, corpus_and_model, first_batch, train_batches
from course_lib.shelf.schedule import Kind
from course_lib.shelf.simulator import simulate
from course_lib.shelf.stage import StageRuntime


def local_runs(cfg: TrainConfig, schedules: tuple[str, ...], stages: int, steps: int) -> dict[str, dict]:
    """Each schedule's local engine on the same `steps` batches (gradients only, no optimizer step),
    after one warm-up batch; the engines take turns batch by batch (the order swapped every batch),
    so load from other processes hits them alike. Per schedule: per-kind wall durations per stage,
    the sequential wall time per step, and the measured-compute makespan."""
    trainers = {name: LocalPipelineTrainer(cfg, name, stages, track_memory=False) for name in schedules}
    batches = list(train_batches(next(iter(trainers.values())).corpus, cfg, steps + 1))
    stats: dict[str, list] = {name: [] for name in schedules}
    walls: dict[str, list[float]] = {name: [] for name in schedules}
    for k, (x, y) in enumerate(batches):
        for name in schedules if k % 2 == 0 else reversed(schedules):
            trainers[name].optimizer.zero_grad(set_to_none=True)
            t0 = time.perf_counter()
            _, step_stats = trainers[name].compute_gradients(x, y)
            if k > 0:  # the first batch pays for warm-up
                walls[name].append(time.perf_counter() - t0)
                stats[name].append(step_stats)
    runs = {}
    for name, trainer in trainers.items():
        durations = {
            kind: [[t for st in stats[name] for t in st.durations.get((s, kind), [])] for s in range(stages)]
            for kind in (Kind.F, Kind.B, Kind.I, Kind.W)
        }
        makespan = trainer.timeline_from(stats[name])[0].makespan
        runs[name] = {"durations": durations, "wall": statistics.median(walls[name]), "makespan": makespan}
    return runs


def w_over_i(run: dict) -> tuple[float, list[float]]:
    """sum(W) / sum(I) over everything, and per stage."""
    i, w = run["durations"][Kind.I], run["durations"][Kind.W]
    per_stage = [sum(ws) / sum(is_) for is_, ws in zip(i, w, strict=True)]
    return sum(map(sum, w)) / sum(map(sum, i)), per_stage


def cpu_times(cfg: TrainConfig, stages: int, rounds: int) -> list[dict[str, float]]:
    """Median CPU seconds of F, B, I and W on each stage alone (one micro-batch), after one warm-up."""
    corpus, model = corpus_and_model(cfg)
    tokens, targets = split_microbatches(*first_batch(corpus, cfg), cfg.microbatches)[0]
    modules = stage_modules(model.layers, uniform(len(model.layers), stages))
    clock, inp, medians = time.process_time, tokens, []
    for s, module in enumerate(modules):
        rt = StageRuntime(s, stages, module, 1, track_memory=False, split_backward=True)
        seed = None if rt.is_last else torch.randn_like(rt.forward(0, inp, targets))
        rt.start_batch()
        kept: dict[str, list[float]] = {"F": [], "B": [], "I": [], "W": []}
        for k in range(rounds + 1):
            tf = clock()
            rt.forward(0, inp, targets)
            t0 = clock()
            rt.backward(0, seed)
            t1 = clock()
            rt.forward(0, inp, targets)
            t2 = clock()
            rt.backward_input(0, seed)
            t3 = clock()
            rt.backward_weight(0)
            t4 = clock()
            if k > 0:
                for key, t in (("F", t0 - tf), ("B", t1 - t0), ("I", t3 - t2), ("W", t4 - t3)):
                    kept[key].append(t)
        medians.append({key: statistics.median(v) for key, v in kept.items()})
        with torch.no_grad():
            inp = module(inp)
        rt.close()
    return medians


def report_cpu(medians: list[dict[str, float]], stages: int, m: int) -> None:
    total = {key: sum(t[key] for t in medians) for key in ("F", "B", "I", "W")}
    print("CPU time per stage alone, one micro-batch (ms), F / B / I / W:")
    for s, t in enumerate(medians):
        print(f"  stage {s}: " + " / ".join(f"{t[k] * 1e3:.2f}" for k in ("F", "B", "I", "W")))
    split = (total["I"] + total["W"]) / total["B"]
    print(f"  W / I = {total['W'] / total['I']:.2f}   (I + W) / B = {split:.2f}")
    f, b, i, w = ([t[k] for t in medians] for k in ("F", "B", "I", "W"))
    ofob = simulate(build_schedule("1f1b", stages, m), StageCosts.fused(f, b)).makespan
    zb = simulate(build_schedule("zb-h1", stages, m), StageCosts(f, i, w)).makespan
    print(f"  simulated with these costs: 1f1b {ms(ofob)}, zb-h1 {ms(zb)}, zb-h1 / 1f1b = {zb / ofob:.3f}")


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:8.1f} ms"


def report_ratio(zb: dict) -> None:
    total, per_stage = w_over_i(zb)
    medians = {k.name: [statistics.median(d) for d in zb["durations"][k]] for k in (Kind.F, Kind.I, Kind.W)}
    print("zb-h1 in the local engine, median wall time per action and stage (ms):")
    for name, values in medians.items():
        print(f"  {name}: " + "  ".join(f"{v * 1e3:7.2f}" for v in values))
    print(f"  W / I = {total:.2f}  (per stage: {', '.join(f'{r:.2f}' for r in per_stage)}; target <= 1.5)")


def report_steps(zb: dict, ofob: dict) -> None:
    print("local engine, the two on the same batches, taking turns (measured compute + simulated links):")
    for name, run in (("1f1b", ofob), ("zb-h1", zb)):
        print(f"  {name:6s} makespan {ms(run['makespan'])}   sequential wall {ms(run['wall'])}")
    print(f"  zb-h1 / 1f1b makespan = {zb['makespan'] / ofob['makespan']:.3f}")


def distributed_steps(cfg: TrainConfig, steps: int, rounds: int = 2) -> None:
    """Both schedules at p=2, `rounds` times each, taking turns in one launch (the ranks start once)."""
    from course_lib.shelf.distributed_engine import launch, make_spec

    cfg = replace(cfg, steps=steps + 1)
    names = ("1f1b", "zb-h1") * rounds
    results = launch([make_spec(cfg, name, 2, track_memory=False) for name in names])
    print(f"distributed engine, p=2, gloo, {os.cpu_count()} cores (median step, each run's first left out):")
    step = {}
    for name in names[:2]:
        times = [t for n, r in zip(names, results, strict=True) if n == name for t in r.step_times()]
        step[name] = statistics.median(times)
        print(f"  {name:6s} {ms(step[name])}")
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
    runs = local_runs(cfg, ("zb-h1", "1f1b"), args.stages, args.steps)
    report_ratio(runs["zb-h1"])
    report_cpu(cpu_times(cfg, args.stages, args.steps * 2), args.stages, cfg.microbatches)
    report_steps(runs["zb-h1"], runs["1f1b"])
    if args.distributed:
        distributed_steps(cfg, args.steps)


if __name__ == "__main__":
    main()
