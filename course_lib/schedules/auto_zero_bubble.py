"""An automatic zero-bubble scheduler under a memory limit (Qi et al. 2024, arXiv 2401.10241 sec 3).

ZB-H1 and ZB-H2 are two hand-drawn points. The paper's sec 3 builds a schedule for *given* costs
(T_F, T_B, T_W per stage; our I is its B), a link time T_comm and a limit on activation memory, with
a greedy heuristic and a small grid over its switches (it then polishes the result with an ILP, which
this course does not do). This module is that heuristic, written for this course's IR:

1. **Warm-up:** a device runs as many forwards as the memory limit allows before its first input
   gradient (I) arrives. Switch ``delay_i``: may a forward start if an I arrives before it would end?
2. **Steady state:** one F, one I in turn, the first I as soon as it arrives; a pending weight
   gradient (W) runs when nothing else may, which is also what frees memory. With the limit reached
   this settles into 1F-1I-1W.
3. **Gaps:** when nothing else is ready a pending W fills the gap if the gap is at least
   ``fill * T_W`` long (``fill`` = 0: always; 1: only if the whole W fits), else the device waits.
4. **Tail:** once a device's forwards and I's are done it runs its pending W's.

Decisions are taken in time order over all devices with the simulator's rules (an action starts when
its device is free and its inputs have arrived; a message takes ``comm`` seconds), so the times the
heuristic sees are the simulated ones (a test checks it). It waits for late messages and fills the
wait with forwards while memory lasts: spare memory hides link latency, where ZB-H1's fixed warm-up
cannot. The grid's best plan is then compared with the handcrafted schedules that fit the same limit
(ZB-H1 needs ``min(p, m)``, ZB-H2 ``min(2p-1, m)``) and the best simulated step wins, so the result is
never worse than them at the same memory.

**Memory.** A micro-batch counts 1 from its F's start to its I's end, then ``w_memory`` until its W
ends: what the W still needs (the layers' inputs, not the intermediate activations the I used). This
course's timelines count 1 all the way to W (``w_memory=1``, the default and what ``zb-1p`` / ``zb-2p``
use, so ``Timeline.peak_inflight`` stays within the limit). The Zero Bubble authors count a pending W
as 32h of a forward's 34h + 5as per token (their Table 1; sail-sg/zero-bubble-pipeline-parallelism,
``zerobubble/runtime.py``), about a third of a micro-batch: :func:`paper_memory` gives that share.

Try it::

    from course_lib.schedules.auto_zero_bubble import auto_zero_bubble
    from course_lib.costs import StageCosts
    s = auto_zero_bubble(8, 24, memory_limit=16, costs=StageCosts(18.522, 18.086, 9.337), comm=0.601)
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, replace

from course_lib.costs import StageCosts
from course_lib.errors import require
from course_lib.links import per_boundary
from course_lib.schedules.basic import check_sizes
from course_lib.schedules.ir import Action, Kind, Schedule
from course_lib.schedules.zb_scoring import OBJECTIVES, score, simulated_score
from course_lib.schedules.zero_bubble import zb_h1, zb_h2

INF = float("inf")
FILLS = (0.0, 0.5, 1.0)  # the grid over the gap-filling threshold, in units of T_W


@dataclass(frozen=True)
class Switches:
    """One point of the heuristic's grid (module docstring, rules 1 to 3)."""

    delay_i: bool  # may a forward start although an I arrives before it would end?
    fill: float  # a W fills a gap at least fill * T_W long


@dataclass(frozen=True)
class Problem:
    """What the scheduler is given: sizes, per-stage costs, per-link message time, the memory limit."""

    p: int
    m: int
    f: tuple[float, ...]
    i: tuple[float, ...]
    w: tuple[float, ...]
    comm: tuple[float, ...]  # seconds per message on link d -> d+1 (and back)
    limit: float  # micro-batches of activations a device may hold at once
    w_memory: float = 1.0  # share of a micro-batch a pending W still holds (between its I and W)


@dataclass
class Plan:
    """One run of the heuristic: per-device (kind, micro-batch) lists, the simulated step and the
    largest stage span. ``orders()`` makes the IR's Actions (only for the plan that is kept: fast)."""

    raw: list[list[tuple[Kind, int]]]
    step: float
    stage_span: float

    def orders(self) -> list[list[Action]]:
        return [[Action(d, kind, k) for kind, k in order] for d, order in enumerate(self.raw)]

    def score(self, objective: str) -> tuple[float, float]:
        """The objective first, the other figure to break ties."""
        return score(self.step, self.stage_span, objective)



def paper_memory(hidden: int, heads: int, seq_len: int) -> float:
    """The share of a micro-batch's activations a pending W holds, as the Zero Bubble authors count it
    (per token: a forward keeps 34h + 5as, a W still needs 32h)."""
    return 32 * hidden / (34 * hidden + 5 * heads * seq_len)


class _Device:
    """One device's counters while the heuristic runs (stage d on device d)."""

    def __init__(self) -> None:
        self.next_f = self.next_i = self.next_w = 0  # next micro-batch of each kind
        self.held = 0.0  # activations held, in micro-batches (module docstring, Memory)
        self.free = 0.0  # when the device is next idle
        self.wake = 0.0  # when its one valid entry in the event heap is due (INF: waiting for a message)
        self.last_was_i: bool | None = None  # None before its first I: the warm-up
        self.first: float | None = None  # when its first action started
        self.order: list[tuple[Kind, int]] = []


class _Run:
    """One run of the heuristic: decisions in time order over all devices, as the simulator plays them."""

    def __init__(self, pb: Problem, sw: Switches):
        self.pb, self.sw = pb, sw
        self.f_end = [[INF] * pb.m for _ in range(pb.p)]  # when F(d, k) ended
        self.f_arrive = [[INF] * pb.m for _ in range(pb.p)]  # when F(d, k)'s output reaches device d+1
        self.i_arrive = [[INF] * pb.m for _ in range(pb.p)]  # when I(d, k)'s output reaches device d-1
        self.devs = [_Device() for _ in range(pb.p)]
        self.heap = [(0.0, d) for d in range(pb.p)]

    def play(self, give_up_after: float = INF) -> Plan | None:
        """Run to the end; None if the step will be longer than `give_up_after` (it cannot win)."""
        while self.heap:
            t, d = heapq.heappop(self.heap)
            if t != self.devs[d].wake:
                continue  # a stale entry: the device was woken sooner by a message
            if t > give_up_after:
                return None
            act, wake = self._decide(d, t)
            if act is None:
                self._wait(d, wake, t)
            else:
                self._run(d, t, *act)
        stuck = [d for d, dev in enumerate(self.devs) if dev.next_w < self.pb.m]
        require(not stuck, f"auto_zero_bubble: devices {stuck} never finished (memory_limit {self.pb.limit})")
        ends = [dev.free for dev in self.devs]
        span = max(dev.free - (dev.first or 0.0) for dev in self.devs)
        return Plan([dev.order for dev in self.devs], max(ends), span)

    def _wait(self, d: int, until: float, now: float) -> None:
        dev = self.devs[d]
        dev.free, dev.wake = now, until
        if until < INF:
            heapq.heappush(self.heap, (until, d))

    def _notify(self, d: int, arrival: float) -> None:
        """A message device d waits for arrives at `arrival`: wake it then, unless it wakes sooner."""
        dev = self.devs[d]
        if dev.wake > dev.free and arrival < dev.wake:  # it is waiting, and this is sooner
            self._wait(d, max(arrival, dev.free), dev.free)

    def _run(self, d: int, t: float, kind: Kind, k: int) -> None:
        pb, dev = self.pb, self.devs[d]
        finish = t + (pb.f if kind is Kind.F else pb.i if kind is Kind.I else pb.w)[d]
        dev.order.append((kind, k))
        dev.first = t if dev.first is None else dev.first
        if kind is Kind.F:
            dev.next_f, dev.held, dev.last_was_i = k + 1, dev.held + 1, False
            self.f_end[d][k] = finish
            if d < pb.p - 1:
                self.f_arrive[d][k] = finish + pb.comm[d]
                if self.devs[d + 1].next_f == k:
                    self._notify(d + 1, self.f_arrive[d][k])
        elif kind is Kind.I:
            dev.next_i, dev.held, dev.last_was_i = k + 1, dev.held - (1 - pb.w_memory), True
            if d > 0:
                self.i_arrive[d][k] = finish + pb.comm[d - 1]
                if self.devs[d - 1].next_i == k:
                    self._notify(d - 1, self.i_arrive[d][k])
        else:
            dev.next_w, dev.held = k + 1, dev.held - pb.w_memory
        dev.free = dev.wake = finish
        if dev.next_w < pb.m:
            heapq.heappush(self.heap, (finish, d))

    def _input_at(self, d: int, t: float, kind: Kind, k: int) -> tuple[float, bool]:
        """When the input of (kind, k) on device d arrives, and whether that is known; if not, a lower
        bound (the neighbour has not started the action that makes it)."""
        pb = self.pb
        if kind is Kind.F:
            if d == 0:
                return 0.0, True
            known, nb, cost, link = self.f_arrive[d - 1][k], d - 1, pb.f[d - 1], pb.comm[d - 1]
        else:
            own = self.f_end[d][k]
            if d == pb.p - 1:
                return own, True
            known, nb, cost, link = max(self.i_arrive[d + 1][k], own), d + 1, pb.i[d + 1], pb.comm[d]
        if known < INF:
            return known, True
        return max(self.devs[nb].free, t) + cost + link, False

    def _decide(self, d: int, t: float) -> tuple[tuple[Kind, int] | None, float]:
        """Device d is free at t: the action to run now, or None and when to look again (INF: when a
        neighbour sends what it waits for)."""
        pb, dev, sw = self.pb, self.devs[d], self.sw
        i_at, i_known = INF, False
        if dev.next_i < dev.next_f:  # an I whose forward has run
            i_at, i_known = self._input_at(d, t, Kind.I, dev.next_i)
        f_at, f_known = INF, False
        if dev.next_f < pb.m and dev.held + 1 <= pb.limit + 1e-9:
            f_at, f_known = self._input_at(d, t, Kind.F, dev.next_f)
        i_now = i_known and i_at <= t
        f_now = f_known and f_at <= t and (sw.delay_i or dev.last_was_i or i_at >= t + pb.f[d])
        if i_now and (not f_now or not dev.last_was_i):  # one F, one I in turn
            return (Kind.I, dev.next_i), t
        if f_now:
            return (Kind.F, dev.next_f), t
        gap = min(i_at, f_at) - t
        if dev.next_w < dev.next_i and (gap >= sw.fill * pb.w[d] or dev.next_i == pb.m):
            return (Kind.W, dev.next_w), t
        return None, min((x for x, ok in ((i_at, i_known), (f_at, f_known)) if ok and x > t), default=INF)


def grid() -> list[Switches]:
    """Every combination of the heuristic's switches, in the order ties are broken."""
    return [Switches(delay, fill) for delay in (False, True) for fill in FILLS]


def problem(
    n_devices: int, n_microbatches: int, memory_limit: float, costs: StageCosts | None = None,
    comm: float | Sequence[float] = 0.0, w_memory: float = 1.0,
) -> Problem:  # fmt: skip
    """Check the inputs (naming any bad value) and put them in one Problem."""
    p, m = n_devices, n_microbatches
    check_sizes(p, m)
    require(
        isinstance(memory_limit, (int, float)) and memory_limit >= 1,
        f"memory_limit is the most micro-batches of activations a device may hold, a number >= 1 (one "
        f"forward's worth); got {memory_limit!r}",
    )
    require(0 <= w_memory <= 1, f"w_memory is a share of a micro-batch, between 0 and 1; got {w_memory!r}")
    f, i, w = (costs or StageCosts()).per_stage(p)
    links = tuple(float(c) for c in per_boundary(comm, p - 1, "comm", 0.0))
    require(all(c >= 0 for c in links), f"comm (seconds per message) must be >= 0, got {list(links)}")
    return Problem(p, m, tuple(f), tuple(i), tuple(w), links, float(memory_limit), float(w_memory))


def heuristic_plans(pb: Problem) -> dict[Switches, Plan]:
    """Every grid point's plan: the heuristic alone, without the handcrafted schedules."""
    return {sw: _Run(pb, sw).play() for sw in grid()}


def _best_plan(pb: Problem, objective: str) -> Plan:
    """The grid's best plan (the first of equals); with the step as objective a run stops as soon as
    it is sure to be longer than the best so far."""
    best: Plan | None = None
    for sw in grid():
        bound = best.step + 1e-9 if best is not None and objective == "step" else INF
        plan = _Run(pb, sw).play(give_up_after=bound)
        if plan is not None and (best is None or plan.score(objective) < best.score(objective)):
            best = plan
    assert best is not None  # the first run has no bound
    return best


def auto_zero_bubble(
    n_devices: int, n_microbatches: int, memory_limit: float, costs: StageCosts | None = None,
    comm: float | Sequence[float] = 0.0, *, w_memory: float = 1.0, objective: str = "step",
    name: str = "auto-zb",
) -> Schedule:  # fmt: skip
    """The best schedule found for p devices, m micro-batches, at most `memory_limit` micro-batches of
    activations on any device, stage `costs` (default 1 each) and `comm` seconds per message (one
    number, or one per link). `objective`: "step" (the simulated makespan) or "stage-span" (the Zero
    Bubble paper's cost: the longest time from a device's first action to its last). Never worse than
    ZB-H1 / ZB-H2 where they fit the limit (module docstring)."""
    require(objective in OBJECTIVES, f"objective must be one of {OBJECTIVES}, got {objective!r}")
    pb = problem(n_devices, n_microbatches, memory_limit, costs, comm, w_memory)
    best = _best_plan(pb, objective)
    found = Schedule(name, pb.p, pb.m, best.orders(), list(range(pb.p)), split_backward=True)
    p, m = pb.p, pb.m
    seeds = [replace(s(p, m), name=name) for s, need in ((zb_h1, min(p, m)), (zb_h2, min(2 * p - 1, m)))
             if memory_limit >= need]  # fmt: skip
    if not seeds:
        return found
    scores = [simulated_score(s, costs, pb.comm, objective) for s in seeds] + [best.score(objective)]
    return (seeds + [found])[scores.index(min(scores))]  # a handcrafted one where the heuristic only ties


def zb_1p(n_devices: int, n_microbatches: int) -> Schedule:
    """ZB-1p: the automatic scheduler at the paper's limit of p micro-batches (1F1B's memory), equal
    costs, free links."""
    return auto_zero_bubble(n_devices, n_microbatches, n_devices, name="zb-1p")


def zb_2p(n_devices: int, n_microbatches: int) -> Schedule:
    """ZB-2p: the automatic scheduler at the paper's limit of 2p micro-batches, equal costs, free links."""
    return auto_zero_bubble(n_devices, n_microbatches, 2 * n_devices, name="zb-2p")
