"""The local engine: one process runs every stage in a schedule's order, and trains (lessons 02-05).

    from course_lib.shelf.reference import TrainConfig
    from course_lib.shelf.local_engine import LocalPipelineTrainer
    trainer = LocalPipelineTrainer(TrainConfig(n_layers=8, steps=5), schedule="1f1b", stages=4)
    result = trainer.train()
    result.losses, result.timeline.bubble_fraction, result.peak_saved_bytes

**The plan** comes first (``make_plan``, which the distributed engine calls too): the schedule (by
name from the registry, or a built one), the partition of the model's layers, one device per
pipeline device (``stage_devices``) and the links; all of it checked, so bad input is refused with a
clear message before a model is built or data is read, and a schedule whose activations cannot fit
this machine's memory is refused too (``TrainConfig.check_fits``: the room ``engines/memory_fit.py``).

**The run.** The engine runs the schedule's actions one at a time, in the validator's global order
(``execution_order``), each on its stage's ``StageRuntime`` (``stage.py``), and times each one. One
process cannot run stages side by side, so the Timeline is made by giving the *measured* per-stage
F / B / W times (median per stage and kind) and the chosen links to the simulator: its source is
"measured compute + simulated links".

Synchronous training: gradients of the m micro-batches add up, and the optimizer steps once per
batch, after the flush (just before it, ``finish_gradients`` sums a tied embedding's two copies and
clips by the whole model's norm). Loss and gradients equal the reference trainer's (tests check every
schedule); ``max_grad_diff_vs_reference`` checks one batch. Lesson 14's stale weights wrap this
trainer from a room (``course_lib/engines/stale.py``).

One file over 300 lines, read whole: the plan, the loop over actions, and its measurements.
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import torch

from course_lib.shelf.costs import Link, StageCosts, costs_from_durations, per_boundary
from course_lib.shelf.errors import require, whole
from course_lib.shelf.first_schedules import SCHEDULES, build_schedule, resolve_name
from course_lib.shelf.model import (
    Corpus,
    Partition,
    count_parameters,
    split_microbatches,
    stage_modules,
    uniform,
)
from course_lib.shelf.reference import (
    TrainConfig,
    TrainResult,
    clip_coefficient,
    copy_tied_weight,
    corpus_and_model,
    first_batch,
    head_weight,
    make_optimizer,
    max_grad_diff,
    reference_gradients,
    scale_grads,
    squared_norm,
    sum_tied_grads,
    train_batches,
)
from course_lib.shelf.reference import evaluate as held_out_loss
from course_lib.shelf.schedule import Action, Kind, Schedule, producer_of
from course_lib.shelf.simulator import simulate
from course_lib.shelf.stage import StageRuntime, check_checkpoint, stage_devices, synchronize
from course_lib.shelf.timeline import MEASURED_COMPUTE, Timeline
from course_lib.shelf.validate import execution_order, validate


# ---- the plan ----------------------------------------------------------------------------------
@dataclass
class PipelinePlan:
    """A run's layout, checked: every engine starts from one."""

    schedule: Schedule
    partition: Partition  # one entry per model stage (p * v of them)
    devices: list[torch.device]  # one per pipeline device (rank)
    checkpoint: str
    links: list[Link] | None  # one per stage boundary, or None for free links


def resolve_schedule(
    cfg: TrainConfig, schedule: str | Schedule, stages: int | None = 4, virtual: int | None = None
) -> Schedule:
    """The Schedule to run, validated: a built one as given (its m must be the config's, and `stages`
    / `virtual`, if given, its own), or one built by name for `stages` devices x `virtual` stages each
    (None: the registry's default_virtual, 2 for schedules that take v, else 1)."""
    if isinstance(schedule, Schedule):
        validate(schedule)  # first: a broken schedule gets the validator's message, as everywhere
        name = schedule.name
        require(
            schedule.n_microbatches == cfg.microbatches,
            f"schedule {name!r} is for m={schedule.n_microbatches} micro-batches, but the config "
            f"splits each batch into {cfg.microbatches}",
        )
        require(
            stages in (None, schedule.n_devices),
            f"stages={stages!r} but schedule {name!r} runs on {schedule.n_devices} devices; leave stages "
            "out (a built schedule says how many devices it needs)",
        )
        require(
            virtual in (None, 1, schedule.stages_per_device),
            f"virtual={virtual!r} but schedule {name!r} has {schedule.stages_per_device} stages per "
            "device; leave virtual out",
        )
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
        schedule = build_schedule(schedule, stages, cfg.microbatches, virtual)
    validate(schedule)
    require(
        not getattr(schedule, "forward_only", False),
        f"schedule {schedule.name!r} is forward only (inference): the engines train, so they need a "
        "schedule with a backward for every forward",
    )
    return schedule


def inflight_per_stage(schedule: Schedule) -> list[int]:
    """Most micro-batches whose activations each stage holds at once, read off the schedule's order
    (a forward adds one, the backward that finishes it, B or W, releases it)."""
    release = Kind.W if schedule.split_backward else Kind.B
    peak = [0] * schedule.n_stages
    for order in schedule.orders:
        held: dict[int, int] = {}
        for a in order:
            held[a.stage] = held.get(a.stage, 0) + (a.kind is Kind.F) - (a.kind is release)
            peak[a.stage] = max(peak[a.stage], held[a.stage])
    return peak


# a room that reads layout strings for `partition` (course_lib/stage_layout.py) registers its reader:
# (cfg, schedule, stages, virtual, text) -> (the built schedule, the partition)
LAYOUT_READERS: list[Callable] = []


def make_plan(
    cfg: TrainConfig, schedule: str | Schedule = "1f1b", stages: int | None = 4, virtual: int | None = None,
    partition: Partition | Sequence[int] | None = None, checkpoint: str = "never",
    links: Link | Sequence[Link] | None = None,
) -> PipelinePlan:  # fmt: skip
    """Check everything and decide the layout; raises CourseError naming the bad value. `partition`:
    a Partition, layer counts per stage (default: uniform), or a Megatron layout string such as
    "Ett|tt|ttL" (read by the room ``course_lib/stage_layout.py``: its stages over `stages` ranks,
    default one rank per stage). With a built schedule, `stages` and `virtual` may be None (the
    schedule's own)."""
    cfg.check()
    check_checkpoint(checkpoint)
    if isinstance(partition, str):  # a Megatron layout string: it says the stages, and its room reads it
        require(
            bool(LAYOUT_READERS),
            f"partition {partition!r} is a layout string, which the room course_lib.stage_layout reads: "
            "import it first (course_lib.lesson and the command line do), or give layer counts per stage",
        )
        schedule, partition = LAYOUT_READERS[-1](cfg, schedule, stages, virtual, partition)
        stages = virtual = None
    sched = resolve_schedule(cfg, schedule, stages, virtual)
    n_layers = cfg.n_layers + 2
    if partition is None:
        partition = uniform(n_layers, sched.n_stages)
    elif not isinstance(partition, Partition):
        partition = Partition.from_sizes(partition)  # a list of layer counts per stage, checked there
    require(
        partition.n_stages == sched.n_stages,
        f"partition {list(partition.sizes)} has {partition.n_stages} stages, but the schedule has "
        f"{sched.n_stages} (stages x virtual); give one layer count per stage",
    )
    partition.check(n_layers)
    if links is not None:
        links = per_boundary(links, sched.n_stages - 1, "links")
        require(all(isinstance(x, Link) for x in links), f"links must be Link objects, got {links!r}")
    if checkpoint == "never":  # each stage keeps its micro-batches' activations until their backward:
        peaks = inflight_per_stage(sched)  # as many as the order holds at once (GPipe: all m)
        why = f"{sched.name} holds up to {max(peaks)} micro-batches' activations on a stage"
        cfg.check_fits(peaks, partition.sizes, why)
    devices = stage_devices(sched.n_devices, cfg.device)
    return PipelinePlan(sched, partition, devices, checkpoint, links)


# ---- the engine --------------------------------------------------------------------------------
class TrainingStopped(KeyboardInterrupt):
    """Raised when a run's `stop` callable says so (a dashboard's Stop button). A KeyboardInterrupt,
    so that whatever already ends a run on Ctrl-C ends it on this too, and `except Exception` does not
    swallow it. Raised before an action starts: the trainer can train again (each batch starts afresh)."""


@dataclass
class StepStats:
    """What one step measured: seconds per action, memory, bytes crossing each boundary."""

    durations: dict[tuple[int, Kind], list[float]] = field(default_factory=lambda: defaultdict(list))
    stash_bytes: dict[int, list[int]] = field(default_factory=lambda: defaultdict(list))  # per F
    boundary_bytes: dict[int, int] = field(default_factory=dict)  # boundary s -> s+1: activation size
    peak_saved_bytes: list[int] = field(default_factory=list)  # per stage, within the step
    peak_device_bytes: list[int] = field(default_factory=list)  # per device, sampled between actions
    peak_inflight: list[int] = field(default_factory=list)  # per stage


@dataclass(kw_only=True)
class PipelineResult(TrainResult):
    """The reference trainer's result, plus the timeline and what the stages held."""

    timeline: Timeline  # measured compute + simulated links
    costs: StageCosts  # the measured medians the timeline was simulated from
    peak_saved_bytes: list[int]  # per stage: most bytes held for backward in any step
    peak_device_bytes: list[int]  # per device (sum of its stages), sampled between actions
    peak_inflight: list[int]  # per stage: most micro-batches held at once
    schedule: str = ""

    def to_json(self) -> dict:
        return super().to_json() | {
            "schedule": self.schedule, "bubble_fraction": self.timeline.bubble_fraction,
            "timeline_source": self.timeline.source, "simulated_step_time_s": self.timeline.makespan,
            "peak_saved_bytes": self.peak_saved_bytes, "peak_device_bytes": self.peak_device_bytes,
            "peak_inflight": self.peak_inflight,
        }  # fmt: skip


def _most(per_step: Sequence[list[int]]) -> list[int]:
    """The largest value at each position (stage or device) over the steps."""
    return [max(column) for column in zip(*per_step, strict=True)]


class LocalPipelineTrainer:
    """Trains the toy model with a pipeline schedule in one process (see the module docstring)."""

    def __init__(
        self,
        cfg: TrainConfig,
        schedule: str | Schedule = "1f1b",
        stages: int | None = None,  # None: 4 for a schedule by name, the schedule's own for a built one
        virtual: int | None = None,  # None: the schedule's default (2 if it takes v, else 1)
        partition: Partition | Sequence[int] | None = None,
        checkpoint: str = "never",
        links: Link | Sequence[Link] | None = None,
        corpus: Corpus | None = None,  # already loaded (default: read cfg.data_path or the shipped one)
        track_memory: bool = True,  # False: skip measuring bytes saved for backward (for timing)
    ):
        # every check first: nothing is built or read if any input is bad
        self.plan = make_plan(cfg, schedule, stages, virtual, partition, checkpoint, links)
        self.cfg = cfg
        self.schedule = self.plan.schedule
        self.order: list[Action] = execution_order(self.schedule)  # the validator's global order
        self.corpus, self.model = corpus_and_model(cfg, corpus)
        copy_tied_weight(self.model.layers)  # tied embeddings: the last stage holds its own copy
        self.sum_tied = True  # False (lesson 16 only): the copies' gradients are not summed, and drift
        self.stage_modules = stage_modules(self.model.layers, self.plan.partition)
        n = self.schedule.n_stages
        self.runtimes = [
            StageRuntime(
                s, n, mod, cfg.microbatches, checkpoint, self.plan.devices[self.schedule.device_of(s)],
                track_memory=track_memory, split_backward=self.schedule.split_backward,
                precision=cfg.precision,
            )
            for s, mod in enumerate(self.stage_modules)
        ]  # fmt: skip
        self.optimizer = make_optimizer(self.model, cfg)

    # ---- one batch -----------------------------------------------------------------------------
    def compute_gradients(
        self, x: torch.Tensor, y: torch.Tensor, stop: Callable[[], bool] | None = None
    ) -> tuple[float, StepStats]:
        """Run every action of the schedule on one batch; gradients end up in ``.grad``. Returns the
        batch's mean loss and what was measured. No optimizer step. `stop` is asked before each
        action; True raises TrainingStopped."""
        stats = StepStats()
        batch = split_microbatches(x, y, self.cfg.microbatches)
        for rt in self.runtimes:
            rt.start_batch()
        outputs: dict[Action, torch.Tensor] = {}  # outputs waiting for the action that consumes them
        device_peak = [0] * self.schedule.n_devices
        for action in self.order:
            if stop is not None and stop():
                raise TrainingStopped(f"stopped on request before {action}")
            tokens, targets = batch[action.microbatch]
            if (producer := producer_of(action, self.schedule)) is not None:
                inp = outputs.pop(producer)
            else:  # no producer: stage 0's F reads token ids, the last stage's backward starts from the loss
                inp = tokens if action.kind is Kind.F else None  # (and W needs no input)
            out = self.run_action(action, inp, targets, stats)
            if out is not None:
                outputs[action] = out
            d = self.schedule.device_of(action.stage)
            held = sum(self.runtimes[s].saved_bytes() for s in self.schedule.stages_of(d))
            device_peak[d] = max(device_peak[d], held)
        stats.peak_saved_bytes = [rt.peak_saved_bytes for rt in self.runtimes]
        stats.peak_inflight = [rt.peak_inflight for rt in self.runtimes]
        stats.peak_device_bytes = device_peak
        self.finish_gradients()
        return self.runtimes[-1].loss(), stats

    def finish_gradients(self) -> None:
        """After the flush, before the optimizer: the tied copies' gradients summed (one add: every stage
        is in this process), then the whole model's gradient norm clipped, the tied weight counted once."""
        cfg, layers = self.cfg, self.model.layers
        if cfg.tie_embeddings and self.sum_tied:
            sum_tied_grads(layers[0].token.weight, layers[-1].out.weight)
        if cfg.clip_grad_norm is not None:
            copy = head_weight(cfg.n_layers) if cfg.tie_embeddings else None
            counted = [p.grad for name, p in self.model.named_parameters() if name != copy]
            scale_grads(self.model.parameters(), clip_coefficient(squared_norm(counted), cfg.clip_grad_norm))

    def run_action(
        self, action: Action, inp: torch.Tensor | None, targets: torch.Tensor, stats: StepStats
    ) -> torch.Tensor | None:
        """Run one action, timed (GPUs synchronised on both sides, so a time is the work's and not
        the launch's); note what a forward stashed and the size of what it passes on. A door: lesson
        16's memory trace notes what each stage holds after it (``lessons/held_memory.py``)."""
        rt = self.runtimes[action.stage]
        before = rt.saved_bytes()
        synchronize(self.plan.devices)
        t0 = time.perf_counter()
        out = rt.run(action, inp, targets)
        synchronize(self.plan.devices)
        stats.durations[(action.stage, action.kind)].append(time.perf_counter() - t0)
        if action.kind is Kind.F:
            stats.stash_bytes[action.stage].append(rt.saved_bytes() - before)
            if out is not None:
                stats.boundary_bytes[action.stage] = out.nbytes
        return out

    # ---- timeline ------------------------------------------------------------------------------
    def timeline_from(self, steps: Sequence[StepStats]) -> tuple[Timeline, StageCosts]:
        """Simulate the schedule with the measured medians (per stage and kind) and the plan's links."""
        n = self.schedule.n_stages
        keys = {key for st in steps for key in st.durations}
        pooled = {key: [t for st in steps for t in st.durations.get(key, [])] for key in keys}
        stashed = [[b for st in steps for b in st.stash_bytes.get(s, [])] for s in range(n)]
        costs = costs_from_durations(pooled, n, "median")
        timeline = simulate(
            self.schedule, costs, boundary_bytes=[steps[-1].boundary_bytes.get(s, 0) for s in range(n - 1)],
            links=self.plan.links, stash_bytes=[int(statistics.median(b)) if b else 0 for b in stashed],
            source=MEASURED_COMPUTE,
        )  # fmt: skip
        return timeline, costs

    # ---- training ------------------------------------------------------------------------------
    def train_step(
        self, x: torch.Tensor, y: torch.Tensor, stop: Callable[[], bool] | None = None
    ) -> tuple[float, StepStats]:
        """One batch: its gradients, then one optimizer step, after the flush. Returns the batch's
        mean loss and what was measured."""
        self.optimizer.zero_grad(set_to_none=True)
        loss, stats = self.compute_gradients(x, y, stop)
        self.optimizer.step()
        return loss, stats

    def evaluate(self) -> float:
        """Held-out loss over the same fixed batches the reference trainer uses."""
        return held_out_loss(self._forward, self.corpus, self.cfg)

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        for rt in self.runtimes:
            x = rt.module(x.to(rt.device))
        return x

    def train(
        self, steps: int | None = None, progress: bool = True, stop: Callable[[int], bool] | None = None
    ) -> PipelineResult:
        """Train for `steps` batches (default cfg.steps) on the same batches the reference sees.
        `stop(steps_done)` is asked before every action (so it also hears of progress); True stops
        the run there with TrainingStopped."""
        from tqdm.auto import tqdm

        steps = self.cfg.steps if steps is None else steps
        val_start = self.evaluate()
        losses, times, all_stats = [], [], []
        batches = train_batches(self.corpus, self.cfg, steps)
        bar = tqdm(batches, total=steps, desc=f"local {self.schedule.name}", disable=not progress)
        asked = None if stop is None else (lambda: stop(len(losses)))
        for x, y in bar:
            t0 = time.perf_counter()
            loss, stats = self.train_step(x, y, asked)
            synchronize(self.plan.devices)
            times.append(time.perf_counter() - t0)
            losses.append(loss)
            all_stats.append(stats)
            bar.set_postfix(loss=f"{loss:.3f}")
        if not all_stats:  # zero steps: measure one batch without training, to draw the timeline
            all_stats.append(self.compute_gradients(*first_batch(self.corpus, self.cfg))[1])
            self.optimizer.zero_grad(set_to_none=True)
        # the first step pays for warm-up (allocations, lazy init); leave it out when there are more
        timeline, costs = self.timeline_from(all_stats[1:] or all_stats)
        return PipelineResult(
            losses=losses, val_loss_start=val_start, val_loss_end=self.evaluate(), step_times_s=times,
            n_layers=self.cfg.n_layers, n_params=self.n_params(), timeline=timeline, costs=costs,
            peak_saved_bytes=_most([st.peak_saved_bytes for st in all_stats]),
            peak_device_bytes=_most([st.peak_device_bytes for st in all_stats]),
            peak_inflight=_most([st.peak_inflight for st in all_stats]),
            schedule=self.schedule.name,
            config=asdict(self.cfg) | {"stages": self.schedule.n_devices, "checkpoint": self.plan.checkpoint},
        )  # fmt: skip

    def n_params(self) -> int:
        """The model's parameters, a tied weight counted once (the head's copy is not a weight of its own)."""
        copy = self.model.layers[-1].out.weight.numel() if self.cfg.tie_embeddings else 0
        return count_parameters(self.model) - copy

    # ---- checking ------------------------------------------------------------------------------
    def max_grad_diff_vs_reference(
        self, x: torch.Tensor | None = None, y: torch.Tensor | None = None
    ) -> float:
        """Largest |gradient difference| between this pipeline and the reference trainer on one batch,
        from the current weights (default batch: the first training batch). Leaves ``.grad`` cleared."""
        batch = first_batch(self.corpus, self.cfg) if x is None or y is None else (x, y)
        _, want = reference_gradients(self.cfg, self.corpus, self.model.state_dict(), batch)
        self.optimizer.zero_grad(set_to_none=True)
        self.compute_gradients(*batch)
        diff = max_grad_diff({name: p.grad for name, p in self.model.named_parameters()}, want)
        self.optimizer.zero_grad(set_to_none=True)
        return diff


def max_grad_diff_vs_reference(cfg: TrainConfig, schedule: str = "1f1b", stages: int = 4, **kwargs) -> float:
    """Build a pipeline and the reference from the same config; compare gradients on the first batch."""
    return LocalPipelineTrainer(cfg, schedule, stages, **kwargs).max_grad_diff_vs_reference()
