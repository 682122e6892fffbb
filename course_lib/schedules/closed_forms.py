"""Closed forms: each schedule's bubble and peak memory as a formula, with the range where it holds.

Each schedule's registry entry (``SCHEDULES[name].bubble`` and ``.peak``) carries one of these; the
CLI, the dashboard and the plots read them from there. tests/schedules/test_schedules_closed_forms.py checks
every formula against the simulator over a grid: wherever ``holds`` says yes, the two agree to
rounding error. Outside that range, trust the simulator.

- bubble: the idle share of the step, idle / (p * makespan) (GPipe's convention). Megatron divides
  the same idle time by the ideal compute time instead: bubble / (1 - bubble), see ``megatron``.
  A bubble formula assumes equal costs on every stage and free links.
- peak: micro-batches whose activations the busiest device holds at once (one per stage it holds).
  It depends only on the order, so it holds for any costs and links.

Try it::

    from course_lib.shelf.first_schedules import SCHEDULES
    from course_lib.schedules.closed_forms import Case
    form = SCHEDULES["interleaved-1f1b"].bubble
    form.text, form.where              # '(p-1)/(v*m+p-1)', 'm >= p (or v = 1); equal stage costs, free links'
    form.at(Case(p=4, m=8, v=2))       # 0.157...
    form.at(Case(p=4, m=2, v=2))       # None: outside its range
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

from course_lib.schedules.interleaved import rounds_of
from course_lib.schedules.zero_bubble import zb_2p_keeps_h1
from course_lib.shelf.errors import real, require, whole


class CostsLike(Protocol):  # what the spine reads of a costs.StageCosts (it imports nothing above it)
    def per_stage(self, n_stages: int) -> tuple[list[float], list[float], list[float]]: ...


class LinkLike(Protocol):  # ... and of a links.Link
    def transfer_time(self, nbytes: int) -> float: ...


@dataclass(frozen=True)
class Case:
    """Where a closed form is evaluated: sizes, one stage's costs, and whether the bubble forms'
    assumptions (equal costs on every stage, free links) are met."""

    p: int
    m: int
    v: int = 1
    f: float = 1.0
    i: float = 1.0
    w: float = 1.0
    equal_stages: bool = True
    free_links: bool = True

    @classmethod
    def of(
        cls, p: int, m: int, v: int = 1, costs: CostsLike | None = None, link: LinkLike | None = None,
        nbytes: int = 0,
    ) -> Case:
        """The case a simulation is in: stage `costs` (None: 1 each; a mean where stages differ, with
        equal_stages False), and a `link` (None: free) carrying `nbytes` per message."""
        per_stage = costs.per_stage(p * v) if costs is not None else ([1.0], [1.0], [1.0])
        f, i, w = (statistics.fmean(x) for x in per_stage)
        equal = all(len(set(x)) == 1 for x in per_stage)
        free = link is None or link.transfer_time(nbytes) == 0
        return cls(p, m, v, f, i, w, equal_stages=equal, free_links=free)


@dataclass(frozen=True)
class ClosedForm:
    """A formula for one figure of a schedule, the cases where it is exact, and where it comes from."""

    text: str  # the formula, e.g. "(p-1)/(m+p-1)"
    value: Callable[[Case], float]
    holds: Callable[[Case], bool]  # True exactly where `value` equals the simulator
    where: str  # the same range in words, e.g. "m >= p"
    source: str  # paper and section (or how it was found)
    megatron_text: str = ""  # bubble forms: the same idle time over ideal compute (Megatron's convention)

    def at(self, case: Case) -> float | None:
        """The formula's value at `case`, or None where it does not hold."""
        return self.value(case) if self.holds(case) else None

    def explain(self, case: Case, fmt: str = ".2%") -> str:
        """``formula (p-1)/p = 75.00%``, or where it holds when `case` is outside that range."""
        if self.holds(case):
            return f"formula {self.text} = {self.value(case):{fmt}}"
        return f"formula {self.text} does not apply here; it holds for {self.where}"


def megatron(bubble: float) -> float:
    """The idle share of the step (GPipe's convention) as idle time over ideal compute (Megatron's)."""
    return bubble / (1 - bubble)


def gpipe_bubble(p: int, m: int, v: int = 1, convention: str = "gpipe") -> float:
    """GPipe and 1F1B (v=1), interleaved 1F1B (v>1): equal stage costs, free links, m >= p when v > 1.

    convention "gpipe": idle share of the step, (p-1)/(v*m + p-1) (GPipe's (p-1)/(m+p-1) at v=1);
    convention "megatron": bubble time over ideal compute time, (p-1)/(v*m) (Megatron's (p-1)/m)."""
    # gpipe_bubble(0, 4) was a bubble of -inf; m may be fractional (charts draw the formula as a curve)
    p, m, v = whole("p", p), real("m", m, above=True), whole("v", v)
    require(
        convention in ("gpipe", "megatron"), f"convention must be 'gpipe' or 'megatron', got {convention!r}"
    )
    bubble = (p - 1) / (v * m + p - 1)
    return megatron(bubble) if convention == "megatron" else bubble


def _bubble(text: str, value, holds, where: str, source: str, megatron_text: str) -> ClosedForm:
    # every bubble formula assumes equal stage costs and free links, on top of its own range
    return ClosedForm(
        text, value, lambda c: c.equal_stages and c.free_links and holds(c),
        f"{where}; equal stage costs, free links", source, megatron_text,
    )


def _always(case: Case) -> bool:
    return True


def _zb_h1(c: Case) -> float:
    idle = (c.p - 1) * (c.f + c.i - c.w)  # per device
    return idle / (c.m * (c.f + c.i + c.w) + idle)


MEGATRON = "Megatron-LM, Narayanan et al. 2021, arXiv 2104.04473"

NAIVE_BUBBLE = _bubble(
    "(p-1)/p", lambda c: (c.p - 1) / c.p, _always, "any p, m", megatron_text="p-1",
    source="GPipe, Huang et al. 2019, arXiv 1811.06965 Fig. 2b: one device busy at a time",
)
FLUSH_BUBBLE = _bubble(  # GPipe and 1F1B: fill once, drain once
    "(p-1)/(m+p-1)", lambda c: gpipe_bubble(c.p, c.m), _always, "any m", megatron_text="(p-1)/m",
    source=f"GPipe arXiv 1811.06965 sec 2.3; {MEGATRON} sec 2.2.1 (as (p-1)/m)",
)
INTERLEAVED_BUBBLE = _bubble(
    "(p-1)/(v*m+p-1)", lambda c: gpipe_bubble(c.p, c.m, c.v), lambda c: c.m >= c.p or c.v == 1,
    "m >= p (or v = 1)", megatron_text="(p-1)/(v*m)",
    source=f"{MEGATRON} sec 2.2.2 (as (p-1)/(v*m)); the range found with the simulator",
)
ZB_H1_BUBBLE = _bubble(
    "(p-1)(F+I-W) / [m(F+I+W) + (p-1)(F+I-W)]", _zb_h1,
    lambda c: c.w <= min(c.f, c.i) and (c.m >= c.p or c.w == 0),
    "W <= min(F, I), and m >= p unless W = 0", megatron_text="(p-1)(F+I-W) / [m(F+I+W)]",
    source="Zero Bubble, Qi et al. 2024, arXiv 2401.10241 Table 2: idle (p-1)(T_F+T_B-T_W) per device "
    "(their B is our I), for m >= p; the condition on W found with the simulator",
)
LATENCY_AWARE_BUBBLE = replace(
    FLUSH_BUBBLE,
    source="this course's simulator: with free links the deeper warm-up leaves 1F1B's bubble as it is",
)

NAIVE_PEAK = ClosedForm("1", lambda c: 1, _always, "any p, m", source="one micro-batch at a time")
GPIPE_PEAK = ClosedForm("m", lambda c: c.m, _always, "any p, m", source=f"{MEGATRON} sec 2.2.1")
ONE_F_ONE_B_PEAK = ClosedForm(
    "min(p, m)", lambda c: min(c.p, c.m), _always, "any p, m", source=f"{MEGATRON} sec 2.2.1"
)
ZB_H1_PEAK = replace(
    ONE_F_ONE_B_PEAK,
    source="arXiv 2401.10241 sec 2.1 and Table 2: at most 1F1B's p micro-batches (each held until its W)",
)
INTERLEAVED_PEAK = ClosedForm(
    "min((v-1)*r + 2p-1, v*m)",
    lambda c: min((c.v - 1) * rounds_of(c.p, c.m)[1] + 2 * c.p - 1, c.v * c.m), _always,
    "every m it accepts, with r = m // max(1, m // p) micro-batches per round",
    source="device 0's warm-up, (v-1)*r + 2(p-1) forwards (the order of Megatron-LM and of torch's "
    "ScheduleInterleaved1F1B), plus one in the steady state",
)
LATENCY_AWARE_PEAK = ClosedForm(
    "min(2p-1, m)", lambda c: min(2 * c.p - 1, c.m), _always, "any p, m (one extra per link)",
    source="device 0's warm-up, (1 + 1 extra) forwards per link below it, plus one in the steady state",
)


# ---- V-shape schedules (ZB-V, DualPipeV): 2p stages, f, i, w are one stage's (half a device's) costs ----
def _idle_share(c: Case, idle_per_device: float) -> float:
    # every device runs two stages' F, I and W for m micro-batches: 2m(F+I+W) of work
    return idle_per_device / (2 * c.m * (c.f + c.i + c.w) + idle_per_device)


ZB_V_BUBBLE = _bubble(
    "(p-1)(I + max(0, I-2W)) / [2m(F+I+W) + (p-1)(I + max(0, I-2W))]",
    lambda c: _idle_share(c, (c.p - 1) * (c.i + max(0.0, c.i - 2 * c.w))),
    lambda c: c.m >= 2 * c.p - 1 and c.f <= c.i and c.w <= c.i,
    "m >= 2p-1, F <= I and W <= I (one stage's costs)",
    megatron_text="(p-1)(I + max(0, I-2W)) / [2m(F+I+W)]",
    source="Zero Bubble, Qi et al. 2024, arXiv 2401.10241 sec 6 (ZB-V; sail-sg's summary: bubble 0 at "
    "T_F = T_B = T_W, 1F1B's activation memory, twice its point-to-point traffic). That 0 leaves out the "
    "fill: at F = I = W no device here waits once it has started, but device p-1 starts (p-1) stage-times "
    "after device 0, and this simulator counts that as idle. The formula and its range found with the "
    "simulator",
)
DUALPIPE_V_BUBBLE = _bubble(
    "(p-1)(F + I - min(W, I)) / [2m(F+I+W) + (p-1)(F + I - min(W, I))]",
    lambda c: _idle_share(c, (c.p - 1) * (c.f + c.i - min(c.w, c.i))),
    lambda c: c.m >= 2 * c.p and c.f >= c.i and c.w >= c.f - c.i,
    "m >= 2p, F >= I and W >= F - I (one stage's costs; F = I: any W); the overlapped F&B pairs run "
    "one after the other",
    megatron_text="(p-1)(F + I - min(W, I)) / [2m(F+I+W)]",
    source="DeepSeek-V3, arXiv 2412.19437 sec 3.2.1 Table 2: DualPipe's bubble (PP/2-1)(F&B+B-3W) on PP "
    "devices; DualPipeV (deepseek-ai/DualPipe README) has the same on PP/2 devices, i.e. (p-1)(F&B+B-3W) "
    "here. That form assumes an overlapped F&B costs less than F + B; this simulator runs the pair "
    "one after the other, and counts the fill as idle. The formula and its range found with the simulator",
)
ZB_V_PEAK = ClosedForm(
    "min(2m, 2p)", lambda c: min(2 * c.m, 2 * c.p), _always,
    "any p, m; counted in stages' micro-batches (each half a device's layers): 1F1B's p micro-batches",
    source="arXiv 2401.10241 sec 6: ZB-V keeps 1F1B's peak activation memory, on every device",
)
DUALPIPE_V_PEAK = ClosedForm(
    "2p+1", lambda c: 2 * c.p + 1, _always,
    "every m it accepts (m >= 2p); counted in stages' micro-batches (chunks of half a device)",
    source="DeepSeek-V3, arXiv 2412.19437 sec 3.2.1 Table 2: PP+1 chunks of activations per device, with "
    "PP = 2p chunks in DualPipeV",
)


# --- looped BFS, interleaved zero bubble, ZB-H2 (issue 13) ---------------------------------------


def _zb_family(c: Case) -> float:
    """ZB-H1's idle, (p-1)(F+I-W) per device, over v*m micro-batches' work per device."""
    idle = (c.p - 1) * (c.f + c.i - c.w)
    return idle / (c.v * c.m * (c.f + c.i + c.w) + idle)


def _zb_h2(c: Case) -> float:
    # per device: the parallelogram's slant, d*F before device d starts and (p-1-d)*F after it ends
    idle = (c.p - 1) * c.f
    return idle / (c.m * (c.f + c.i + c.w) + idle)


def _zb_h2_holds(c: Case) -> bool:
    enough = c.m >= 2 * c.p - 1 or (c.m >= c.p and c.i <= c.f)
    return enough and c.i <= 2 * min(c.w, c.f)


LOOPED_BFS_BUBBLE = _bubble(
    "(p-1)/(v*m+p-1)", lambda c: gpipe_bubble(c.p, c.m, c.v), lambda c: c.m >= c.p or c.v == 1,
    "m >= p (or v = 1)", megatron_text="(p-1)/(v*m)",
    source="Breadth-First Pipeline Parallelism, Lamy-Poirier 2022, arXiv 2211.05953 (GPipe on each loop "
    "of the pipe); the range found with the simulator",
)
LOOPED_BFS_PEAK = ClosedForm(
    "v*m", lambda c: c.v * c.m, _always, "any p, m, v",
    source="every forward of every stage a device holds runs before its first backward (arXiv 2211.05953)",
)
INTERLEAVED_ZB_BUBBLE = _bubble(
    "(p-1)(F+I-W) / [v*m(F+I+W) + (p-1)(F+I-W)]", _zb_family,
    lambda c: c.w <= min(c.f, c.i) and (c.m >= c.p or (c.w == 0 and c.v == 1)),
    "W <= min(F, I), and m >= p (unless W = 0 and v = 1)", megatron_text="(p-1)(F+I-W) / [v*m(F+I+W)]",
    source="ZB-H1's idle (Zero Bubble, Qi et al. 2024, arXiv 2401.10241 Table 2) over v times the work "
    "per device, F, I, W being one stage's costs; the form and its range found with the simulator",
)
INTERLEAVED_ZB_PEAK = ClosedForm(
    "min((v-1)*r + p, v*m)",
    lambda c: min((c.v - 1) * rounds_of(c.p, c.m)[1] + c.p, c.v * c.m), _always,
    "every m it accepts, with r = m // max(1, m // p) micro-batches per round",
    source="device 0's warm-up, (v-1)*r + p-1 forwards (torch's ScheduleInterleavedZeroBubble), plus one "
    "in the steady state; a later device's shorter warm-up is made up by the W's it keeps pending",
)
ZB_H2_BUBBLE = _bubble(
    "(p-1)F / [m(F+I+W) + (p-1)F]", _zb_h2, _zb_h2_holds,
    "I <= 2*min(F, W), and m >= 2p-1 (m >= p if I <= F)", megatron_text="(p-1)F / [m(F+I+W)]",
    source="Zero Bubble, Qi et al. 2024, arXiv 2401.10241 sec 2.2 and Table 2: no idle time between a "
    "device's first and last action ((p-1)(T_F+T_B-2T_W) = 0 at T_F = T_B = T_W); what remains is the "
    "parallelogram's slant, (p-1)F per device (the last device starts (p-1)F late). Range found with the "
    "simulator",
)
ZB_H2_PEAK = ClosedForm(
    "min(2p-1, m)", lambda c: min(2 * c.p - 1, c.m), _always, "any p, m (on every device)",
    source="arXiv 2401.10241 sec 2.2 and Table 2: up to 2p-1 micro-batches; here every device reaches it",
)


# --- the automatic zero-bubble scheduler at the paper's limits (autoschedule/zero_bubble.py) ------
_AUTO = (
    "at equal costs and free links the heuristic (autoschedule/zero_bubble.py) finds no shorter step "
    "than the handcrafted schedules and keeps them on a tie; checked with the simulator for p <= 8, m <= 16"
)


_zb_2p_keeps_h1: Callable[[Case], bool] = lambda c: zb_2p_keeps_h1(c.p, c.m)  # noqa: E731
ZB_1P_BUBBLE = replace(ZB_H1_BUBBLE, source=f"ZB-H1's form: {_AUTO}")
ZB_1P_PEAK = replace(ZB_H1_PEAK, source=f"ZB-H1's peak, the limit p: {_AUTO}")
ZB_2P_BUBBLE = _bubble(
    "ZB-H1's form if m <= p and p >= 3, else ZB-H2's",
    lambda c: _zb_h1(c) if _zb_2p_keeps_h1(c) else _zb_h2(c),
    lambda c: (ZB_H1_BUBBLE.holds(c) if _zb_2p_keeps_h1(c) else ZB_H2_BUBBLE.holds(c)),
    "ZB-H1's range if m <= p and p >= 3, else ZB-H2's (I <= 2*min(F, W), and m >= 2p-1, or m >= p if I <= F)",
    megatron_text="as ZB-H1 / ZB-H2", source=f"ZB-H2's form, ZB-H1's for m <= p: {_AUTO}",
)
ZB_2P_PEAK = ClosedForm(
    "min(p, m) if m <= p and p >= 3, else min(2p-1, m)",
    lambda c: min(c.p, c.m) if _zb_2p_keeps_h1(c) else min(2 * c.p - 1, c.m), _always,
    "any p, m (within the limit 2p)", source=f"ZB-H1's / ZB-H2's peak: {_AUTO}",
)
