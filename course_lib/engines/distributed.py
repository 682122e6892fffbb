"""The distributed engine: one process per pipeline rank, real sends and receives, measured wall clock.

From a notebook or Python (spawns p processes on this machine, returns the result to the caller)::

    from course_lib.reference import TrainConfig
    from course_lib.engines.distributed import run_distributed
    from course_lib.links import Link
    r = run_distributed(TrainConfig(n_layers=8, steps=5), "1f1b", stages=2)
    r.losses, r.step_time_s, r.timeline.bubble_fraction        # measured
    r = run_distributed(TrainConfig(n_layers=8, steps=5), "1f1b", stages=2,
                        links=Link(latency_s=0.05))               # a 50 ms link between the stages

A built schedule runs as well as a name (one process per device of it), e.g. 1F1B with a deeper
warm-up to hide a slow link (``course_lib/schedules/latency_aware.py``)::

    from course_lib.schedules.latency_aware import latency_aware_1f1b
    r = run_distributed(TrainConfig(n_layers=8, steps=5, batch_size=8, microbatches=8),
                        latency_aware_1f1b(2, 8, extra_per_link=3), links=Link(latency_s=0.03))

From the shell, with torchrun (one process per rank; rank 0 prints the summary)::

    torchrun --nproc-per-node 2 -m course_lib.engines.distributed --schedule 1f1b --layers 8 --steps 5
    torchrun --nproc-per-node 2 -m course_lib.engines.distributed --schedule interleaved-1f1b \\
        --virtual-stages 2 --microbatches 4 --latency 0.05 --json

(Spell flags out under torchrun: it reads ``-m`` and abbreviations such as ``--virtual`` as its own.)

Several machines: the usual torchrun rendezvous flags, the same command on every node::

    torchrun --nnodes 2 --nproc-per-node 1 --node-rank 0 --rdzv-backend c10d \\
        --rdzv-endpoint HOST0:29500 -m course_lib.engines.distributed --schedule gpipe --layers 80
    (on the second node: the same with --node-rank 1)

Backend: gloo on CPUs, NCCL when the ranks run on GPUs (``--device cuda``: rank r uses its local
GPU). Failures: a rank that raises or dies stops every other rank within ``timeout_s`` (peers see
the closed connection at once; a rank that hangs is caught by the process group's timeout), and
the error names the failed rank and its exception. Under torchrun, torchrun itself tears the group
down and names the failed rank.
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace

from course_lib.devices import gpu_count
from course_lib.engines.dist_launch import DistributedError, launch
from course_lib.engines.dist_result import DistributedResult
from course_lib.engines.dist_worker import FAULT_KINDS, Fault, RunSpec
from course_lib.engines.plan import resolve_schedule
from course_lib.engines.runtime import CHECKPOINT_MODES
from course_lib.errors import require
from course_lib.links import Link
from course_lib.reference import TrainConfig
from course_lib.schedules.ir import Schedule

__all__ = ["DistributedError", "DistributedResult", "Fault", "launch", "make_spec", "run_distributed"]


def _per_boundary_links(links, n_boundaries: int) -> tuple[Link, ...] | None:
    if links is None:
        return None
    if isinstance(links, Link):
        return (links,) * n_boundaries
    require(
        isinstance(links, (list, tuple)) and all(isinstance(link, Link) for link in links),
        f"links must be a Link or a list of Links (one per stage boundary), got {links!r}",
    )
    require(
        len(links) == n_boundaries,
        f"got {len(links)} links but the pipeline has {n_boundaries} stage boundaries (stage s -> s+1); "
        "give one Link per boundary, or a single Link for all",
    )
    return tuple(links)


def _check_against_schedule(schedule: Schedule, stages, virtual) -> None:
    """A built schedule fixes the ranks and stages per rank: `stages` / `virtual`, if given, must agree."""
    p = schedule.n_devices
    require(
        stages is None or stages == p,
        f"stages={stages!r} but schedule {schedule.name!r} runs on {p} devices; leave stages out "
        "(a built schedule says how many ranks it needs)",
    )
    require(
        p >= 1 and schedule.n_stages % p == 0,
        f"schedule {schedule.name!r} puts {schedule.n_stages} stages on {p} devices; the distributed engine "
        "needs the same number of stages on every device",
    )
    require(
        virtual in (1, schedule.stages_per_device),
        f"virtual={virtual!r} but schedule {schedule.name!r} has {schedule.stages_per_device} stages per "
        "device; leave virtual out",
    )


def make_spec(
    cfg: TrainConfig,
    schedule: str | Schedule = "1f1b",
    stages: int | None = None,
    *,
    virtual: int = 1,
    partition: list[int] | tuple[int, ...] | None = None,
    links: Link | list[Link] | None = None,
    checkpoint: str = "never",
    timeout_s: float = 60.0,
    fault: Fault | None = None,
    return_grads: bool = False,
    threads: int | None = None,
    local_ranks: int | None = None,
    direction_groups: bool | None = None,
    track_memory: bool = True,
) -> RunSpec:
    """Check every input and build the spec; raises CourseError before any process starts.

    `schedule` is a name (built for `stages` ranks, default 2, x `virtual`) or a built Schedule, such
    as ``latency_aware_1f1b(2, 8, extra_per_link=3)``: then the schedule says how many ranks and
    stages per rank there are, and `stages` / `virtual` may be left out."""
    cfg.check()
    if isinstance(schedule, Schedule):
        _check_against_schedule(schedule, stages, virtual)
        stages, virtual = schedule.n_devices, schedule.stages_per_device
    elif stages is None:
        stages = 2
    require(
        isinstance(stages, int) and not isinstance(stages, bool) and stages >= 1,
        f"stages (pipeline ranks) must be a whole number >= 1, got {stages!r}",
    )
    require(
        checkpoint in CHECKPOINT_MODES,
        f"unknown checkpoint mode {checkpoint!r}; expected one of {', '.join(CHECKPOINT_MODES)}",
    )
    require(timeout_s > 0, f"timeout_s must be > 0 seconds, got {timeout_s!r}")
    device = cfg.device.strip().lower()
    require(
        device in ("cpu", "cuda", "auto"), f"the distributed engine runs on 'cpu' or 'cuda', got {device!r}"
    )
    local_ranks = local_ranks or stages  # ranks on this machine (torchrun: LOCAL_WORLD_SIZE)
    if device == "auto":
        device = "cuda" if gpu_count() >= local_ranks else "cpu"
    if device == "cuda":
        require(
            gpu_count() >= local_ranks,
            f"device 'cuda' needs one GPU per rank: {local_ranks} ranks here, but this machine has "
            f"{gpu_count()} GPUs",
        )
    if fault is not None:
        require(fault.how in FAULT_KINDS, f"fault.how must be one of {FAULT_KINDS}, got {fault.how!r}")
        require(0 <= fault.rank < stages, f"fault.rank must be in 0..{stages - 1}, got {fault.rank}")
    sched = resolve_schedule(cfg, schedule, stages, virtual)  # checks the name, p, m and v; validates
    n_layers = cfg.n_layers + 2  # embedding + blocks + head
    spec = RunSpec(
        cfg=replace(cfg, device=device),
        schedule=schedule,
        ranks=stages,
        virtual=virtual,
        partition_sizes=tuple(partition) if partition is not None else None,
        links=None,
        checkpoint=checkpoint,
        timeout_s=float(timeout_s),
        backend="nccl" if device == "cuda" else "gloo",
        # NCCL needs them (see comm.py); with gloo they are optional (the tests use them there)
        direction_groups=device == "cuda" if direction_groups is None else direction_groups,
        track_memory=track_memory,
        fault=fault,
        return_grads=return_grads,
        threads=threads or max(1, (os.cpu_count() or 1) // local_ranks),
    )
    spec.partition(n_layers).check(n_layers)  # checks the partition
    require(
        spec.partition(n_layers).n_stages == sched.n_stages,
        f"partition {list(partition or [])} has {len(partition or [])} stages but schedule "
        f"{sched.name!r} with {stages} ranks x {virtual} virtual has {sched.n_stages}",
    )
    return replace(spec, links=_per_boundary_links(links, sched.n_stages - 1))


def run_distributed(
    cfg: TrainConfig,
    schedule: str | Schedule = "1f1b",
    stages: int | None = None,
    *,
    timeout_s: float = 60.0,
    progress: bool = False,
    **options,
) -> DistributedResult:
    """Train with `stages` processes on this machine (gloo on CPU, NCCL with ``cfg.device='cuda'``).

    `schedule`: a name (``stages`` ranks, default 2) or a built Schedule (one process per device of it).

    Options (all checked before any process starts): ``virtual`` (stages per rank, interleaved),
    ``partition`` (layers per stage, embedding and head included), ``links`` (a Link or one per stage
    boundary: injected latency and bandwidth), ``checkpoint`` (never / except_last / always),
    ``fault`` (a Fault, to watch a failure), ``return_grads``, ``threads`` (torch threads per rank),
    ``track_memory`` (False: skip measuring bytes saved for backward, for like-for-like timing).
    A failed rank raises DistributedError within about `timeout_s`, naming the rank and its exception.
    ``progress=True`` shows a progress bar (steps done, last loss).
    """
    return launch([make_spec(cfg, schedule, stages, timeout_s=timeout_s, **options)], progress)[0]


if __name__ == "__main__":  # torchrun ... -m course_lib.engines.distributed: see course_lib/cli/torchrun.py
    from course_lib.cli.torchrun import main

    sys.exit(main())
