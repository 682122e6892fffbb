"""Flag groups shared by ``train`` and the torchrun entry point, so that a flag means the same in both.

Pipeline and link flags default to None, so that a command can tell a flag given from one left out
(``train`` refuses a flag its engine would not read); the defaults of those left out are
:class:`PipelineFlags`'s.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

from course_lib.engines.runtime import CHECKPOINT_MODES
from course_lib.errors import require
from course_lib.links import Link
from course_lib.reference import TrainConfig


def add_model_flags(parser: argparse.ArgumentParser) -> None:
    d = TrainConfig()
    group = parser.add_argument_group("model and training")
    group.add_argument("--layers", type=int, default=d.n_layers, help=f"blocks (default {d.n_layers})")
    group.add_argument("--width", type=int, default=d.d_model, help="d_model, divisible by --heads")
    group.add_argument("--heads", type=int, default=d.n_heads)
    group.add_argument("--seq-len", type=int, default=d.seq_len)
    group.add_argument("--steps", type=int, default=d.steps, help="optimizer steps (batches)")
    group.add_argument("--batch-size", type=int, default=d.batch_size, help="samples per batch")
    group.add_argument("--microbatches", "-m", type=int, default=d.microbatches, help="must divide the batch")
    group.add_argument("--lr", type=float, default=d.lr)
    group.add_argument("--seed", type=int, default=d.seed)
    group.add_argument(
        "--device", default=d.device, help="cpu, cuda, cuda:N or auto (distributed: cpu = gloo, cuda = NCCL)"
    )
    group.add_argument("--data", default=None, help="UTF-8 text file (default: data/corpus.txt)")
    group.add_argument(
        "--threads", type=int, help="torch CPU threads per process (default 1, as in the lessons; "
        "distributed: the cores shared among the ranks)",
    )  # fmt: skip


def config_from_flags(args: argparse.Namespace) -> TrainConfig:
    """The model and training flags as a checked TrainConfig (CourseError naming a bad value)."""
    require(
        args.threads is None or args.threads >= 1,
        f"--threads must be a whole number >= 1, got {args.threads}",
    )
    cfg = TrainConfig(
        n_layers=args.layers, d_model=args.width, n_heads=args.heads, seq_len=args.seq_len,
        batch_size=args.batch_size, microbatches=args.microbatches, steps=args.steps, lr=args.lr,
        seed=args.seed, data_path=args.data, device=args.device,
    )  # fmt: skip
    cfg.check()
    return cfg


def add_pipeline_flags(parser: argparse.ArgumentParser) -> argparse._ArgumentGroup:
    group = parser.add_argument_group("pipeline (engines local and distributed)")
    group.add_argument("--schedule", help="naive, gpipe, 1f1b, interleaved-1f1b, zb-h1 (default 1f1b)")
    group.add_argument(
        "--stages", "-p", type=int, help="pipeline devices = ranks (default 4; under torchrun: its ranks)"
    )
    # torchrun reads a bare --virtual as its own --virtual-local-rank: there, spell it --virtual-stages
    group.add_argument(
        "--virtual", "--virtual-stages", "-v", dest="virtual", type=int,
        help="stages per device, interleaved-1f1b (default 1)",
    )  # fmt: skip
    group.add_argument(
        "--checkpoint", help=f"activation checkpointing: {', '.join(CHECKPOINT_MODES)} (default never)"
    )
    group.add_argument(
        "--timeout", type=float,
        help="distributed engine: seconds before a silent peer is an error (default 60)",
    )  # fmt: skip
    return group


def add_link_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("links between stages (engines local and distributed)")
    group.add_argument("--latency", type=float, help="latency of every stage boundary, seconds (default 0)")
    group.add_argument("--bandwidth", type=float, help="bandwidth, bytes per second (default unlimited)")


def add_output_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("output")
    group.add_argument("--json", action="store_true", help="print one JSON object instead of a summary")
    group.add_argument(
        "--gantt", metavar="FILE.png", help="save the last step's Gantt chart (engines local and distributed)"
    )


@dataclass(frozen=True)
class PipelineFlags:
    """The pipeline and link flags, with the defaults of those left out."""

    schedule: str = "1f1b"
    stages: int = 4
    virtual: int = 1
    checkpoint: str = "never"
    links: Link | None = None  # None: free links
    timeout: float = 60.0  # seconds (distributed engine)

    @classmethod
    def from_args(cls, args: argparse.Namespace, **defaults) -> PipelineFlags:
        """`defaults` override the class defaults (torchrun: stages = its number of ranks)."""
        names = ("schedule", "stages", "virtual", "checkpoint", "timeout")
        given = {name: getattr(args, name) for name in names if getattr(args, name) is not None}
        if args.latency is not None or args.bandwidth is not None:  # one Link for every stage boundary
            # Link refuses a bad value (a bandwidth of 0 is not read as "unlimited")
            given["links"] = Link(args.latency or 0.0, math.inf if args.bandwidth is None else args.bandwidth)
        return cls(**(defaults | given))
