"""Tear down spent backward graphs while a rank waits for a message, not while a peer waits for it.

A room beside the rank loop (``course_lib/shelf/rank_loop.py``): after a backward, autograd has freed
the saved tensors, but tearing down the graph's ~1000 nodes still takes about half a millisecond; done
at once, it delays the next action, and the peer waiting for its output. Importing this module adds
``ReleaseWhenIdle`` to every run of the distributed engine (``distributed_engine.DEFAULT_ROOMS``;
``course_lib.lesson`` and the command line import it): each stage's spent graphs (``StageRuntime.spent``)
are kept (``SpentGraphs``, at most m: the oldest goes first) until the rank is about to wait for a message
that the last step also waited for. Speed only: losses and gradients are the same with it or without it.
"""

from __future__ import annotations

from collections import deque

import torch
from torch import Tensor

from course_lib.shelf.distributed_engine import DEFAULT_ROOMS
from course_lib.shelf.p2p import RankComm
from course_lib.shelf.rank_loop import PipelineRank
from course_lib.shelf.schedule import Message
from course_lib.shelf.stage import StageRuntime

IDLE_S = 0.003  # a wait this long (in the last step) hides tearing the graphs down


class SpentGraphs:
    """The spent graphs one stage keeps instead of tearing them down at once (autograd already freed
    their saved tensors): at most m, so that a rank that never idles holds a bounded number."""

    def __init__(self, stage: StageRuntime):
        self.kept: deque[Tensor] = deque(maxlen=stage.n_microbatches)
        stage.spent = self.kept.append  # the stage's door: keep, do not tear down

    def release_graphs(self) -> None:
        self.kept.clear()


class IdleComm:
    """A rank's RankComm whose receives first release the spent graphs, where the last step waited."""

    def __init__(self, comm: RankComm, stages: list[SpentGraphs]):
        self.comm, self.stages = comm, stages
        self.waits_before: dict = {}  # producer -> seconds the last step waited for it

    def __getattr__(self, name: str):
        return getattr(self.comm, name)

    def begin_step(self, step: int) -> None:
        if self.comm.recv_events:  # a new step: remember how long the last one's receives waited
            self.waits_before = {ev.producer: ev.wait_end - ev.wait_start for ev in self.comm.recv_events}
        self.comm.begin_step(step)

    def waited_last_step(self, msg: Message) -> float:
        """A step repeats the one before, so about as long a wait is likely now (gloo cannot tell
        whether a receive is in yet)."""
        return self.waits_before.get(msg.producer, 0.0)

    def _release_if_idle(self, msg: Message) -> None:
        if self.waited_last_step(msg) > IDLE_S:
            for stage in self.stages:
                stage.release_graphs()

    def recv_activation(self, msg: Message) -> torch.Tensor:
        self._release_if_idle(msg)
        return self.comm.recv_activation(msg)

    def recv_grad(self, msg: Message) -> torch.Tensor:
        self._release_if_idle(msg)
        return self.comm.recv_grad(msg)


class ReleaseWhenIdle(PipelineRank):
    """A pipeline rank whose stages keep spent graphs until it idles (the module doc)."""

    def connect(self, *args, **kwargs) -> IdleComm:
        return IdleComm(super().connect(*args, **kwargs), [SpentGraphs(s) for s in self.stages.values()])


if ReleaseWhenIdle not in DEFAULT_ROOMS:
    DEFAULT_ROOMS.append(ReleaseWhenIdle)
