"""Faults on purpose: make one rank of a distributed run fail, to watch the launcher name it (lesson 08).

A room beside the rank loop (``course_lib/shelf/rank_loop.py``): importing it adds ``fault=`` to
``make_spec``; a run given a Fault widens its ranks with ``FaultRank``, whose recorder injects the
fault before the chosen action. A run without one runs none of this::

    import course_lib.engines.faults  # noqa: F401 (course_lib.lesson and the command line import it)
    from course_lib.engines.faults import Fault
    from course_lib.shelf.distributed_engine import run_distributed
    run_distributed(cfg, "1f1b", stages=2, fault=Fault(rank=1, how="kill"))  # DistributedError: rank 1
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, replace

from course_lib.shelf.distributed_engine import RoomOption, add_room_option
from course_lib.shelf.errors import require
from course_lib.shelf.rank_loop import PipelineRank, StepRecorder
from course_lib.shelf.run_spec import RunSpec
from course_lib.shelf.schedule import Action

FAULT_KINDS = ("raise", "exit", "kill", "hang")


@dataclass(frozen=True)
class Fault:
    """Make rank `rank` (of all t x p x d) fail on purpose, before its action number `after_actions` of
    step `step`: ``raise`` an exception, ``exit`` (os._exit), ``kill`` (SIGKILL itself) or ``hang``."""

    rank: int
    how: str = "raise"
    step: int = 0
    after_actions: int = 1

    def inject(self) -> None:
        if self.how == "raise":
            raise RuntimeError(f"injected fault: rank {self.rank} raised on purpose")
        if self.how == "exit":
            os._exit(3)
        if self.how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(10**6)  # "hang": a rank that stops answering


class FaultyRecorder:
    """A rank's recorder (the StepRecorder, or another room's) that injects `fault` when it is due here."""

    def __init__(self, fault: Fault, rank: int, recorder: StepRecorder):
        self.fault, self.rank, self.recorder = fault, rank, recorder

    def __getattr__(self, name: str):
        return getattr(self.recorder, name)

    def before(self, action: Action) -> None:
        f, recorder = self.fault, self.recorder
        if (f.rank, f.step, f.after_actions) == (self.rank, recorder.step, len(recorder.spans)):
            f.inject()
        recorder.before(action)


class FaultRank(PipelineRank):
    """A pipeline rank whose recorder injects the run's fault."""

    def recorder_for_steps(self) -> FaultyRecorder:
        return FaultyRecorder(self.spec.extras["fault"], self.global_rank, super().recorder_for_steps())


def _widen(spec: RunSpec, given: dict, local_ranks: int | None) -> RunSpec:
    fault = given["fault"]
    require(isinstance(fault, Fault), f"fault must be a Fault, got {fault!r}")
    require(fault.how in FAULT_KINDS, f"fault.how must be one of {FAULT_KINDS}, got {fault.how!r}")
    require(0 <= fault.rank < spec.world, f"fault.rank must be in 0..{spec.world - 1}, got {fault.rank}")
    return replace(spec, rooms=(FaultRank, *spec.rooms), extras={**spec.extras, "fault": fault})


add_room_option(RoomOption(("fault",), {"fault": None}, _widen, order=1))
