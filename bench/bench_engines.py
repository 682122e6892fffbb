"""Benchmark the pipeline engines against what they should cost.

Part 1 (local engine): one step of the local engine against one step of the reference trainer, the
same model, weights, batch and micro-batches (the same compute, only run stage by stage in the
schedule's order). Target: local / reference <= 1.10. Each is the median of several steps after
warm-up; the two trainers alternate step by step, so load from other processes hits both alike.
Wall-clock and CPU-time (``time.process_time``, one thread) ratios are both printed: on a busy shared
machine the CPU-time one is the steadier.

Run::

    .venv/bin/python bench/bench_engines.py                          # 80 layers, 1F1B, p=4, m=4
    .venv/bin/python bench/bench_engines.py --schedule zb-h1 --stages 8 --steps 10
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import course_lib.engines  # noqa: F401  (registers the split backward of zero-bubble schedules)
from course_lib.shelf.local_engine import LocalPipelineTrainer
from course_lib.shelf.reference import TrainConfig, accumulate_gradients, corpus_and_model, make_optimizer


def timed(fn) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def bench_local_vs_reference(
    cfg: TrainConfig, schedule: str, stages: int, steps: int, warmup: int, track_memory: bool = False
) -> dict:
    """Median step times of the reference trainer and the local engine, and their ratios.

    The local engine's memory probe (a saved-tensors hook, about 10% of a step) is off by default:
    the reference trainer measures no memory, so this compares the same work."""
    corpus, reference = corpus_and_model(cfg)
    ref_opt = make_optimizer(reference, cfg)
    local = LocalPipelineTrainer(cfg, schedule, stages, corpus=corpus, track_memory=track_memory)
    gen = torch.Generator().manual_seed(cfg.seed)

    def reference_step(x, y):
        ref_opt.zero_grad(set_to_none=True)
        accumulate_gradients(reference, x, y, cfg.microbatches)
        ref_opt.step()

    ref_t, loc_t = [], []
    for i in range(warmup + steps):
        x, y = corpus.batch("train", cfg.batch_size, cfg.seq_len, gen)
        if i % 2 == 0:  # alternate who goes first, so neither always runs on a warmer cache
            ref_time = timed(lambda x=x, y=y: reference_step(x, y))
            loc_time = timed(lambda x=x, y=y: local.step(x, y))
        else:
            loc_time = timed(lambda x=x, y=y: local.step(x, y))
            ref_time = timed(lambda x=x, y=y: reference_step(x, y))
        if i >= warmup:
            ref_t.append(ref_time)
            loc_t.append(loc_time)
    med = {
        key: statistics.median(t[j] for t in times)
        for key, times, j in (
            ("reference_wall_s", ref_t, 0),
            ("local_wall_s", loc_t, 0),
            ("reference_cpu_s", ref_t, 1),
            ("local_cpu_s", loc_t, 1),
        )
    }
    # the median of per-step ratios: the two steps of a pair ran back to back, under the same load
    med["ratio_wall"] = statistics.median(lo[0] / re[0] for lo, re in zip(loc_t, ref_t, strict=True))
    med["ratio_cpu"] = statistics.median(lo[1] / re[1] for lo, re in zip(loc_t, ref_t, strict=True))
    return med


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=80)
    parser.add_argument("--schedule", default="1f1b")
    parser.add_argument("--stages", type=int, default=4)
    parser.add_argument("--microbatches", type=int, default=4)
    parser.add_argument("--steps", type=int, default=9, help="measured steps (median)")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: steadiest on a shared CPU)")
    parser.add_argument(
        "--track-memory", action="store_true", help="keep the local engine's memory probe on (about +10%%)"
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    cfg = TrainConfig(n_layers=args.layers, microbatches=args.microbatches)
    r = bench_local_vs_reference(cfg, args.schedule, args.stages, args.steps, args.warmup, args.track_memory)
    probe = "on" if args.track_memory else "off (like the reference)"
    print(
        f"local engine vs reference trainer: {args.layers} layers, {args.schedule}, p={args.stages}, "
        f"m={args.microbatches}, median of {args.steps} steps after {args.warmup} warm-up; "
        f"memory probe {probe}\n"
        f"  reference step {r['reference_wall_s'] * 1e3:.1f} ms wall, "
        f"{r['reference_cpu_s'] * 1e3:.1f} ms CPU\n"
        f"  local step     {r['local_wall_s'] * 1e3:.1f} ms wall, {r['local_cpu_s'] * 1e3:.1f} ms CPU\n"
        f"  ratio local / reference: {r['ratio_wall']:.3f} wall, {r['ratio_cpu']:.3f} CPU (target <= 1.10)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
