"""The distributed engine under torchrun: one process per rank; rank 0 prints the summary.

    torchrun --nproc-per-node 2 -m course_lib.engines.distributed --schedule 1f1b --layers 8 --steps 5
    torchrun --nproc-per-node 2 -m course_lib.engines.distributed --schedule interleaved-1f1b \\
        --virtual-stages 2 --microbatches 4 --latency 0.05 --json

Several machines: the usual torchrun rendezvous flags, the same command on every node::

    torchrun --nnodes 2 --nproc-per-node 1 --node-rank 0 --rdzv-backend c10d \\
        --rdzv-endpoint HOST0:29500 -m course_lib.engines.distributed --schedule gpipe --layers 80
    (on the second node: the same with --node-rank 1)

The flags are those of ``python -m course_lib train --engine distributed`` (the groups of
course_lib/cli/flags.py), so each means the same in both. The ranks torchrun starts are the pipeline's
stages: ``--stages`` may be left out, and if given it must agree. Spell flags out under torchrun: it
reads ``-m`` and abbreviations such as ``--virtual`` as its own (``--virtual-stages`` is the same flag).

Backend: gloo on CPUs, NCCL with ``--device cuda`` (rank r uses its local GPU). A rank that fails
prints one line naming itself and its error; torchrun then tears the group down and names it too.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch.distributed as dist

from course_lib.cli import report_errors
from course_lib.cli.flags import (
    PipelineFlags,
    add_link_flags,
    add_model_flags,
    add_output_flags,
    add_pipeline_flags,
    config_from_flags,
)
from course_lib.engines.dist_launch import free_port, gather_and_merge, init_rank
from course_lib.engines.dist_result import DistributedResult
from course_lib.engines.dist_worker import RunSpec, run_rank
from course_lib.engines.distributed import make_spec
from course_lib.errors import require


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="torchrun --nproc-per-node P -m course_lib.engines.distributed",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    for add_group in (add_model_flags, add_pipeline_flags, add_link_flags, add_output_flags):
        add_group(parser)
    return parser


def spec_from_flags(args: argparse.Namespace, world: int) -> RunSpec:
    """Every flag checked, before this rank joins the others."""
    require(
        args.stages in (None, world),
        f"--stages {args.stages} but torchrun started {world} ranks (--nproc-per-node x --nnodes); "
        "leave --stages out: under torchrun the ranks are the stages",
    )
    pipe = PipelineFlags.from_args(args, stages=world)
    return make_spec(
        config_from_flags(args), pipe.schedule, world, virtual=pipe.virtual, checkpoint=pipe.checkpoint,
        links=pipe.links, timeout_s=pipe.timeout, threads=args.threads,
        local_ranks=int(os.environ.get("LOCAL_WORLD_SIZE", world)),
    )  # fmt: skip


def run_this_rank(spec: RunSpec, rank: int, world: int) -> DistributedResult | None:
    """Join the process group, run the schedule's actions for this rank; rank 0 gets the result."""
    if "MASTER_ADDR" not in os.environ:  # plain `python -m ...` with one rank
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    try:
        device = init_rank(spec, rank, world)
        result = gather_and_merge(spec, rank, run_rank(spec, rank, device))
    except Exception as err:
        print(f"[rank {rank}] failed: {type(err).__name__}: {err}", file=sys.stderr)
        if world == 1 and dist.is_initialized():  # in-process run: leave no process group behind
            dist.destroy_process_group()
        raise
    dist.destroy_process_group()
    return result


def _print_result(result: DistributedResult, args: argparse.Namespace) -> None:
    if args.gantt:
        from course_lib.plots import save_timeline_png

        save_timeline_png(result.timeline, args.gantt)
    if args.json:
        print(json.dumps(result.to_json()))
        return
    print(
        f"{result.schedule}: {result.ranks} ranks, {len(result.losses)} steps, "
        f"loss {result.losses[0]:.3f} -> {result.losses[-1]:.3f}; "
        f"median step {result.step_time_s * 1000:.1f} ms, bubble {result.bubble_fraction:.1%} (measured)"
    )
    if args.gantt:
        print(f"Gantt chart saved to {args.gantt}")


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    world, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    result = run_this_rank(spec_from_flags(args, world), rank, world)
    if result is not None:
        _print_result(result, args)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run as one rank under torchrun (RANK, WORLD_SIZE, MASTER_ADDR... come from torchrun)."""
    return report_errors(lambda: _main(argv))
