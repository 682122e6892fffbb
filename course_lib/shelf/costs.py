"""What the simulator is given: each action's cost, the links between stages, the sends (lessons 03-04, 06).

Costs: how long each action takes on each stage, given by hand or read off measured runs. The fields
are named after the action letters: ``f`` for F (forward), ``i`` for I (input gradient) and ``w`` for
W (weight gradient). A full backward B does both pieces at once, so it costs ``i + w``. Schedules
without a split backward only ever see that sum; say so with ``StageCosts.fused(f, b)``, which puts the
whole backward in ``i``.

    StageCosts(f=1.0, i=1.0, w=1.0)         # the Zero Bubble paper's T_F = T_B = T_W (its B is our I)
    StageCosts.fused(f=1.0, b=2.0)          # a full backward of 2 (i = 2, w = 0)
    StageCosts(f=[1, 2], i=[2, 4], w=0.0)   # one number per stage, or one for all
    costs_from(result.timelines[1:])        # medians of measured runs, per stage, for a replay

Links: latency plus bytes over bandwidth (the alpha-beta model). The simulator, the distributed
engine's injected links and the network presets all use this one type; the ring all-reduce formula
(tensor parallelism, the planner's TP and DP) is written on it in ``course_lib/network.py``.

    Link(latency_s=5e-3, bandwidth_Bps=12.5e9).transfer_time(64 * 2**20)   # seconds for 64 MiB

Last, the simulator's door (:func:`check_inputs`): the types a lesson may pass, one sentence for any
other, so a string for a schedule or a dict for the links is named there, never met as a TypeError in
the event loop.
"""

from __future__ import annotations

import math
import numbers
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from course_lib.shelf.errors import LIMITS, CourseError, real, require, shown
from course_lib.shelf.schedule import Kind, Schedule
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


# ---- links --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Link:
    """A wire between two stages: `latency_s` seconds to cross, `bandwidth_Bps` bytes per second."""

    latency_s: float = 0.0
    bandwidth_Bps: float = math.inf  # bytes per second; inf = free
    name: str = ""

    def __post_init__(self) -> None:
        # finite, at most LIMITS["seconds"]: an infinite latency would hang a rank, 1e308 makes nan
        object.__setattr__(self, "latency_s", real("link latency_s", self.latency_s, high=LIMITS["seconds"]))
        if self.bandwidth_Bps != math.inf:  # inf: a free wire
            bandwidth = real("link bandwidth_Bps", self.bandwidth_Bps, above=True)
            object.__setattr__(self, "bandwidth_Bps", bandwidth)

    def transfer_time(self, nbytes: float) -> float:
        """Seconds from the first byte leaving to the last byte arriving (`nbytes` >= 0: -5 is refused)."""
        nbytes = real("nbytes", nbytes)
        return self.latency_s + (nbytes / self.bandwidth_Bps if math.isfinite(self.bandwidth_Bps) else 0.0)


FREE = Link(name="free")


def per_boundary(value, n_boundaries: int, label: str, default=None) -> list:
    """One value per stage boundary (stage s -> s+1), from a single value or a list of them.
    ``None`` gives ``default`` everywhere; a single Link or number is repeated; a list must have
    exactly one entry per boundary. Every consumer (simulator, plans of both engines) calls this,
    so the rule and its error message live here once."""
    if value is None:
        return [default] * n_boundaries
    if isinstance(value, (Link, numbers.Real)):
        return [value] * n_boundaries
    require(
        isinstance(value, (list, tuple)),
        f"{label} must be one value or a list with one per stage boundary, got {value!r}",
    )
    values = list(value)
    require(
        len(values) == n_boundaries,
        f"{label} has {len(values)} entries but the pipeline has {n_boundaries} stage boundaries "
        "(stage s -> s+1); give one per boundary, or a single value for all",
    )
    return values


# ---- the simulator's door ------------------------------------------------------------------------
# What a device does after handing a message over. "overlapped": it moves on at once (isend; the
# default, and every lesson's figure unless it says otherwise). "blocking": it waits until the last
# byte has arrived (a blocking send, as Megatron-LM's p2p calls wait on their requests). A batched send
# (batch_isend_irecv: the send waited on together with the next receive, as Megatron Core's batch_p2p_comm
# and torch's Schedule1F1B do) gives "blocking"'s numbers here: messages travel on their own, so waiting
# for both ends when the later one is in, as waiting for one and then the other does. Not a third value.
SENDS = ("overlapped", "blocking")


def check_inputs(
    schedule: object, costs: object, boundary_bytes: object, links: object, stash: object
) -> None:
    """Refuse, naming the argument, anything ``simulate`` cannot read (before any work)."""
    # the messages are built only for a refusal: a Schedule's repr lists every action (milliseconds)
    if not isinstance(schedule, Schedule):
        example = "such as build_schedule('1f1b', 4, 8)"
        raise CourseError(f"schedule must be a Schedule ({example}), got {shown(schedule)}")
    check_costs(costs, boundary_bytes, links, stash)


def check_costs(costs: object, boundary_bytes: object, links: object = None, stash: object = None) -> None:
    """The costs, message sizes and links of a simulation (a dashboard's too), checked for their types."""
    if not (costs is None or isinstance(costs, StageCosts)):
        raise CourseError(f"costs must be StageCosts(f=..., i=..., w=...) or None, got {shown(costs)}")
    for name, value in (("boundary_bytes", boundary_bytes), ("stash_bytes", stash)):
        for i, x in enumerate(value if _is_list(value) else [] if value is None else [value]):
            real(f"{name}[{i}]" if _is_list(value) else name, x)
    for link in links if _is_list(links) else [] if links is None else [links]:
        if not isinstance(link, Link):
            raise CourseError(f"links must be a Link or a list of them, got {shown(link)}")


def _is_list(value: object) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, str)


def check_sends(sends: object) -> None:
    """Refuse a `sends` that is not one of SENDS, naming it and what is allowed (before any work)."""
    require(
        isinstance(sends, str) and sends in SENDS,
        f"sends must be one of {', '.join(repr(x) for x in SENDS)}, got {sends!r}",
    )
