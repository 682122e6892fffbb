"""The plan of a pipeline run: which schedule, which partition, which device per stage, checked up front.

Both engines start here, so bad input (p, m, v, partition, checkpoint mode, device, links) is refused
with a clear message before a model is built, data is read or a process is started::

    from course_lib.reference import TrainConfig
    from course_lib.engines.plan import make_plan
    plan = make_plan(TrainConfig(n_layers=8), "1f1b", stages=4)
    print(plan.schedule); print(plan.partition.sizes, plan.devices)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from course_lib.devices import stage_devices, uses_simulated_devices
from course_lib.engines.runtime import CHECKPOINT_MODES
from course_lib.errors import require
from course_lib.links import Link
from course_lib.partition import Partition, uniform
from course_lib.reference import TrainConfig
from course_lib.schedules.builders import build_schedule
from course_lib.schedules.ir import Schedule
from course_lib.schedules.validate import validate


@dataclass
class PipelinePlan:
    schedule: Schedule
    partition: Partition  # one entry per model stage (p * v of them)
    devices: list[torch.device]  # one per pipeline device (rank)
    simulated_devices: bool  # True when several pipeline devices share one real device
    checkpoint: str
    links: list[Link] | None  # one per stage boundary, or None for free links

    def device_of_stage(self, stage: int) -> torch.device:
        return self.devices[self.schedule.stage_to_device[stage]]


def _as_partition(partition, n_layers: int, n_stages: int) -> Partition:
    if partition is None:
        return uniform(n_layers, n_stages)
    if not isinstance(partition, Partition):
        sizes = list(partition)
        require(
            all(isinstance(s, int) for s in sizes),
            f"partition must be a Partition or a list of layer counts per stage, got {partition!r}",
        )
        partition = Partition.from_sizes(sizes)
    require(
        partition.n_stages == n_stages,
        f"partition {list(partition.sizes)} has {partition.n_stages} stages, but the schedule has "
        f"{n_stages} (stages x virtual); give one layer count per stage",
    )
    partition.check(n_layers)
    return partition


def _as_links(links, n_boundaries: int) -> list[Link] | None:
    if links is None:
        return None
    if isinstance(links, Link):
        return [links] * n_boundaries
    links = list(links)
    require(
        len(links) == n_boundaries and all(isinstance(x, Link) for x in links),
        f"links must be one Link or a list of {n_boundaries} Links (one per stage boundary), got {links!r}",
    )
    return links


def resolve_schedule(
    cfg: TrainConfig, schedule: str | Schedule, stages: int = 4, virtual: int = 1
) -> Schedule:
    """The Schedule to run: a built one as given (its m must be the config's), or one built by name
    for `stages` devices x `virtual` stages each; validated either way (CourseError naming the fault).
    Both engines call this, so a hand-made or latency-aware schedule runs wherever a name does."""
    if isinstance(schedule, Schedule):
        sched = schedule
        require(
            sched.n_microbatches == cfg.microbatches,
            f"schedule {sched.name!r} is for m={sched.n_microbatches} micro-batches, but the config "
            f"splits each batch into {cfg.microbatches}",
        )
    else:
        require(
            isinstance(stages, int) and stages >= 1, f"stages must be a whole number >= 1, got {stages!r}"
        )
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
    cfg: TrainConfig,
    schedule: str | Schedule = "1f1b",
    stages: int = 4,
    virtual: int = 1,
    partition: Partition | Sequence[int] | None = None,
    checkpoint: str = "never",
    links: Link | Sequence[Link] | None = None,
) -> PipelinePlan:
    """Check everything and decide the layout; raises CourseError naming the bad value."""
    cfg.check()
    require(
        checkpoint in CHECKPOINT_MODES,
        f"unknown checkpoint mode {checkpoint!r}; expected one of {', '.join(CHECKPOINT_MODES)}",
    )
    sched = resolve_schedule(cfg, schedule, stages, virtual)
    part = _as_partition(partition, cfg.n_layers + 2, sched.n_stages)
    return PipelinePlan(
        schedule=sched,
        partition=part,
        devices=stage_devices(sched.n_devices, cfg.device),
        simulated_devices=uses_simulated_devices(sched.n_devices, cfg.device),
        checkpoint=checkpoint,
        links=_as_links(links, sched.n_stages - 1),
    )
