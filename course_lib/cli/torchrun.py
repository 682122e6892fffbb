"""The distributed engine's torchrun entry point: this process is one rank; rank 0 prints the result.

    torchrun --nproc-per-node 2 -m course_lib.cli.torchrun --schedule 1f1b --layers 8 --steps 5

(More examples, and several machines: course_lib/engines/distributed.py.) The flags are ``train``'s
(course_lib/cli/flags.py), so each means the same in both. The ranks torchrun starts are the stages
(with ``--tp T --dp D``: T x stages x D of them): ``--stages`` may be left out, and must agree if
given. Spell flags out under torchrun: it reads ``-m`` and abbreviations such as ``--virtual`` as
its own (``--virtual-stages`` is the same flag). TP x PP x DP, 2 x 2 x 2::

    torchrun --nproc-per-node 8 -m course_lib.cli.torchrun --tp 2 --dp 2 --layers 8 --steps 5
"""

from __future__ import annotations

import argparse
import os
import sys

import torch.distributed as dist

from course_lib import netif  # multi-node: the interface towards the peers, threads, each node's line
from course_lib.cli import as_help, flags, report_errors
from course_lib.engines.dist_result import DistributedResult
from course_lib.engines.dist_worker import RunSpec, gather_and_merge, init_rank, run_rank
from course_lib.engines.distributed import make_spec
from course_lib.errors import require
from course_lib.launch import free_port


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="torchrun --nproc-per-node P -m course_lib.cli.torchrun", description=as_help(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    flags.add_model_flags(parser)
    flags.add_pipeline_flags(parser)
    flags.add_link_flags(parser)
    flags.add_output_flags(parser)
    return parser


def spec_from_flags(args: argparse.Namespace, world: int) -> RunSpec:
    """Every flag checked, before this rank joins the others."""
    tp, dp = args.tp or 1, args.dp or 1
    require(
        world % (tp * dp) == 0,
        f"torchrun started {world} ranks (--nproc-per-node x --nnodes), which --tp {tp} x --dp {dp} = "
        f"{tp * dp} does not divide; start t x p x d ranks",
    )
    stages = world // (tp * dp)
    require(
        args.stages in (None, stages),
        f"--stages {args.stages} but torchrun started {world} ranks (--nproc-per-node x --nnodes)"
        + (f" = --tp {tp} x --dp {dp} x {stages} stages" if tp * dp > 1 else "")
        + "; leave --stages out: under torchrun the ranks (divided by --tp x --dp) are the stages",
    )
    pipe = flags.PipelineFlags.from_args(args, stages=stages)
    return make_spec(
        flags.config_from_flags(args), pipe.schedule, stages, virtual=pipe.virtual,
        checkpoint=pipe.checkpoint, links=pipe.links, timeout_s=pipe.timeout,
        threads=args.threads or netif.default_threads(),  # multi-node: 1 per rank (netif.py says why)
        local_ranks=int(os.environ.get("LOCAL_WORLD_SIZE", world)), tp=tp, dp=dp,
    )  # fmt: skip


def run_this_rank(spec: RunSpec, rank: int, world: int) -> DistributedResult | None:
    """Join the process group, run the schedule's actions for this rank; rank 0 gets the result."""
    if "MASTER_ADDR" not in os.environ:  # plain `python -m ...` with one rank
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    netif.use_interface_towards(os.environ["MASTER_ADDR"])  # across nodes: not the loopback
    try:
        device = init_rank(spec, rank, world)
        record = run_rank(spec, rank, device)
        result = gather_and_merge(spec, rank, record)
        # across nodes, every rank says it finished
        netif.print_node_finished(rank, [st.time_s for st in record.steps])
    except Exception as err:
        print(f"[rank {rank}] failed: {type(err).__name__}: {err}", file=sys.stderr)
        if world == 1 and dist.is_initialized():  # in-process run: leave no process group behind
            dist.destroy_process_group()
        raise
    dist.destroy_process_group()
    return result


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    world, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    result = run_this_rank(spec_from_flags(args, world), rank, world)
    if result is None:  # ranks other than 0
        return 0
    if args.json:
        flags.print_json(result.to_json())
    else:
        mesh = f" x tp {result.tp} x dp {result.dp}" if result.tp * result.dp > 1 else ""
        print(
            f"{result.schedule}: {result.ranks} pipeline ranks{mesh}, {len(result.losses)} steps, "
            f"training loss {result.losses[0]:.3f} -> {result.losses[-1]:.3f}; "
            f"median step {result.step_time_s * 1000:.1f} ms, bubble {result.bubble_fraction:.1%} (measured)"
        )
    flags.save_chart(result.timeline, args)  # after the result: a failed save cannot lose it
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run as one rank under torchrun (RANK, WORLD_SIZE, MASTER_ADDR... come from torchrun)."""
    return report_errors(lambda: _main(argv))


if __name__ == "__main__":  # torchrun -m course_lib.cli.torchrun (the old path runs this too)
    sys.exit(main())
