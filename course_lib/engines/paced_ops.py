"""Paced ops: each forward and backward of a distributed run lasts at least a fixed slot.

A room beside the rank loop (``course_lib/shelf/rank_loop.py``): ``make_spec(..., pace_s=(F, B))``
(importing this module adds the option; ``course_lib.engines`` does, so ``course_lib.lesson`` and the
command line load it) makes every F span last at least F seconds and every B span at least B: the real
op runs, then the rank sleeps out the rest of its slot. On a busy laptop a stage's cost then stays what
the lesson says it is, so a measured step shows the schedule and the link, not the load (lessons 06
and 08: ``course_lib/lessons/wan_measured.py``)::

    make_spec(cfg, "1f1b", 2, links=Link(latency_s=0.04), pace_s=(0.010, 0.020))

A schedule that splits backward into I and W has no B to pace, and is refused before any process starts.
"""

from __future__ import annotations

import time
from dataclasses import replace

from course_lib.shelf.distributed_engine import RoomOption, add_room_option
from course_lib.shelf.errors import real, require
from course_lib.shelf.rank_loop import PipelineRank, StepRecorder
from course_lib.shelf.run_spec import RunSpec
from course_lib.shelf.schedule import Action, Kind


class PacedRecorder:
    """A rank's recorder (the StepRecorder, or another room's) whose F and B spans last at least their
    slot: after the op (and the GPU's work) the rank sleeps out the rest of it, and the span ends then."""

    def __init__(self, pace_s: tuple[float, float], recorder: StepRecorder):
        self.slots, self.recorder = {Kind.F: pace_s[0], Kind.B: pace_s[1]}, recorder

    def __getattr__(self, name: str):
        return getattr(self.recorder, name)

    def after(self, action: Action) -> None:
        recorder = self.recorder
        recorder.after(action)
        if (slot := self.slots.get(action.kind)) is not None:
            _, start, _ = recorder.spans[-1]
            time.sleep(max(0.0, start + slot - recorder.now()))
            recorder.spans[-1] = (action, start, recorder.now())


class PacedRank(PipelineRank):
    """A pipeline rank whose ops are paced (the spec's extras["pace_s"])."""

    def recorder_for_steps(self) -> PacedRecorder:
        return PacedRecorder(self.spec.extras["pace_s"], super().recorder_for_steps())


def _widen(spec: RunSpec, given: dict, local_ranks: int | None) -> RunSpec:
    pace_s = given["pace_s"]
    shape = isinstance(pace_s, (tuple, list)) and len(pace_s) == 2
    require(
        shape and not spec.schedule.split_backward,
        f"pace_s must be (forward, backward) seconds > 0, for a schedule with a fused backward; got "
        f"{pace_s!r} for {spec.schedule.name!r}",
    )
    slots = (real("pace_s[0]", pace_s[0], above=True), real("pace_s[1]", pace_s[1], above=True))
    return replace(spec, rooms=(*spec.rooms, PacedRank), extras={**spec.extras, "pace_s": slots})


add_room_option(RoomOption(("pace_s",), {"pace_s": None}, _widen))
