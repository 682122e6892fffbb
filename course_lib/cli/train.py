"""Train the toy transformer: ``python -m course_lib train [--engine E] [--json] [flags]``.

    python -m course_lib train                      # 80 layers, reference trainer, progress bar
    python -m course_lib train --layers 8 --steps 20 --json
    python -m course_lib train --engine local --schedule 1f1b --stages 4 --microbatches 8 --gantt 1f1b.png
    python -m course_lib train --engine distributed --schedule gpipe --stages 2 --latency 0.01 --json
    python -m course_lib train --engine local --schedule zb-h1 --stages 4 --steps 2 --check-reference --json

Engines: ``reference`` (one device, gradient accumulation: the ground truth), ``local`` (one process
runs every stage in the schedule's order; its timeline is *measured compute + simulated links*) and
``distributed`` (one process per stage, real sends and receives; its timeline is *measured*).

Every flag is checked before any work starts; a bad value is refused with a message that names it
and says what is allowed. ``--json`` prints one JSON object on stdout (the progress bar goes to
stderr), so the output can be piped into other tools. For the pipeline engines it adds
``bubble_fraction`` and ``timeline_source``, and ``max_grad_diff_vs_reference`` with
``--check-reference`` (largest gradient difference against the reference trainer on the first batch).
"""

from __future__ import annotations

import argparse
import json
import sys

from course_lib.engines.runtime import CHECKPOINT_MODES
from course_lib.errors import require
from course_lib.links import Link
from course_lib.reference import TrainConfig, train

ENGINES = ("reference", "local", "distributed")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = TrainConfig()
    parser.add_argument("--engine", default="reference", help=f"one of {', '.join(ENGINES)}")
    parser.add_argument("--layers", type=int, default=d.n_layers, help="transformer blocks (default 80)")
    parser.add_argument("--width", type=int, default=d.d_model, help="d_model, divisible by --heads")
    parser.add_argument("--heads", type=int, default=d.n_heads)
    parser.add_argument("--seq-len", type=int, default=d.seq_len)
    parser.add_argument("--steps", type=int, default=d.steps, help="optimizer steps (batches)")
    parser.add_argument("--batch-size", type=int, default=d.batch_size, help="samples per batch")
    parser.add_argument(
        "--microbatches", "-m", type=int, default=d.microbatches, help="must divide the batch"
    )
    parser.add_argument("--lr", type=float, default=d.lr)
    parser.add_argument("--seed", type=int, default=d.seed)
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto")
    parser.add_argument("--data", default=None, help="UTF-8 text file (default: data/corpus.txt)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a summary")
    pipe = parser.add_argument_group("pipeline (engines local and distributed)")
    pipe.add_argument("--schedule", default="1f1b", help="naive, gpipe, 1f1b, interleaved-1f1b, zb-h1")
    pipe.add_argument("--stages", "-p", type=int, default=4, help="pipeline devices (ranks)")
    pipe.add_argument("--virtual", "-v", type=int, default=1, help="stages per device (interleaved-1f1b)")
    pipe.add_argument("--latency", type=float, default=None, help="link latency per stage boundary, seconds")
    pipe.add_argument("--bandwidth", type=float, default=None, help="link bandwidth, bytes per second")
    pipe.add_argument(
        "--checkpoint", default="never", help=f"activation checkpointing: {', '.join(CHECKPOINT_MODES)}"
    )
    pipe.add_argument("--gantt", default=None, metavar="FILE.png", help="save the step's Gantt chart")
    pipe.add_argument(
        "--check-reference", action="store_true", help="compare gradients with the reference trainer"
    )


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    cfg = TrainConfig(
        n_layers=args.layers,
        d_model=args.width,
        n_heads=args.heads,
        seq_len=args.seq_len,
        batch_size=args.batch_size,
        microbatches=args.microbatches,
        steps=args.steps,
        lr=args.lr,
        seed=args.seed,
        data_path=args.data,
        device=args.device,
    )
    cfg.check()
    return cfg


def links_from_args(args: argparse.Namespace) -> Link | None:
    """--latency / --bandwidth -> one Link for every stage boundary (None: free links)."""
    if args.latency is None and args.bandwidth is None:
        return None
    return Link(latency_s=args.latency or 0.0, bandwidth_Bps=args.bandwidth or float("inf"))


def _run_local(cfg: TrainConfig, args: argparse.Namespace, progress: bool):
    from course_lib.engines.local import LocalPipelineTrainer

    options = dict(virtual=args.virtual, checkpoint=args.checkpoint, links=links_from_args(args))
    trainer = LocalPipelineTrainer(cfg, args.schedule, args.stages, **options)  # checks everything first
    diff = trainer.max_grad_diff_vs_reference() if args.check_reference else None
    result = trainer.train(progress=progress)
    return result, result.timeline, diff


def _run_distributed(cfg: TrainConfig, args: argparse.Namespace, progress: bool):
    # one process per rank (course_lib/engines/distributed.py); specs are checked before any spawn
    from dataclasses import replace

    from course_lib.engines import distributed

    options = dict(virtual=args.virtual, checkpoint=args.checkpoint, links=links_from_args(args))
    spec = distributed.make_spec(cfg, args.schedule, args.stages, **options)
    if not args.check_reference:
        result = distributed.launch([spec], progress)[0]
        return result, result.timeline, None
    # the gradient check is one more step from the same weights: run it in the same spawn of ranks
    probe = distributed.make_spec(
        replace(cfg, steps=1), args.schedule, args.stages, return_grads=True, **options
    )
    probe_result, result = distributed.launch([probe, spec], progress)
    return result, result.timeline, _grad_diff_vs_reference(cfg, probe_result.grads)


def _grad_diff_vs_reference(cfg: TrainConfig, grads: dict) -> float:
    """Largest difference between `grads` (one step, first batch) and the reference trainer's."""
    from course_lib.reference import max_grad_diff, reference_gradients

    return max_grad_diff(grads, reference_gradients(cfg)[1])


def run(args: argparse.Namespace) -> int:
    require(args.engine in ENGINES, f"unknown engine {args.engine!r}; expected one of {', '.join(ENGINES)}")
    cfg = config_from_args(args)
    progress = sys.stderr.isatty() or not args.json
    if args.engine == "reference":
        require(
            not args.check_reference and args.gantt is None,
            "--check-reference and --gantt need a pipeline engine (--engine local or distributed)",
        )
        result = train(cfg, progress=progress)
        out = result.to_json() | {"engine": args.engine}
        timeline = diff = None
    else:
        runner = _run_local if args.engine == "local" else _run_distributed
        result, timeline, diff = runner(cfg, args, progress)
        out = result.to_json() | {
            "engine": args.engine,
            "bubble_fraction": timeline.bubble_fraction,
            "timeline_source": timeline.source,
        }
        if diff is not None:
            out["max_grad_diff_vs_reference"] = diff
        if args.gantt:
            from course_lib.plots import save_timeline_png

            save_timeline_png(timeline, args.gantt)
    if args.json:
        print(json.dumps(out))
        return 0
    _print_summary(cfg, args, out, timeline, diff)
    return 0


def _print_summary(cfg: TrainConfig, args, out: dict, timeline, diff: float | None) -> None:
    losses = out["losses"]
    line = (
        f"trained {cfg.n_layers} layers ({out.get('n_params', 0):,} parameters) for {cfg.steps} steps, "
        f"{cfg.microbatches} micro-batches per batch, engine {args.engine}"
    )
    print(line)
    if "val_loss_start" in out and out.get("val_loss_end") is not None:
        drop = 1 - out["val_loss_end"] / out["val_loss_start"]
        print(f"held-out loss {out['val_loss_start']:.3f} -> {out['val_loss_end']:.3f} ({drop:.0%} lower)")
    elif losses:
        print(f"training loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    print(f"median step {out['step_time_s'] * 1000:.0f} ms (measured)")
    if timeline is not None:
        print(
            f"schedule {timeline.schedule_name}, {args.stages} devices: "
            f"bubble {timeline.bubble_fraction:.1%} "
            f"of the step ({timeline.source})"
        )
    if diff is not None:
        print(f"largest gradient difference against the reference trainer: {diff:.2e}")
    if args.gantt:
        print(f"Gantt chart saved to {args.gantt}")
