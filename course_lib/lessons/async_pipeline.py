"""Lesson 14's trainer: asynchronous pipelines (PipeDream, PipeDream-2BW), trained on the toy for real.

A synchronous pipeline (GPipe, 1F1B) flushes at the end of every batch: the optimizer steps once all m
micro-batches are through, and the next batch starts from the new weights. The flush is the bubble. An
asynchronous pipeline never flushes: micro-batches stream through, and a stage updates its weights while
others are still in flight, so a micro-batch's gradient arrives computed on weights that have since moved on.

* **PipeDream** (Narayanan et al., SOSP 2019; an earlier version is arXiv 1806.03377) updates after every
  micro-batch. Under 1F1B stage s (0-based, of p) has p - s micro-batches in flight, so its forward sees
  weights p - 1 - s updates old; it **stashes** that version and runs the micro-batch's backward on the
  same one (weight stashing, the paper's sec. 3.3).
* **PipeDream-2BW** (Narayanan et al. 2021, arXiv 2006.09503, sec. 3) accumulates a batch of m micro-batches
  and keeps two weight versions (double buffering): W(t+1) = W(t) - step(grad f(W(t-1))), a delay of 1.

The local engine computes exactly those updates (with ``staleness``, ``course_lib/engines/stale.py``),
stage by stage on the library's model and stages: what an asynchronous engine computes, without its
concurrency (the step time comes from the simulator). This module says which delays and update rhythm each
variant has, and runs the engine::

    from course_lib.lessons.async_pipeline import pipedream, synchronous, train_async, two_bw
    cfg = TrainConfig(n_layers=8, steps=30, seq_len=32)
    ref = train_async(cfg, synchronous(4))        # delay 0, one step per batch: the reference trainer
    stale = train_async(cfg, two_bw(4))           # every stage one update behind
    stale.losses, stale.versions                  # loss per batch; weight versions each stage keeps
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from torch import Tensor

from course_lib.engines.stale import StaleLocalTrainer, check_delays
from course_lib.shelf.costs import StageCosts
from course_lib.shelf.errors import require
from course_lib.shelf.model import count_parameters, split_microbatches
from course_lib.shelf.reference import TrainConfig, evaluate, train_batches
from course_lib.shelf.simulator import simulate_named

UPDATES = ("batch", "microbatch")


@dataclass(frozen=True)
class AsyncSpec:
    """How stale each stage's weights are. `update`: "batch" (one optimizer step per batch of m micro-batches,
    as the reference and 2BW) or "microbatch" (a step after every micro-batch, as PipeDream). `delays[s]`:
    how many updates behind the newest weights stage s computes its forward and backward."""

    stages: int
    update: str = "batch"
    delays: tuple[int, ...] = ()
    name: str = ""

    def check(self) -> None:
        require(self.stages >= 1, f"stages must be >= 1, got {self.stages}")
        require(self.update in UPDATES, f"update must be one of {UPDATES}, got {self.update!r}")
        check_delays(self.delays, self.stages)  # the engine's rule, before anything is built

    @property
    def versions(self) -> tuple[int, ...]:
        """Weight versions each stage keeps: the one it computes on, and every newer one up to the latest."""
        return tuple(d + 1 for d in self.delays)


def synchronous(p: int, update: str = "batch") -> AsyncSpec:
    """No staleness: with update="batch" this is the reference trainer (GPipe and 1F1B compute the same)."""
    return AsyncSpec(p, update, (0,) * p, "synchronous" if update == "batch" else "sync per micro-batch")


def two_bw(p: int) -> AsyncSpec:
    """PipeDream-2BW: one step per batch, every stage computing on the weights one update old."""
    return AsyncSpec(p, "batch", (1,) * p, "PipeDream-2BW")


def pipedream(p: int) -> AsyncSpec:
    """PipeDream: a step per micro-batch; stage s computes on weights p - 1 - s updates old."""
    return AsyncSpec(p, "microbatch", tuple(p - 1 - s for s in range(p)), "PipeDream")


@dataclass
class AsyncResult:
    spec: AsyncSpec
    losses: list[float]  # mean training loss per batch (over its m micro-batches), as the reference reports
    val_loss_end: float
    stage_params: list[int]  # parameters per stage
    weights: dict[str, Tensor]  # final weights, by the whole model's parameter names

    @property
    def versions(self) -> tuple[int, ...]:
        return self.spec.versions

    def stashed_weight_bytes(self, bytes_per_param: int = 4) -> list[int]:
        """Bytes of weights each stage holds: its parameters times the versions it keeps."""
        return [n * v * bytes_per_param for n, v in zip(self.stage_params, self.versions, strict=True)]


def train_async(cfg: TrainConfig, spec: AsyncSpec) -> AsyncResult:
    """Train the toy on the reference trainer's batches, each stage computing on weights `spec.delays` old:
    the local engine with stale weights (``course_lib/engines/stale.py``), 1F1B. The optimizer and
    learning-rate schedule are the reference's; with "microbatch" updates the engine takes one micro-batch
    at a time and steps m times a batch (the warm-up then counts micro-batch steps)."""
    spec.check()
    cfg.check()
    require(
        spec.stages <= cfg.n_layers + 2,
        f"{spec.stages} stages need at least as many layers; the model has {cfg.n_layers + 2}",
    )  # fmt: skip
    per_step = cfg if spec.update == "batch" else replace(cfg, microbatches=1)
    trainer = StaleLocalTrainer(
        per_step, "1f1b", stages=spec.stages, staleness=spec.delays, track_memory=False
    )
    losses = []
    for x, y in train_batches(trainer.corpus, cfg):
        micro = split_microbatches(x, y, cfg.microbatches)
        groups = [(x, y)] if spec.update == "batch" else micro
        batch_loss = 0.0
        for gx, gy in groups:
            batch_loss += trainer.train_step(gx, gy)[0] * len(gx) / len(x)
        losses.append(batch_loss)
    model, stage_params = trainer.model, [count_parameters(rt.module) for rt in trainer.runtimes]
    return AsyncResult(
        spec, losses, evaluate(model, trainer.corpus, cfg), stage_params,
        {n: p.detach().clone() for n, p in model.named_parameters()},
    )  # fmt: skip


def time_per_batch(p: int, m: int, n_batches: int, costs: StageCosts | None = None) -> tuple[float, float]:
    """(synchronous, asynchronous) simulated time per batch under 1F1B, over `n_batches` batches in a row.
    Synchronous: every batch flushes, so each costs one 1F1B step. Asynchronous: nothing flushes; the
    micro-batches of all batches stream through one long 1F1B (the updates add no wait between stages)."""
    require(n_batches >= 1, f"n_batches must be >= 1, got {n_batches}")
    sync = simulate_named("1f1b", p, m, costs=costs).makespan
    stream = simulate_named("1f1b", p, m * n_batches, costs=costs).makespan
    return sync, stream / n_batches
