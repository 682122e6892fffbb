"""Scaling out: read costs off a measured run, replay them in the simulator, and write torchrun commands.

A run of the distributed engine gives Timelines with source "measured" (wall clock of real
processes). To see what the textbook model predicts for the *same* work, take the median time of
each action kind per stage from those Timelines and let the simulator replay the schedule with
them: any difference between the two charts is what the model leaves out (message costs, waiting
on a busy CPU, noise).

    from course_lib.lessons.scale_out import replay, torchrun_commands
    r = run_distributed(cfg, "1f1b", stages=2)                 # course_lib.shelf.distributed_engine
    sim = replay(r.timelines, build_schedule("1f1b", 2, cfg.microbatches))
    sim.source            # "measured compute + simulated links"
    print("\\n".join(torchrun_commands(nnodes=2, nproc_per_node=4)))
    pipeline_dashboard("1f1b", p=2, m=4, on_train=train_distributed_for)   # "train for real": processes

The commands are text for the lesson to show (a notebook cannot run torchrun on several machines).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from course_lib.shelf.costs import Link, costs_from
from course_lib.shelf.errors import require
from course_lib.shelf.schedule import Schedule
from course_lib.shelf.simulator import simulate
from course_lib.shelf.timeline import MEASURED_COMPUTE, Timeline


def replay(
    timelines: Sequence[Timeline], schedule: Schedule, links: Link | Sequence[Link] | None = None,
    boundary_bytes: int | Sequence[int] = 0, skip_warmup: int = 1,
) -> Timeline:  # fmt: skip
    """Simulate `schedule` with the costs measured in `timelines` (medians per stage, ``costs_from``;
    the first `skip_warmup` left out when there are more); source "measured compute + simulated links"."""
    costs = costs_from(timelines[skip_warmup:] if len(timelines) > skip_warmup else timelines)
    return simulate(schedule, costs, boundary_bytes=boundary_bytes, links=links, source=MEASURED_COMPUTE)


def torchrun_commands(
    nproc_per_node: int = 2, nnodes: int = 1, endpoint: str = "HOST0:29500",
    engine_args: str = "--schedule 1f1b --layers 80 --microbatches 8 --steps 20",
) -> list[str]:  # fmt: skip
    """The command to type on each node, from the course's folder (README.md, "Several machines"):
    torchrun's static rendezvous at `endpoint` (the first node's address as the others reach it, and a
    free port; one node: the loopback), the same command everywhere but for --node-rank."""
    for label, value in (("nproc_per_node", nproc_per_node), ("nnodes", nnodes)):
        require(isinstance(value, int) and value >= 1, f"{label} must be a whole number >= 1, got {value!r}")
    tail = f"-m course_lib.cli.torchrun {engine_args}".strip()
    if nnodes == 1:
        host, port, wait = "127.0.0.1", "29500", ""
    else:
        require(":" in endpoint, f"endpoint must be HOST:PORT of the first node, got {endpoint!r}")
        (host, port), wait = endpoint.rsplit(":", 1), " --rdzv-conf timeout=60"
    nodes = f"--nnodes {nnodes} " if nnodes > 1 else ""
    # across nodes, the course's own launcher: torchrun's launch, with a node whose peer never comes
    # answered in one line instead of torchrun's traceback (cli/torchrun.py)
    launcher = ".venv/bin/torchrun" if nnodes == 1 else ".venv/bin/python -m course_lib.cli.torchrun"
    return [
        f"{launcher} {nodes}--nproc-per-node {nproc_per_node}"
        + (f" --node-rank {rank}" if nnodes > 1 else "")
        + f" --master-addr {shlex.quote(host)} --master-port {port}{wait} {tail}"
        for rank in range(nnodes)
    ]


def train_distributed_for(
    config, control=None, n_layers: int = 80, steps: int = 3, seq_len: int = 32, max_ranks: int = 4
) -> Timeline:
    """The lesson dashboard's "train for real": run what its DashboardConfig says on real processes,
    one sequence per micro-batch, the link injected for real unless it is free; returns the last
    step's measured Timeline. More than `max_ranks` processes would only fight over the cores: refused.
    `control` (the dashboard's RunControl, the engines' ``stop(steps_done)``) hears of every step and
    ends the run, every process with it, when the dashboard's stop button is pressed."""
    import course_lib.engines  # noqa: F401  (the rooms: the link is injected for real by injected_links)
    from course_lib.shelf.distributed_engine import run_distributed
    from course_lib.shelf.reference import TrainConfig

    require(
        config.p <= max_ranks,
        f"train for real starts one process per device: p={config.p} is more than this lesson allows "
        f"({max_ranks}); the simulation above covers any p",
    )
    link = config.link
    inject = link.latency_s > 0 or link.bandwidth_Bps != float("inf")
    cfg = TrainConfig(
        n_layers=n_layers, steps=steps, seq_len=seq_len, batch_size=config.m, microbatches=config.m,
        eval_batches=1, device="auto",
    )  # fmt: skip
    if control is not None:
        control.steps = steps
    result = run_distributed(
        cfg, config.schedule, config.p, virtual=config.v, links=link if inject else None,
        progress=control is None, stop=control,
    )  # fmt: skip
    return result.timeline
