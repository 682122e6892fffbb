"""Costs: how long each action takes on each stage, given by hand or read off measured runs.

The fields are named after the action letters: ``f`` for F (forward), ``i`` for I (input gradient)
and ``w`` for W (weight gradient). A full backward B does both pieces at once, so it costs
``i + w``. Schedules without a split backward only ever see that sum; say so with
``StageCosts.fused(f, b)``, which puts the whole backward in ``i``.

    StageCosts(f=1.0, i=1.0, w=1.0)         # the Zero Bubble paper's T_F = T_B = T_W (its B is our I)
    StageCosts.fused(f=1.0, b=2.0)          # a full backward of 2 (i = 2, w = 0)
    StageCosts(f=[1, 2], i=[2, 4], w=0.0)   # one number per stage, or one for all
    costs_from(result.timelines[1:])        # medians of measured runs, per stage, for a replay
"""

from __future__ import annotations

import numbers
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from course_lib.shelf.basic_schedules import LIMITS
from course_lib.shelf.checks import real
from course_lib.shelf.errors import require
from course_lib.shelf.schedule import Kind
from course_lib.shelf.timeline import Timeline

Cost = float | int | Sequence[float | int]  # one number for every stage, or one per stage

REDUCERS = {"median": statistics.median, "mean": statistics.fmean}


@dataclass(frozen=True)
class StageCosts:
    """Seconds (or any one consistent unit) of F, I and W on each stage; B costs ``i + w``."""

    f: Cost = 1.0
    i: Cost = 1.0
    w: Cost = 1.0

    @classmethod
    def fused(cls, f: Cost, b: Cost) -> StageCosts:
        """Costs for a backward that runs as one piece B of cost `b`: all of it is ``i``, ``w`` is 0."""
        return cls(f=f, i=b, w=0.0)

    def per_virtual_stage(self, v: int) -> StageCosts:
        """These costs are a device's share; with v stages per device (interleaving) each costs 1/v."""

        def share(value: Cost) -> Cost:
            return value / v if isinstance(value, (int, float)) else [x / v for x in value]

        return StageCosts(share(self.f), share(self.i), share(self.w))

    def per_stage(self, n_stages: int) -> tuple[list[float], list[float], list[float]]:
        """(f, i, w), each expanded to `n_stages` entries and checked: finite and >= 0."""
        return _expand("f", self.f, n_stages), _expand("i", self.i, n_stages), _expand("w", self.w, n_stages)


def _expand(label: str, value: Cost, n_stages: int) -> list[float]:
    """One cost per stage, each a number of seconds in [0, LIMITS["seconds"]] (numpy's too): a cost of
    1e308 would overflow the makespan, a string or None says so here rather than deep in the simulator."""
    top = LIMITS["seconds"]
    if isinstance(value, numbers.Real) or not isinstance(value, Sequence) or isinstance(value, str):
        return [real(f"StageCosts.{label}", value, high=top)] * n_stages
    require(
        len(value) == n_stages,
        f"StageCosts.{label} has {len(value)} entries but the schedule has {n_stages} stages; "
        "give one number per stage, or a single number for all",
    )
    return [real(f"StageCosts.{label}[{s}]", x, high=top) for s, x in enumerate(value)]


def costs_from(
    timelines: Sequence[Timeline], reduce: str = "median", equal_stages: bool = False
) -> StageCosts:
    """The costs measured in `timelines`, per stage: the median (or mean) duration of every span.
    Leave warm-up steps out before calling. `equal_stages=True` pools every stage's spans into one
    number per kind: the textbook's equal stages, at this run's average cost."""
    require(len(timelines) > 0, "costs_from needs at least one Timeline")
    n_stages = {tl.n_stages for tl in timelines}
    require(
        len(n_stages) == 1 and None not in n_stages,
        f"costs_from needs Timelines of one schedule that say their n_stages, got n_stages {n_stages}",
    )
    durations: dict[tuple[int, Kind], list[float]] = defaultdict(list)
    for tl in timelines:
        for span in tl.spans:
            durations[(span.action.stage, span.action.kind)].append(span.duration)
    return costs_from_durations(durations, n_stages.pop(), reduce, equal_stages)


def costs_from_durations(
    durations: Mapping[tuple[int, Kind], Sequence[float]], n_stages: int, reduce: str = "median",
    equal_stages: bool = False,
) -> StageCosts:  # fmt: skip
    """``costs_from`` on raw measurements: seconds per (stage, kind), as an engine records them.
    A stage whose backward ran as one piece B gets ``i`` = its B and ``w`` = 0, so that a replay
    charges exactly what was measured; a split one gets its I and its W."""
    require(reduce in REDUCERS, f"reduce must be one of {sorted(REDUCERS)}, got {reduce!r}")
    pick = REDUCERS[reduce]
    groups = [range(n_stages)] if equal_stages else [[s] for s in range(n_stages)]

    def cost(stages: Sequence[int], kind: Kind) -> float:
        values = [x for s in stages for x in durations.get((s, kind), ())]
        return pick(values) if values else 0.0

    f = [cost(g, Kind.F) for g in groups]
    i = [cost(g, Kind.I) if any(durations.get((s, Kind.I)) for s in g) else cost(g, Kind.B) for g in groups]
    w = [cost(g, Kind.W) for g in groups]
    return StageCosts(f[0], i[0], w[0]) if equal_stages else StageCosts(f, i, w)
