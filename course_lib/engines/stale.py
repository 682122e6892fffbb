"""Stale weights around the local engine: every stage computes on the weights some updates old (lesson 14).

An asynchronous pipeline never flushes, so a stage computes a micro-batch's forward and backward on the
version of its weights it held when the forward ran, while newer updates have landed since. PipeDream
(Narayanan et al., SOSP 2019, sec. 3.3) stashes that version for the backward (weight stashing);
PipeDream-2BW (Narayanan et al., arXiv 2006.09503, sec. 3) keeps two versions, one update behind.

``StaleWeights`` keeps each stage's newest ``delay + 1`` versions. Inside ``stale()`` the stage's
parameters hold the oldest kept one; on leaving, the newest again, so the optimizer updates the newest
weights with gradients computed on the stale ones. The values are copied in place: the parameters stay the
same tensors (the optimizer's state and the engine's memory count know them by identity and storage).
``StaleLocalTrainer`` is the shelf's local engine with each batch's gradients computed inside ``stale()``::

    trainer = StaleLocalTrainer(cfg, "1f1b", stages=4, staleness=(1, 1, 1, 1))   # 2BW
    trainer.train().losses
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import nn

from course_lib.shelf.errors import require
from course_lib.shelf.local_engine import LocalPipelineTrainer, StepStats
from course_lib.shelf.reference import TrainConfig


def check_delays(delays: Sequence[int], n_stages: int) -> tuple[int, ...]:
    """`delays`, one whole number >= 0 per stage, as a tuple; a clear error otherwise."""
    delays = tuple(delays)
    require(
        len(delays) == n_stages,
        f"staleness needs one entry per stage ({n_stages}), got {len(delays)}: {delays}",
    )
    bad = [d for d in delays if isinstance(d, bool) or not isinstance(d, int) or d < 0]
    require(not bad, f"every staleness must be a whole number >= 0, got {bad} (updates behind the newest)")
    return delays


def _snapshot(stage: nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in stage.parameters()]


class StaleWeights:
    """The newest `delays[s] + 1` weight versions of every stage (see the module docstring)."""

    def __init__(self, stages: Sequence[nn.Module], delays: Sequence[int]):
        self.delays = check_delays(delays, len(stages))
        self.stages = list(stages)
        pairs = zip(self.stages, self.delays, strict=True)
        self.history = [deque([_snapshot(s)], maxlen=d + 1) for s, d in pairs]

    @staticmethod
    def _load(stage: nn.Module, values: list[torch.Tensor]) -> None:
        with torch.no_grad():
            for p, v in zip(stage.parameters(), values, strict=True):
                p.copy_(v)

    @contextmanager
    def stale(self) -> Iterator[None]:
        """Inside: every stage's parameters hold its oldest kept version; after: the newest again."""
        for stage, kept in zip(self.stages, self.history, strict=True):
            self._load(stage, kept[0])
        try:
            yield
        finally:
            for stage, kept in zip(self.stages, self.history, strict=True):
                self._load(stage, kept[-1])

    def record(self) -> None:
        """After an optimizer step: the new weights join every stage's versions (the oldest drops out)."""
        for stage, kept in zip(self.stages, self.history, strict=True):
            kept.append(_snapshot(stage))


class StaleLocalTrainer(LocalPipelineTrainer):
    """The local engine, every stage `staleness[s]` updates behind the newest weights; the other
    arguments are ``LocalPipelineTrainer``'s. With every staleness 0 it is the synchronous engine."""

    def __init__(self, cfg: TrainConfig, *args, staleness: Sequence[int], **kwargs):
        super().__init__(cfg, *args, **kwargs)
        self.stale = StaleWeights(self.stage_modules, staleness)

    def train_step(
        self, x: torch.Tensor, y: torch.Tensor, stop: Callable[[], bool] | None = None
    ) -> tuple[float, StepStats]:
        """One batch: its gradients on the stale weights, then one step on the newest ones."""
        self.optimizer.zero_grad(set_to_none=True)
        with self.stale.stale():
            loss, stats = self.compute_gradients(x, y, stop)
        self.optimizer.step()
        self.stale.record()
        return loss, stats
