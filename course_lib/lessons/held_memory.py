"""Memory over time, not only its peak: the bytes each stage holds for backward, action by action
(lesson 16, sec 6), measured on the local engine beside the simulator's count.

    from course_lib.lessons.held_memory import held_over_time
    curves = held_over_time(cfg, "gpipe", stages=4)
    curves.measured[0]     # stage 0: [(time, bytes held after each of its actions), ...]
    curves.simulated[0]    # stage 0: the simulator's step curve, micro-batches held x one's stash

Measured: after every action the local engine (``HeldTrace``, through its door ``run_action``) reads
the bytes autograd keeps for each stage (``StageRuntime.saved_bytes``, the saved-tensor hooks of lesson
04). One process runs the actions one
after another, so their *times* come from the engine's timeline, which places the measured compute
of each action on the schedule with simulated links: "measured bytes at measured-compute times".
Simulated: from the same timeline, each stage holds one micro-batch's stash from the start of its
forward to the end of its backward (``Timeline.holding_intervals``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from course_lib.shelf.local_engine import LocalPipelineTrainer, StepStats
from course_lib.shelf.reference import TrainConfig, first_batch
from course_lib.shelf.schedule import Action
from course_lib.shelf.timeline import Timeline

Curve = list[tuple[float, int]]  # (seconds from the step's start, bytes)


@dataclass(frozen=True)
class HeldCurves:
    schedule: str
    timeline: Timeline  # measured compute + simulated links
    measured: dict[int, Curve]  # per stage: bytes held after each of its actions
    simulated: dict[int, Curve]  # per stage: the simulator's count, at every change


class HeldTrace(LocalPipelineTrainer):
    """The local engine, noting after each action the bytes its stage holds for backward then."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.held_after: list[tuple[Action, int]] = []  # in the order the actions ran

    def run_action(
        self, action: Action, inp: torch.Tensor | None, targets: torch.Tensor, stats: StepStats
    ) -> torch.Tensor | None:
        out = super().run_action(action, inp, targets, stats)
        self.held_after.append((action, self.runtimes[action.stage].saved_bytes()))
        return out


def held_over_time(cfg: TrainConfig, schedule: str, stages: int = 4) -> HeldCurves:
    """One batch of `schedule` on the local engine (after one warm-up batch): what each stage holds
    for backward over the step, measured and simulated."""
    trainer = HeldTrace(cfg, schedule, stages)
    batch = first_batch(trainer.corpus, cfg)
    trainer.compute_gradients(*batch)  # warm-up: allocations, lazy initialisation
    trainer.optimizer.zero_grad(set_to_none=True)
    trainer.held_after.clear()
    _, stats = trainer.compute_gradients(*batch)
    trainer.optimizer.zero_grad(set_to_none=True)
    timeline, _ = trainer.timeline_from([stats])
    ends = {span.action: span.end for span in timeline.spans}
    t0 = timeline.start
    measured: dict[int, Curve] = {s: [(0.0, 0)] for s in range(timeline.n_stages or stages)}
    for action, held in trainer.held_after:
        measured[action.stage].append((ends[action] - t0, held))
    simulated: dict[int, Curve] = {}
    sizes = timeline.stash_bytes or []
    for device in range(timeline.n_devices):
        events: dict[int, list[tuple[float, int]]] = {}
        for (stage, _mb), (start, end) in timeline.holding_intervals(device).items():
            events.setdefault(stage, []).extend([(start - t0, sizes[stage]), (end - t0, -sizes[stage])])
        for stage, changes in events.items():
            level, curve = 0, [(0.0, 0)]
            for t, delta in sorted(changes):  # frees before allocations at one instant (Timeline._peak)
                level += delta
                curve.append((t, level))
            simulated[stage] = curve
    return HeldCurves(timeline.schedule_name, timeline, measured, simulated)
