"""Train the toy transformer: ``python -m course_lib train [--json] [flags]``.

    python -m course_lib train                      # 80 layers, reference trainer, progress bar
    python -m course_lib train --layers 8 --steps 20 --json

Every flag is checked before any work starts; a bad value is refused with a message that names it
and says what is allowed. ``--json`` prints one JSON object on stdout (the progress bar goes to
stderr), so the output can be piped into other tools.
"""

from __future__ import annotations

import argparse
import json
import sys

from course_lib.reference import TrainConfig, train

ENGINES = ("reference",)


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


def run(args: argparse.Namespace) -> int:
    from course_lib.errors import CourseError

    if args.engine not in ENGINES:
        raise CourseError(f"unknown engine {args.engine!r}; expected one of {', '.join(ENGINES)}")
    cfg = config_from_args(args)
    result = train(cfg, progress=sys.stderr.isatty() or not args.json)
    out = result.to_json() | {"engine": args.engine}
    if args.json:
        print(json.dumps(out))
        return 0
    drop = 1 - result.val_loss_end / result.val_loss_start
    print(
        f"trained {result.n_layers} layers ({result.n_params:,} parameters) for {cfg.steps} steps, "
        f"{cfg.microbatches} micro-batches per batch\n"
        f"held-out loss {result.val_loss_start:.3f} -> {result.val_loss_end:.3f} ({drop:.0%} lower), "
        f"median step {result.step_time_s * 1000:.0f} ms (measured)"
    )
    return 0
