"""What goes into a distributed run (the RunSpec every rank gets) and what comes back (lessons 04c, 08).

The spec is checked by ``distributed_engine.make_spec``; the result holds the losses, step times,
memory and one measured Timeline per step.

The spec holds the pipeline's fields. A room widens a run where it asks for it: TP and DP
(``course_lib/tp/mesh.py``), an injected fault, torch's own runtime, injected links, paced ops, the
whole model's gradient rules (``course_lib/engines/``). Each puts its classes in ``rooms``, which
every rank composes with the shelf's ``rank_loop.PipelineRank`` (pickled by reference, so a rank
imports the room when it unpacks its spec), and its values in ``extras``.

Every rank records its own spans (start and end of each action, on the common clock set at the
start barrier), the messages it sent and when it waited for the ones it received. Rank 0 gathers
those records and ``merge_step`` turns them into a Timeline with source ``measured``:

- a span is one action's compute (waiting for an input is *not* inside it: that wait is bubble);
- a transfer starts when the sender handed the tensor over and ends when the receiver had it. The
  receiver only knows when its wait returned; if it had to wait, that is the arrival, otherwise
  the data was already there and the end is taken as the injected link's delivery time (or the
  hand-over, on a free link), capped at the moment the receiver asked.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

import torch

from course_lib.shelf.costs import Link
from course_lib.shelf.errors import require, typed_fields
from course_lib.shelf.first_schedules import SCHEDULES
from course_lib.shelf.model import Partition
from course_lib.shelf.reference import TrainConfig
from course_lib.shelf.schedule import Schedule
from course_lib.shelf.timeline import MEASURED, Span, Timeline, Transfer

if TYPE_CHECKING:  # p2p.py needs torch.distributed; the records only carry its events
    from course_lib.shelf.p2p import RecvEvent, SendEvent
    from course_lib.shelf.schedule import Action

# who executes the schedule: our engine (rank_loop.py), torch's own class for it, or torch's runtime fed
# our order as CSV (torch_pipelining.py)
RUNNERS = ("distributed", "torch", "torch-csv")
TORCH_RUNTIME = "_PipelineScheduleRuntime"  # torch's generic runtime, the one that reads a CSV order


def torch_class(runner: str, schedule: str) -> str | None:
    """The torch class that executes schedule `schedule` (a name) under `runner`; None: our engine."""
    if runner == "distributed":
        return None
    return TORCH_RUNTIME if runner == "torch-csv" else SCHEDULES[schedule].torch_class


def describe_runner(runner: str, schedule: str) -> str:
    """What executes the schedule: our engine, torch's class, or torch's runtime with our CSV."""
    cls = torch_class(runner, schedule)
    return runner if cls is None else cls + (" + our CSV" if runner == "torch-csv" else "")


@dataclass(frozen=True)
class RunSpec:
    """Everything a rank needs, checked by ``make_spec`` before any process starts."""

    cfg: TrainConfig
    schedule: Schedule  # built and validated (plain data: it pickles)
    partition: Partition  # layers per stage
    links: tuple[Link, ...] | None = None  # one per stage boundary; None: no injected delay
    checkpoint: str = "never"
    timeout_s: float = 60.0
    backend: str = "gloo"
    return_grads: bool = False
    threads: int = 1  # torch threads per rank
    direction_groups: bool = False  # one process group per direction of a pair (NCCL needs it)
    track_memory: bool = True  # measure bytes saved for backward (costs ~10% CPU on the toy model)
    world: int = 0  # processes in all; 0: one per pipeline rank (a room's layout may ask for more)
    runner: str = "distributed"  # one of RUNNERS
    rooms: tuple[type, ...] = ()  # classes a room widens each rank with (the module doc)
    extras: dict = field(default_factory=dict)  # the rooms' values (their names: the make_spec options)
    # the split backward's runtime class (a room's) when the schedule splits backward: unpickling it in a
    # rank imports its module, which registers it there too (a spawned rank starts with nothing loaded)
    split_runtime: type | None = None

    def __post_init__(self) -> None:
        typed_fields(self)  # threads, world, timeout_s: Python numbers, as a rank process reads them
        if not self.world:
            object.__setattr__(self, "world", self.ranks)

    @property
    def ranks(self) -> int:
        """p: pipeline ranks, the schedule's devices."""
        return self.schedule.n_devices

    @property
    def virtual(self) -> int:
        """Stages per rank."""
        return self.schedule.stages_per_device

    @property
    def runner_name(self) -> str:
        return describe_runner(self.runner, self.schedule.name)


@dataclass
class StepRecord:
    """One rank's one step as it measured it, on its common clock (seconds, see rank_loop.py)."""

    start: float
    end: float
    spans: list[tuple[Action, float, float]]  # (action, start, end) of each action's compute
    sends: list[SendEvent]
    recvs: list[RecvEvent]
    peak_saved_bytes: int  # the most bytes held for backward during the step
    grad_sync_s: float = 0.0  # syncing gradients after the flush (DP's all-reduce; 0 with one replica)
    cpu_s: float = 0.0  # CPU time of the rank's main thread in the step (waits cost none; less load-bound)

    @property
    def time_s(self) -> float:
        return self.end - self.start


@dataclass
class RankRecord:
    """What one rank hands rank 0 at the end of a run (``gather_and_merge``)."""

    stage: int  # its place in the pipeline (the pipeline rank, 0 .. p-1)
    global_rank: int  # its rank among all t x p x d processes
    steps: list[StepRecord]
    losses: list[float]  # per step, on a rank that holds the last stage; else empty
    n_params: int  # parameters counted once over the whole run (0 where another rank counts them)
    # one of the pipeline's ranks that make the timeline (with DP or TP: one pipeline)
    in_timeline: bool = True
    coords: tuple[int, ...] = ()  # a room's coordinates of the rank (TP x PP x DP: (dp, stage, tp))
    grads: dict[str, torch.Tensor] | None = None  # with return_grads: last step's gradients
    params: dict[str, torch.Tensor] | None = None  # with return_grads: weights after the last step


def merge_step(records: list[RankRecord], step: int, schedule: Schedule) -> Timeline:
    """One step of every rank, merged into one Timeline; times start at 0 (the earliest action)."""
    steps = [r.steps[step] for r in records]
    t_min = min((a[1] for st in steps for a in st.spans), default=0.0)
    spans = [
        Span(r.stage, a, s - t_min, e - t_min)
        for r, st in zip(records, steps, strict=True)
        for a, s, e in st.spans
    ]
    recvs = {ev.producer: ev for st in steps for ev in st.recvs}
    transfers = []
    for r, st in zip(records, steps, strict=True):
        for ev in st.sends:
            got = recvs.get(ev.producer)
            if got is None:
                continue
            if got.waited:  # the data was not there yet: its arrival is when the wait ended
                end = got.wait_end
            else:
                end = min(got.wait_end, max(ev.handoff, ev.deliver_at or ev.handoff))
            end = max(end, ev.handoff)  # clocks of different machines can disagree a little
            transfers.append(
                Transfer(r.stage, ev.dst, ev.producer, ev.handoff - t_min, end - t_min, ev.nbytes)
            )
    return Timeline(
        source=MEASURED, n_devices=schedule.n_devices, spans=spans, transfers=transfers,
        schedule_name=schedule.name, n_stages=schedule.n_stages, n_microbatches=schedule.n_microbatches,
    )  # fmt: skip


@dataclass
class DistributedResult:
    """The outcome of ``run_distributed`` (or of rank 0 under torchrun), whichever runner ran it. With
    TP and DP, the timeline is that of rank 0's pipeline (replica 0, TP rank 0 of every stage);
    gradients and weights are replica 0's, glued back into the full model's tensors and names."""

    schedule: str
    ranks: int
    losses: list[float]  # the batch's mean training loss, per step
    rank_step_times_s: list[list[float]]  # [rank][step]: wall clock of each rank's step
    timelines: list[Timeline]  # measured, one per step (none from torch's runners: no spans)
    peak_saved_bytes: list[list[int]]  # [rank][step]: most bytes held for backward during the step
    grads: dict[str, torch.Tensor] | None = None  # last step's gradients (return_grads=True)
    params: dict[str, torch.Tensor] | None = None  # weights after the last step (return_grads=True)
    config: dict = field(default_factory=dict)
    n_params: int = 0  # parameters of the whole model (every rank's stages)
    tp: int = 1  # tensor-parallel ranks per stage
    dp: int = 1  # data-parallel replicas (rank_step_times_s, peak_saved_bytes: one entry per rank of all)
    replica_weight_diff: float | None = None  # largest weight difference between replicas (return_grads)
    grad_sync_s: list[float] = field(default_factory=list)  # per step, the slowest rank's DP all-reduce
    rank_step_cpu_s: list[list[float]] = field(default_factory=list)  # [rank][step]: StepRecord.cpu_s
    runner: str = "distributed"  # RunSpec.runner, one of RUNNERS: who executed the schedule
    csv_text: str | None = None  # the CSV torch's runtime executed (runner "torch-csv")

    @property
    def timeline(self) -> Timeline:
        """The last step's measured Timeline (the first step also pays for warm-up)."""
        require(self.timelines, f"{self.runner_name} recorded no spans: step times here, no timeline")
        return self.timelines[-1]

    @property
    def runner_name(self) -> str:
        return describe_runner(self.runner, self.schedule)

    @property
    def bubble_fraction(self) -> float:
        return self.timeline.bubble_fraction

    @property
    def step_times_s(self) -> list[float]:
        """Per step, the slowest rank's time (the step ends when every rank is done): the same
        meaning as the reference's and the local engine's ``step_times_s``."""
        return [max(times) for times in zip(*self.rank_step_times_s, strict=True)]

    def step_times(self, skip_warmup: int = 1) -> list[float]:
        """``step_times_s`` after the first `skip_warmup` steps (they also pay for warm-up)."""
        per_step = self.step_times_s
        return per_step[skip_warmup:] if len(per_step) > skip_warmup else per_step

    @property
    def step_time_s(self) -> float:
        """Median step after the first (warm-up) step."""
        times = self.step_times()
        return statistics.median(times) if times else 0.0

    def to_json(self) -> dict:
        last = self.timelines[-1] if self.timelines else None
        return {
            "engine": "distributed", "runner": self.runner,
            "torch_class": torch_class(self.runner, self.schedule),  # None: our engine ran it
            "schedule": self.schedule, "losses": self.losses,
            "pipeline_ranks": self.ranks,  # p, the pipeline's devices; world = tp x p x dp processes
            "n_params": self.n_params, "step_time_s": self.step_time_s, "step_times_s": self.step_times_s,
            "rank_step_times_s": self.rank_step_times_s,
            "bubble_fraction": None if last is None else last.bubble_fraction,  # torch's runners: no spans
            "timeline_source": None if last is None else last.source,
            "peak_saved_bytes": [max(p) if p else 0 for p in self.peak_saved_bytes], "config": self.config,
            "tp": self.tp, "dp": self.dp, "world": self.tp * self.ranks * self.dp,
            "grad_sync_s": self.grad_sync_s,
        }  # fmt: skip


def build_result(records: list[RankRecord], spec: RunSpec) -> DistributedResult:
    """Rank 0's merge of every rank's record (by global rank; the pipeline's ranks make the timelines,
    where they recorded spans: torch's runtime records none). A room adds what it measured
    (``rank_loop.PipelineRank.merge``)."""
    records = sorted(records, key=lambda r: r.global_rank)
    pipeline = [r for r in records if r.in_timeline]
    n_steps = len(records[0].steps)
    grads = params = None
    if all(r.grads is not None for r in pipeline):
        grads = {name: g for r in pipeline for name, g in r.grads.items()}
        params = {name: w for r in pipeline for name, w in r.params.items()}
    schedule, losses = spec.schedule, next((r.losses for r in records if r.losses), [])
    return DistributedResult(
        schedule=schedule.name, ranks=schedule.n_devices, losses=losses,
        rank_step_times_s=[[st.time_s for st in r.steps] for r in records],
        timelines=[merge_step(pipeline, k, schedule) for k in range(n_steps) if pipeline[0].steps[k].spans],
        peak_saved_bytes=[[st.peak_saved_bytes for st in r.steps] for r in records],
        grads=grads, params=params, config=asdict(spec.cfg), n_params=sum(r.n_params for r in records),
        grad_sync_s=[max(r.steps[k].grad_sync_s for r in records) for k in range(n_steps)],
        rank_step_cpu_s=[[st.cpu_s for st in r.steps] for r in records], runner=spec.runner,
    )  # fmt: skip
