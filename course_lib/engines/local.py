"""The local engine: one process runs every pipeline stage, in the order a schedule says, and really trains.

    from course_lib.reference import TrainConfig
    from course_lib.engines.local import LocalPipelineTrainer
    trainer = LocalPipelineTrainer(TrainConfig(n_layers=8, steps=5), schedule="1f1b", stages=4)
    result = trainer.train()
    result.losses, result.timeline.bubble_fraction, result.peak_saved_bytes

Stages go on ``stage_devices``: one GPU per pipeline device when there are enough GPUs, otherwise
every stage on the same real device ("simulated devices"). The engine runs the schedule's actions one
at a time, in a valid global order (``execution_order``), and times each one (synchronising the GPU
first, so a time is the work's and not the launch's). One process cannot run stages side by side,
so the Timeline is made by giving the *measured* per-stage F / B / W times (median per stage and
kind) and the chosen links to the simulator: its source is "measured compute + simulated links".

Synchronous training: gradients of the m micro-batches add up, and the optimizer steps once per
batch, after the flush. Loss and gradients equal the reference trainer's (tests check every
schedule); ``max_grad_diff_vs_reference`` checks one batch.
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import torch

from course_lib.costs import StageCosts, costs_from_durations
from course_lib.data import Corpus, split_microbatches
from course_lib.devices import resolve_device
from course_lib.engines.plan import PipelinePlan, make_plan
from course_lib.engines.runtime import StageRuntime
from course_lib.links import Link
from course_lib.model import build_model, count_parameters, lm_loss
from course_lib.partition import Partition, stage_modules
from course_lib.reference import TrainConfig, TrainResult, accumulate_gradients, make_optimizer, setup
from course_lib.schedules.ir import Action, Kind, Schedule
from course_lib.schedules.validate import execution_order
from course_lib.simulator import simulate
from course_lib.timeline import MEASURED_COMPUTE, Timeline


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
            "schedule": self.schedule,
            "bubble_fraction": self.timeline.bubble_fraction,
            "timeline_source": self.timeline.source,
            "simulated_step_time_s": self.timeline.makespan,
            "peak_saved_bytes": self.peak_saved_bytes,
            "peak_device_bytes": self.peak_device_bytes,
            "peak_inflight": self.peak_inflight,
        }


def _sync(devices: Sequence[torch.device]) -> None:
    for d in {d for d in devices if d.type == "cuda"}:
        torch.cuda.synchronize(d)


class LocalPipelineTrainer:
    """Trains the toy model with a pipeline schedule in one process (see the module docstring)."""

    def __init__(
        self,
        cfg: TrainConfig,
        schedule: str | Schedule = "1f1b",
        stages: int = 4,
        virtual: int = 1,
        partition: Partition | Sequence[int] | None = None,
        checkpoint: str = "never",
        links: Link | Sequence[Link] | None = None,
        corpus: Corpus | None = None,
        track_memory: bool = True,
    ):
        """`corpus`: an already loaded corpus (default: read cfg.data_path or the shipped one).
        `track_memory=False` skips measuring bytes saved for backward (for like-for-like timing)."""
        # every check first: nothing is built or read if any input is bad
        self.plan: PipelinePlan = make_plan(cfg, schedule, stages, virtual, partition, checkpoint, links)
        self.cfg = cfg
        self.schedule = self.plan.schedule
        self.order: list[Action] = execution_order(self.schedule)
        if corpus is None:
            self.corpus, self.model = setup(cfg)
        else:  # what setup() does, minus reading the data again
            self.corpus = corpus
            torch.manual_seed(cfg.seed)
            model_cfg = cfg.model_config(corpus.tokenizer.vocab_size)
            self.model = build_model(model_cfg, seed=cfg.seed).to(resolve_device(cfg.device))
        modules = stage_modules(self.model.layers, self.plan.partition)
        n = self.schedule.n_stages
        self.runtimes = [
            StageRuntime(
                s,
                n,
                mod,
                cfg.microbatches,
                checkpoint,
                self.plan.device_of_stage(s),
                track_memory=track_memory,
                split_backward=self.schedule.split_backward,
            )
            for s, mod in enumerate(modules)
        ]
        self.optimizer = make_optimizer(self.model, cfg)
        self._devices = self.plan.devices

    # ---- one batch -----------------------------------------------------------------------------
    def compute_gradients(self, x: torch.Tensor, y: torch.Tensor) -> tuple[float, StepStats]:
        """Run every action of the schedule on one batch; gradients end up in ``.grad``. Returns the
        batch's mean loss and what was measured. No optimizer step."""
        stats = StepStats()
        micro = split_microbatches(x, y, self.cfg.microbatches)
        for rt in self.runtimes:
            rt.start_batch()
        acts: dict[tuple[int, int], torch.Tensor] = {}  # (stage, mb) -> activation it sent up
        grads: dict[tuple[int, int], torch.Tensor] = {}  # (stage, mb) -> input gradient it sent down
        n_dev = self.schedule.n_devices
        stages_of = [self.schedule.stages_of(d) for d in range(n_dev)]
        device_peak = [0] * n_dev
        last = self.schedule.n_stages - 1
        for action in self.order:
            s, mb, kind = action.stage, action.microbatch, action.kind
            rt = self.runtimes[s]
            before = rt.saved_bytes()
            _sync(self._devices)
            t0 = time.perf_counter()
            if kind is Kind.F:
                inp = micro[mb][0] if s == 0 else acts.pop((s - 1, mb))
                out = rt.forward(mb, inp, micro[mb][1] if s == last else None)
                if out is not None:
                    acts[(s, mb)] = out
            elif kind is Kind.W:
                rt.backward_weight(mb)
            else:
                g = None if s == last else grads.pop((s + 1, mb))
                out = rt.backward(mb, g) if kind is Kind.B else rt.backward_input(mb, g)
                if out is not None:
                    grads[(s, mb)] = out
            _sync(self._devices)
            stats.durations[(s, kind)].append(time.perf_counter() - t0)
            if kind is Kind.F:
                stats.stash_bytes[s].append(rt.saved_bytes() - before)
                if s < last:
                    stats.boundary_bytes[s] = acts[(s, mb)].nbytes
            d = self.schedule.stage_to_device[s]
            device_peak[d] = max(device_peak[d], sum(self.runtimes[t].saved_bytes() for t in stages_of[d]))
        stats.peak_saved_bytes = [rt.peak_saved_bytes for rt in self.runtimes]
        stats.peak_inflight = [rt.peak_inflight for rt in self.runtimes]
        stats.peak_device_bytes = device_peak
        return self.runtimes[-1].loss(), stats

    def step(self, x: torch.Tensor, y: torch.Tensor) -> tuple[float, StepStats]:
        """One training step: the whole schedule, then one optimizer step after the flush."""
        self.optimizer.zero_grad(set_to_none=True)
        loss, stats = self.compute_gradients(x, y)
        self.optimizer.step()
        return loss, stats

    # ---- timeline ------------------------------------------------------------------------------
    def timeline_from(self, steps: Sequence[StepStats]) -> tuple[Timeline, StageCosts]:
        """Simulate the schedule with the measured medians (per stage and kind) and the plan's links."""
        n = self.schedule.n_stages
        pooled: dict[tuple[int, Kind], list[float]] = defaultdict(list)
        stash: dict[int, list[int]] = defaultdict(list)
        for st in steps:
            for key, values in st.durations.items():
                pooled[key] += values
            for s, values in st.stash_bytes.items():
                stash[s] += values
        costs = costs_from_durations(pooled, n, "median")
        timeline = simulate(
            self.schedule,
            costs,
            boundary_bytes=[steps[-1].boundary_bytes.get(s, 0) for s in range(n - 1)],
            links=self.plan.links,
            stash_bytes=[int(statistics.median(stash[s])) if stash[s] else 0 for s in range(n)],
            source=MEASURED_COMPUTE,
        )
        return timeline, costs

    # ---- training ------------------------------------------------------------------------------
    @torch.no_grad()
    def evaluate(self) -> float:
        """Held-out loss over the same fixed batches the reference trainer uses."""
        gen = torch.Generator().manual_seed(self.cfg.seed + 12345)
        losses = []
        for _ in range(self.cfg.eval_batches):
            x, y = self.corpus.batch("val", self.cfg.batch_size, self.cfg.seq_len, gen)
            for rt in self.runtimes:
                x = rt.module(x.to(rt.device))
            losses.append(lm_loss(x, y.to(x.device)).item())
        return sum(losses) / len(losses)

    def train(self, steps: int | None = None, progress: bool = True) -> PipelineResult:
        """Train for `steps` batches (default cfg.steps) on the same batches the reference sees."""
        from tqdm.auto import tqdm

        steps = self.cfg.steps if steps is None else steps
        gen = torch.Generator().manual_seed(self.cfg.seed)
        val_start = self.evaluate()
        losses, times, all_stats = [], [], []
        bar = tqdm(range(steps), desc=f"local {self.schedule.name}", disable=not progress)
        for _ in bar:
            x, y = self.corpus.batch("train", self.cfg.batch_size, self.cfg.seq_len, gen)
            t0 = time.perf_counter()
            loss, stats = self.step(x, y)
            _sync(self._devices)
            times.append(time.perf_counter() - t0)
            losses.append(loss)
            all_stats.append(stats)
            bar.set_postfix(loss=f"{loss:.3f}")
        if not all_stats:  # zero steps: measure one batch without training, to draw the timeline
            x, y = self.corpus.batch("train", self.cfg.batch_size, self.cfg.seq_len, gen)
            all_stats.append(self.compute_gradients(x, y)[1])
            self.optimizer.zero_grad(set_to_none=True)
        # the first step pays for warm-up (allocations, lazy init); leave it out when there are more
        timeline, costs = self.timeline_from(all_stats[1:] or all_stats)
        return PipelineResult(
            losses=losses,
            val_loss_start=val_start,
            val_loss_end=self.evaluate(),
            step_times_s=times,
            n_layers=self.cfg.n_layers,
            n_params=count_parameters(self.model),
            timeline=timeline,
            costs=costs,
            peak_saved_bytes=[
                max(st.peak_saved_bytes[s] for st in all_stats) for s in range(len(self.runtimes))
            ],
            peak_device_bytes=[
                max(st.peak_device_bytes[d] for st in all_stats) for d in range(len(self._devices))
            ],
            peak_inflight=[max(st.peak_inflight[s] for st in all_stats) for s in range(len(self.runtimes))],
            schedule=self.schedule.name,
            config=asdict(self.cfg) | {"stages": self.schedule.n_devices, "checkpoint": self.plan.checkpoint},
        )

    # ---- checking ------------------------------------------------------------------------------
    def max_grad_diff_vs_reference(
        self, x: torch.Tensor | None = None, y: torch.Tensor | None = None
    ) -> float:
        """Largest |gradient difference| between this pipeline and the reference trainer on one batch,
        from the current weights (default batch: the first training batch). Leaves ``.grad`` cleared."""
        if x is None or y is None:
            x, y = self.corpus.batch(
                "train", self.cfg.batch_size, self.cfg.seq_len, torch.Generator().manual_seed(self.cfg.seed)
            )
        reference = build_model(self.model.config, seed=self.cfg.seed)
        reference.load_state_dict({k: v.to(self.plan.devices[0]) for k, v in self.model.state_dict().items()})
        reference.to(self.plan.devices[0])
        accumulate_gradients(
            reference, x.to(self.plan.devices[0]), y.to(self.plan.devices[0]), self.cfg.microbatches
        )
        self.optimizer.zero_grad(set_to_none=True)
        self.compute_gradients(x, y)
        diff = 0.0
        for p, q in zip(self.model.parameters(), reference.parameters(), strict=True):
            # a gradient missing on one side counts as zeros, so a forgotten gradient shows as a difference
            got = p.grad.to(q.device) if p.grad is not None else torch.zeros_like(q)
            want = q.grad if q.grad is not None else torch.zeros_like(q)
            diff = max(diff, (got - want).abs().max().item())
        self.optimizer.zero_grad(set_to_none=True)
        return diff


def max_grad_diff_vs_reference(cfg: TrainConfig, schedule: str = "1f1b", stages: int = 4, **kwargs) -> float:
    """Build a pipeline and the reference from the same config; compare gradients on the first batch."""
    return LocalPipelineTrainer(cfg, schedule, stages, **kwargs).max_grad_diff_vs_reference()
