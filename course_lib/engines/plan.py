"""The plan of a pipeline run: which schedule, which partition, which device per stage, checked up front.

Both engines start here, so bad input (p, m, v, partition, checkpoint mode, device, links) is refused
with a clear message before a model is built, data is read or a process is started::

    from course_lib.shelf.reference import TrainConfig
    from course_lib.engines.plan import make_plan
    plan = make_plan(TrainConfig(n_layers=8), "1f1b", stages=4)
    print(plan.schedule); print(plan.partition.sizes, plan.devices)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

import course_lib.schedules  # noqa: F401  (registers every schedule by name in the shelf's registry)
from course_lib.balance import inflight_per_stage
from course_lib.shelf.costs import Link, per_boundary
from course_lib.shelf.devices import stage_devices
from course_lib.shelf.errors import require, whole
from course_lib.shelf.first_schedules import SCHEDULES, build_schedule, resolve_name
from course_lib.shelf.partition import Partition, uniform
from course_lib.shelf.reference import TrainConfig
from course_lib.shelf.schedule import Schedule
from course_lib.shelf.stage import check_checkpoint
from course_lib.shelf.validate import validate


@dataclass
class PipelinePlan:
    schedule: Schedule
    partition: Partition  # one entry per model stage (p * v of them)
    devices: list[torch.device]  # one per pipeline device (rank)
    checkpoint: str
    links: list[Link] | None  # one per stage boundary, or None for free links


def _as_partition(partition, n_layers: int, n_stages: int) -> Partition:
    if partition is None:
        return uniform(n_layers, n_stages)
    if not isinstance(partition, Partition):
        partition = Partition.from_sizes(partition)  # a list of layer counts per stage, checked there
    require(
        partition.n_stages == n_stages,
        f"partition {list(partition.sizes)} has {partition.n_stages} stages, but the schedule has "
        f"{n_stages} (stages x virtual); give one layer count per stage",
    )
    partition.check(n_layers)
    return partition


def _check_built(sched: Schedule, cfg: TrainConfig, stages: int | None, virtual: int | None) -> None:
    """A built schedule fixes m, the devices and the stages per device: given values must agree."""
    require(
        sched.n_microbatches == cfg.microbatches,
        f"schedule {sched.name!r} is for m={sched.n_microbatches} micro-batches, but the config "
        f"splits each batch into {cfg.microbatches}",
    )
    require(
        stages in (None, sched.n_devices),
        f"stages={stages!r} but schedule {sched.name!r} runs on {sched.n_devices} devices; leave stages "
        "out (a built schedule says how many devices it needs)",
    )
    require(
        virtual in (None, 1, sched.stages_per_device),
        f"virtual={virtual!r} but schedule {sched.name!r} has {sched.stages_per_device} stages per "
        "device; leave virtual out",
    )


def resolve_schedule(
    cfg: TrainConfig, schedule: str | Schedule, stages: int | None = 4, virtual: int | None = None
) -> Schedule:
    """The Schedule to run: a built one as given (its m, and `stages` / `virtual` if given, must
    agree), or one built by name for `stages` devices x `virtual` stages each (None: the registry's
    default_virtual, 2 for schedules that take v, else 1); validated either way
    (CourseError naming the fault). Every engine calls this, so a hand-made or latency-aware
    schedule runs wherever a name does."""
    if isinstance(schedule, Schedule):
        _check_built(schedule, cfg, stages, virtual)
        sched = schedule
    else:
        default = SCHEDULES[resolve_name(schedule)].default_virtual  # 2 for interleaving and V shapes
        stages, virtual = 4 if stages is None else stages, default if virtual is None else virtual
        stages, virtual = whole("stages", stages), whole("virtual", virtual)
        n_layers = cfg.n_layers + 2  # embedding + blocks + head
        require(
            stages * virtual <= n_layers,
            f"{stages} stages x {virtual} virtual = {stages * virtual} model stages cannot split "
            f"{n_layers} layers (embedding + {cfg.n_layers} blocks + head): every stage needs at least "
            f"one layer, so use at most {n_layers} stages in all",
        )
        sched = build_schedule(schedule, stages, cfg.microbatches, virtual)
    validate(sched)
    return sched


def make_plan(
    cfg: TrainConfig, schedule: str | Schedule = "1f1b", stages: int | None = 4, virtual: int | None = None,
    partition: Partition | Sequence[int] | None = None, checkpoint: str = "never",
    links: Link | Sequence[Link] | None = None,
) -> PipelinePlan:  # fmt: skip
    """Check everything and decide the layout; raises CourseError naming the bad value.
    With a built schedule, `stages` and `virtual` may be None (the schedule's own)."""
    cfg.check()
    check_checkpoint(checkpoint)
    sched = resolve_schedule(cfg, schedule, stages, virtual)
    part = _as_partition(partition, cfg.n_layers + 2, sched.n_stages)
    if links is not None:
        links = per_boundary(links, sched.n_stages - 1, "links")
        require(all(isinstance(x, Link) for x in links), f"links must be Link objects, got {links!r}")
    devices = stage_devices(sched.n_devices, cfg.device)
    if checkpoint == "never":  # every stage keeps its micro-batches' activations until their backward
        _check_fits(cfg, sched, part)
    return PipelinePlan(schedule=sched, partition=part, devices=devices, checkpoint=checkpoint, links=links)


def _check_fits(cfg: TrainConfig, sched: Schedule, part: Partition) -> None:
    """The schedule's activations, held as its order says (GPipe: all m micro-batches), must fit this
    machine's memory with everything else (``TrainConfig.check_fits``): refused before any work."""
    peaks = inflight_per_stage(sched)
    held = sum(k * size for k, size in zip(peaks, part.sizes, strict=True)) / part.n_layers
    cfg.check_fits(held, f"{sched.name} holds up to {max(peaks)} micro-batches' activations on a stage")
