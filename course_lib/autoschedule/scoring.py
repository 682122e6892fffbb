"""How a zero-bubble schedule is scored: the simulated step, or the Zero Bubble paper's stage span.

The paper (Qi et al. 2024, arXiv 2401.10241, Table 5) measures a schedule by its *cost*: the longest
time any one stage takes from its own first action to its own last. This course's step is the
makespan, from the first start anywhere to the last end anywhere. ``auto_zero_bubble`` optimises
either (``objective``), with the other to break ties.

    from course_lib.autoschedule.scoring import stage_span
    stage_span(timeline)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import course_lib.fast_simulator  # noqa: F401  (registers the fast path this module asks for: fast=True)
from course_lib.shelf.costs import StageCosts

if TYPE_CHECKING:  # the simulator sits a floor above the schedules; imported where it is used
    from course_lib.shelf.schedule import Schedule
    from course_lib.shelf.timeline import Timeline

OBJECTIVES = ("step", "stage-span")  # the makespan, or the paper's largest first-to-last time of a stage


def score(step: float, span: float, objective: str) -> tuple[float, float]:
    """(step, span), or (span, step) for the "stage-span" objective: the objective first, then the
    other to break ties; rounded, so that float noise does not decide between equal schedules."""
    pair = (round(step, 9), round(span, 9))
    return pair if objective == "step" else pair[::-1]


def stage_span(tl: Timeline) -> float:
    """The Zero Bubble paper's cost: the longest time from a device's first action to its last."""
    spans = [tl.spans_of(d) for d in range(tl.n_devices)]
    return max(max(s.end for s in sp) - min(s.start for s in sp) for sp in spans if sp)


def simulated_score(
    schedule: Schedule, costs: StageCosts | None, comm: Sequence[float], objective: str = "step"
) -> tuple[float, float]:
    """`schedule`'s simulated step and largest stage span (the objective first), with `comm` seconds on
    each link (one per boundary)."""
    from course_lib.shelf.costs import Link  # noqa: PLC0415
    from course_lib.shelf.simulator import simulate  # noqa: PLC0415

    tl = simulate(schedule, costs, links=[Link(latency_s=c) for c in comm] or None, fast=True)
    return score(tl.makespan, stage_span(tl), objective)
