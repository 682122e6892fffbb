"""The engine of the automatic zero-bubble scheduler: the greedy heuristic, played in time order.

``zero_bubble.py`` explains the rules and is the public side; this module plays them for any
placement of stages on devices: one stage per device (a line) or two in a V (stage s and 2p-1-s on
device s). A device picks, whenever it is free, among the next F, I and W of the stages it holds.

State is kept per stage (next micro-batch of each kind, when each output arrives) and per device
(memory held, when it is free, its order). Memory is counted in micro-batches of a *device's* layers:
one stage's micro-batch is 1/v of that with v stages per device.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass

from course_lib.autoschedule.scoring import score
from course_lib.shelf.errors import require
from course_lib.shelf.schedule import Action, Kind

INF = float("inf")
FILLS = (0.0, 0.5, 1.0)  # the grid over the gap-filling threshold, in units of T_W


@dataclass(frozen=True)
class Switches:
    """One point of the heuristic's grid (auto_zero_bubble's docstring, rules 1 to 3)."""

    delay_i: bool  # may a forward start although an I arrives before it would end?
    fill: float  # a W fills a gap at least fill * T_W long


@dataclass(frozen=True)
class Problem:
    """What the scheduler is given: the placement, per-stage costs, per-boundary message time, memory."""

    p: int
    m: int
    f: tuple[float, ...]  # per stage
    i: tuple[float, ...]
    w: tuple[float, ...]
    comm: tuple[float, ...]  # seconds per message across boundary s -> s+1 (0 where both on one device)
    limit: float  # micro-batches of a device's layers a device may hold at once
    w_memory: float = 1.0  # share of a micro-batch a pending W still holds (between its I and W)
    placement: tuple[int, ...] = ()  # stage -> device; () means stage d on device d

    @property
    def stage_device(self) -> tuple[int, ...]:
        return self.placement or tuple(range(self.p))

    @property
    def n_stages(self) -> int:
        return len(self.stage_device)


@dataclass
class HeuristicOrder:
    """One run: per-device (stage, kind, micro-batch) lists, the simulated step, the largest stage span.
    ``orders()`` makes the IR's Actions (only for the plan that is kept: fast)."""

    raw: list[list[tuple[int, Kind, int]]]
    step: float
    stage_span: float

    def orders(self) -> list[list[Action]]:
        return [[Action(s, kind, k) for s, kind, k in order] for order in self.raw]

    def score(self, objective: str) -> tuple[float, float]:
        """The objective first, the other figure to break ties."""
        return score(self.step, self.stage_span, objective)


class _Device:
    def __init__(self, stages: list[int]) -> None:
        self.stages = sorted(stages, reverse=True)  # later stages first: they finish micro-batches
        self.held = 0.0  # activations held (module docstring)
        # room kept for the later stage's forwards of micro-batches the earlier stage has started: in a
        # V, a device full of first-stage forwards could not take the second stage's, and every
        # micro-batch would wait for it (a deadlock)
        self.reserved = 0.0
        self.lower = min(stages) if len(stages) > 1 else None
        self.free = 0.0  # when the device is next idle
        self.wake = 0.0  # when its one valid entry in the event heap is due (INF: waiting for a message)
        self.last_was_i: bool | None = None  # None before its first I: the warm-up
        self.first: float | None = None
        self.pending_w: deque[tuple[int, int]] = deque()  # (stage, micro-batch), in the order of their I
        self.order: list[tuple[int, Kind, int]] = []


F, I, W = Kind.F, Kind.I, Kind.W  # noqa: E741 (bound once: the loops below are the scheduler's hot path)


class HeuristicRun:
    """One run of the heuristic: decisions in time order over all devices, as the simulator plays them.

    Per-kind state is kept in plain lists (``next_f``, ``next_i``), not dicts keyed by Kind: the
    scheduler makes a few hundred thousand decisions at p = 32, m = 256 (bench/bench_auto_scheduler.py)."""

    def __init__(self, pb: Problem, sw: Switches):
        self.pb, self.sw, n, m = pb, sw, pb.n_stages, pb.m
        self.n, self.where = n, pb.stage_device
        self.unit = pb.p / n  # one stage's micro-batch, in micro-batches of a device's layers
        self.next_f, self.next_i = [0] * n, [0] * n  # next micro-batch of each stage's F and I
        self.f_end = [[INF] * m for _ in range(n)]
        self.f_arrive = [[INF] * m for _ in range(n)]  # F(s, k)'s output at stage s+1's device
        self.i_arrive = [[INF] * m for _ in range(n)]  # I(s, k)'s output at stage s-1's device
        self.devs = [_Device([s for s in range(n) if self.where[s] == d]) for d in range(pb.p)]
        self.left = [3 * m * len(dev.stages) for dev in self.devs]  # actions still to run
        self.heap = [(0.0, d) for d in range(pb.p)]

    def play(self, give_up_after: float = INF) -> HeuristicOrder | None:
        """Run to the end; None if the step will be longer than `give_up_after` (it cannot win)."""
        heap, devs = self.heap, self.devs
        while heap:
            t, d = heapq.heappop(heap)
            if t != devs[d].wake:
                continue  # a stale entry: the device was woken sooner by a message
            if t > give_up_after:
                return None
            act, wake = self._decide(d, t)
            if act is None:
                self._wait(d, wake, t)
            else:
                self._run(d, t, *act)
        stuck = [d for d in range(self.pb.p) if self.left[d]]
        require(not stuck, f"auto_zero_bubble: devices {stuck} never finished (memory_limit {self.pb.limit})")
        span = max(dev.free - (dev.first or 0.0) for dev in devs)
        return HeuristicOrder([dev.order for dev in devs], max(dev.free for dev in devs), span)

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

    def _run(self, d: int, t: float, s: int, kind: Kind, k: int) -> None:
        pb, dev, n = self.pb, self.devs[d], self.n
        finish = t + (pb.f[s] if kind is F else pb.i[s] if kind is I else pb.w[s])
        dev.order.append((s, kind, k))
        dev.first = t if dev.first is None else dev.first
        if kind is F:
            self.next_f[s], dev.held, dev.last_was_i = k + 1, dev.held + self.unit, False
            if dev.lower is not None:  # the earlier stage keeps room for the later one's forward
                dev.reserved += self.unit if s == dev.lower else -self.unit
            self.f_end[s][k] = finish
            if s < n - 1:
                self.f_arrive[s][k] = finish + pb.comm[s]
                if self.next_f[s + 1] == k:
                    self._notify(self.where[s + 1], self.f_arrive[s][k])
        elif kind is I:
            self.next_i[s], dev.last_was_i = k + 1, True
            dev.held -= self.unit * (1 - pb.w_memory)
            dev.pending_w.append((s, k))
            if s > 0:
                self.i_arrive[s][k] = finish + pb.comm[s - 1]
                if self.next_i[s - 1] == k:
                    self._notify(self.where[s - 1], self.i_arrive[s][k])
        else:
            dev.pending_w.popleft()
            dev.held -= self.unit * pb.w_memory
        self.left[d] -= 1
        dev.free = dev.wake = finish
        if self.left[d]:
            heapq.heappush(self.heap, (finish, d))

    def _estimate(self, s: int, nb: int, t: float, cost: float, link: float) -> tuple[float, bool]:
        """An input not sent yet: unknown if its maker `nb` is on this device (which has yet to choose
        to make it), else a lower bound: the maker starts it when it is next free."""
        if self.where[nb] == self.where[s]:
            return INF, False
        return max(self.devs[self.where[nb]].free, t) + cost + link, False

    def _forward_input(self, s: int, t: float, k: int) -> tuple[float, bool]:
        """When F(s, k)'s input arrives, and whether that is known (else a lower bound)."""
        if s == 0:
            return 0.0, True
        known = self.f_arrive[s - 1][k]
        if known < INF:
            return known, True
        return self._estimate(s, s - 1, t, self.pb.f[s - 1], self.pb.comm[s - 1])

    def _backward_input(self, s: int, t: float, k: int) -> tuple[float, bool]:
        """When I(s, k)'s input arrives (and its own forward has ended), and whether that is known."""
        own = self.f_end[s][k]
        if s == self.n - 1:
            return own, True
        known = max(self.i_arrive[s + 1][k], own)
        if known < INF:
            return known, True
        if self.next_f[self.n - 1] <= k:
            return INF, False  # its forward has not reached the last stage: no backward under way yet
        return self._estimate(s, s + 1, t, self.pb.i[s + 1], self.pb.comm[s])

    def _candidates(self, d: int, t: float, kind: Kind) -> tuple[int | None, float, list[float]]:
        """The first of device d's stages whose next `kind` (F or I) may run now (None: none), the
        earliest time any of them may, and the arrival times that are known and still to come."""
        dev, forwards = self.devs[d], kind is F
        nxt, limit = (self.next_f, None) if forwards else (self.next_i, self.next_f)
        input_at = self._forward_input if forwards else self._backward_input
        ready, soonest, known = None, INF, []
        for s in dev.stages:
            k = nxt[s]
            if k >= (self.pb.m if limit is None else limit[s]):
                continue  # an I whose forward has not run, or no forward left
            if forwards and not self._room_for_forward(dev, s):
                continue
            at, ok = input_at(s, t, k)
            if at < soonest:
                soonest = at
            if ok and at <= t and ready is None:
                ready = s
            elif ok and at > t:
                known.append(at)
        return ready, soonest, known

    def _room_for_forward(self, dev: _Device, s: int) -> bool:
        """Whether a forward of stage s fits the limit: the earlier of two stages needs room for itself
        and for its later stage's forward; the later one's room is already kept."""
        if dev.lower is None:
            return dev.held + self.unit <= self.pb.limit + 1e-9
        return s != dev.lower or dev.held + dev.reserved + 2 * self.unit <= self.pb.limit + 1e-9

    def _decide(self, d: int, t: float) -> tuple[tuple[int, Kind, int] | None, float]:
        """Device d is free at t: the action to run now, or None and when to look again (INF: when a
        neighbour sends what it waits for)."""
        dev, sw = self.devs[d], self.sw
        i_stage, i_at, i_known = self._candidates(d, t, I)
        if i_stage is not None and not dev.last_was_i:  # one F, one I in turn: an I now, whatever F does
            return (i_stage, I, self.next_i[i_stage]), t
        f_stage, f_at, f_known = self._candidates(d, t, F)
        if f_stage is not None and not (sw.delay_i or dev.last_was_i or i_at >= t + self.pb.f[f_stage]):
            f_stage = None  # it would delay an I that is about to arrive
        if i_stage is not None and (f_stage is None or not dev.last_was_i):  # one F, one I in turn
            return (i_stage, I, self.next_i[i_stage]), t
        if f_stage is not None:
            return (f_stage, F, self.next_f[f_stage]), t
        if dev.pending_w:
            s, k = dev.pending_w[0]
            done = all(self.next_i[x] == self.pb.m for x in dev.stages)
            if min(i_at, f_at) - t >= sw.fill * self.pb.w[s] or done:
                return (s, W, k), t
        return None, min(i_known + f_known, default=INF)


def grid() -> list[Switches]:
    """Every combination of the heuristic's switches, in the order ties are broken: the ones that win
    most often first, so that with the step as objective the later runs can stop early."""
    often_best = [Switches(False, 0.0), Switches(True, 0.5)]
    rest = [Switches(d, f) for d in (False, True) for f in FILLS]
    return often_best + [sw for sw in rest if sw not in often_best]


def heuristic_orders(pb: Problem) -> dict[Switches, HeuristicOrder]:
    """Every grid point's plan: the heuristic alone, without the handcrafted schedules."""
    return {sw: HeuristicRun(pb, sw).play() for sw in grid()}


def best_heuristic_order(pb: Problem, objective: str) -> HeuristicOrder:
    """The grid's best plan (the first of equals); with the step as objective a run stops as soon as
    it is sure to be longer than the best so far."""
    best: HeuristicOrder | None = None
    for sw in grid():
        bound = best.step + 1e-9 if best is not None and objective == "step" else INF
        plan = HeuristicRun(pb, sw).play(give_up_after=bound)
        if plan is not None and (best is None or plan.score(objective) < best.score(objective)):
            best = plan
    assert best is not None  # the first run has no bound
    return best
