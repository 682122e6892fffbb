"""Discrete-event simulator: turn a Schedule plus a cost model into a Timeline.

Rules, the same ones a real pipeline obeys:

- each device runs its actions strictly in the order the schedule gives it;
- an action starts when its device is free AND all it depends on (``ir.dependencies``) has arrived;
- an output crosses to another device exactly when ``schedules.messages`` says it does (the rule
  the engines use too); a dependency between stages on the same device costs nothing;
- a receive waits for the last byte; a send, by the option ``sends`` (``SENDS``): "overlapped" (the
  default: the sender moves on at once, like torch's isend or a NIC's DMA) or "blocking" (the sender's
  device is busy until the message's last byte has arrived, like a blocking send/recv pair; the wait
  shows as idle, not as a span);
- messages on the same wire (one direction between two devices) queue for bandwidth, but latency
  pipelines: a second message may be in flight while the first is still travelling.

Try it (``simulate_named("1f1b", 4, 8)`` builds and simulates a registered schedule in one call)::

    from course_lib.shelf.registry import build_schedule
    from course_lib.shelf.simulator import StageCosts, simulate
    from course_lib.shelf.links import Link
    tl = simulate(build_schedule("1f1b", 4, 8), StageCosts(f=1e-3, i=1e-3, w=1e-3),
                  boundary_bytes=64 * 2**20, links=Link(latency_s=1e-4, bandwidth_Bps=50e9))
    print(tl.makespan, tl.bubble_fraction)
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from typing import NamedTuple, NoReturn

from course_lib import fast_simulator as simulator_fast
from course_lib.fast_simulator import Route
from course_lib.shelf.costs import StageCosts
from course_lib.shelf.errors import require
from course_lib.shelf.links import FREE, Link, per_boundary
from course_lib.shelf.messages import message_of
from course_lib.shelf.registry import build_schedule
from course_lib.shelf.schedule import Action, Kind, Schedule
from course_lib.shelf.sim_inputs import SENDS as SENDS  # re-exported: simulate(sends=...) takes one of them
from course_lib.shelf.sim_inputs import check_costs, check_inputs, check_sends
from course_lib.shelf.timeline import SIMULATED, Span, Timeline, Transfer
from course_lib.shelf.validate import ScheduleError, check

# The event loop works on plain lists of numbers: hashing Action objects 100k times would dominate the
# run time. An action's key is (micro-batch * n_stages + stage) * 4 + kind code; key % (4 * n_stages)
# is then stage * 4 + kind, the index into the tables that depend only on stage and kind.
_KINDS = (Kind.F, Kind.B, Kind.I, Kind.W)
_KIND_CODE = {kind: code for code, kind in enumerate(_KINDS)}
_F, _B, _I, _W = 0, 1, 2, 3

Started = tuple[int, int, float, float]  # (device, position in its order, start, end)
Sent = tuple[int, int, int, float, float, int]  # (src, position, dst, begin, arrival, bytes)


def simulate(
    schedule: Schedule, costs: StageCosts | None = None, boundary_bytes: int | Sequence[int] = 0,
    links: Link | Sequence[Link] | None = None, *, stash_bytes: Sequence[int] | None = None,
    source: str = SIMULATED, sends: str = "overlapped",
) -> Timeline:  # fmt: skip
    """Run `schedule` under the cost model and return what happened, as a Timeline.

    `costs`: StageCosts (default: 1 for each of F, I and W). `boundary_bytes`: bytes one
    micro-batch sends across each stage boundary (s -> s+1), one number or one per boundary;
    gradients going back have the same size. `links`: one Link for every boundary or one per
    boundary (default: free). `stash_bytes`: bytes of activations one micro-batch keeps alive on
    each stage until its backward; if not given, the boundary tensor the stage receives (a lower
    bound: a real stage stashes every layer's activations). `source`: SIMULATED, or
    MEASURED_COMPUTE when `costs` were measured. `sends`: one of SENDS, what a sender does while its
    message travels (see the module's docstring)."""
    check_sends(sends)
    check_inputs(schedule, costs, boundary_bytes, links, stash_bytes)
    n_st = schedule.n_stages
    nbytes = per_boundary(boundary_bytes, n_st - 1, "boundary_bytes", 0)
    require(all(x >= 0 for x in nbytes), f"boundary_bytes must be >= 0, got {nbytes}")
    wires = per_boundary(links, n_st - 1, "links", FREE)
    tables = _tables(schedule, costs if costs is not None else StageCosts(), nbytes, wires)
    with simulator_fast.gc_paused():
        spans, transfers, finished = _play_fast(schedule, tables, sends == "blocking")
        if not finished:
            _reject(schedule)  # a deadlock: the validator explains it best (and the same way everywhere)
        return _timeline(schedule, spans, transfers, nbytes, stash_bytes, source)


def simulate_named(
    name: str, p: int, m: int, virtual: int | None = None, costs: StageCosts | None = None,
    boundary_bytes: int | Sequence[int] = 0, links: Link | Sequence[Link] | None = None,
    sends: str = "overlapped",
) -> Timeline:  # fmt: skip
    """Build the registered schedule `name` for p devices, m micro-batches and `virtual` stages per
    device (None: the registry's default), and simulate it: the one way every caller (CLI, dashboard,
    comparisons, plots, planner) simulates a schedule by name. `costs` are a device's share of the
    model (default: 1 each for F, I, W), so each of its v stages costs 1/v and every v does the same work.
    `sends`: one of SENDS (``simulate``)."""
    check_sends(sends)
    schedule = build_schedule(name, p, m, virtual)
    check_costs(costs, None)  # before per_virtual_stage; simulate checks the rest once
    share = (costs if costs is not None else StageCosts()).per_virtual_stage(schedule.stages_per_device)
    return simulate(schedule, share, boundary_bytes, links, sends=sends)


class _Tables(NamedTuple):
    """What the event loop reads, as integers and lists (see the key layout above)."""

    keys: list[list[int]]  # each device's action keys, in its order
    owner: list[int]  # key -> the device that runs it (-1: nobody)
    durations: list[float]  # (stage, kind) -> seconds
    routes: list[Route | None]  # (stage, kind) -> where its output goes (None: it stays)


def _tables(schedule: Schedule, costs: StageCosts, nbytes: list, wires: list[Link]) -> _Tables:
    keys, owner = _index_actions(schedule)
    return _Tables(keys, owner, _durations(costs, schedule.n_stages), _routes(schedule, nbytes, wires))


def _index_actions(schedule: Schedule) -> tuple[list[list[int]], list[int]]:
    """Each device's action keys in order, and key -> the device that runs it (-1: nobody). An
    action the simulator cannot place (unknown stage or micro-batch, on a device that does not hold
    its stage, or seen twice) hands the schedule to the validator, which says what is wrong."""
    n_st, n_mb, where = schedule.n_stages, schedule.n_microbatches, schedule.stage_to_device
    if len(where) != n_st:
        _reject(schedule)
    owner = [-1] * (n_mb * n_st * 4)
    keys: list[list[int]] = []
    for d, order in enumerate(schedule.orders):
        dk = []
        for a in order:
            s, m = a.stage, a.microbatch
            k = (m * n_st + s) * 4 + _KIND_CODE[a.kind]
            if not (0 <= s < n_st and 0 <= m < n_mb and where[s] == d and owner[k] == -1):
                _reject(schedule)
            owner[k] = d
            dk.append(k)
        keys.append(dk)
    return keys, owner


def _reject(schedule: Schedule) -> NoReturn:
    """Raise the validator's explanation of why `schedule` cannot run. It checks the same rules (the
    same dependencies, every action once on its stage's device), so it always finds the reason."""
    raise ScheduleError(schedule.name, check(schedule))


def _dependency_keys(k: int, n_st: int, split_backward: bool) -> list[int]:
    """Integer form of ``ir.dependencies`` (a test checks the two agree on every action)."""
    kind = k & 3
    sm = k >> 2  # micro-batch * n_st + stage
    s = sm % n_st
    if kind == _F:
        return [k - 4] if s > 0 else []  # F of stage s-1, same micro-batch
    if kind == _W:
        return [k - 1]  # I of the same stage and micro-batch
    deps = [k - kind]  # own forward
    if s < n_st - 1:  # the input gradient from stage s+1
        deps.append((sm + 1) * 4 + (_I if split_backward else _B))
    return deps


def _durations(costs: StageCosts, n_st: int) -> list[float]:
    """Seconds per (stage, kind), at stage * 4 + kind: F costs f, B costs i + w, I costs i, W costs w."""
    f, i, w = costs.per_stage(n_st)
    return [cost for s in range(n_st) for cost in (f[s], i[s] + w[s], i[s], w[s])]


def _routes(schedule: Schedule, nbytes: list, wires: list[Link]) -> list[Route | None]:
    """Where each (stage, kind)'s output goes, at stage * 4 + kind (None: it stays on its device).
    ``message_of`` decides which outputs cross devices; the same holds for every micro-batch, so
    micro-batch 0 stands for all. The boundary a message crosses picks its link and its size."""
    table: list[Route | None] = [None] * (4 * schedule.n_stages)
    for s in range(schedule.n_stages):
        for code, kind in enumerate(_KINDS):
            msg = message_of(Action(s, kind, 0), schedule)
            if msg is not None:
                link, size = wires[msg.boundary], nbytes[msg.boundary]
                on_wire = size / link.bandwidth_Bps if size and math.isfinite(link.bandwidth_Bps) else 0.0
                table[s * 4 + code] = (msg.dst, int(size), on_wire, link.latency_s)
    return table


def _play_fast(
    schedule: Schedule, tables: _Tables, blocking: bool = False
) -> tuple[list[Span], list[Transfer], bool]:
    """``_play``'s result, computed in one pass without an event queue (``simulator_fast`` says why
    that gives the same numbers; a test checks it on every registered schedule)."""
    keys, owner, durations, routes = tables
    n_st, split = schedule.n_stages, schedule.split_backward
    return simulator_fast.play(keys, schedule.orders, durations, routes, n_st, split, len(owner), blocking)


def _play_reference(
    schedule: Schedule, tables: _Tables, blocking: bool = False
) -> tuple[list[Span], list[Transfer], bool]:
    """``_play``'s result as the Timeline's records: what the fast path must reproduce."""
    keys, owner, durations, routes = tables
    deps = [[_dependency_keys(k, schedule.n_stages, schedule.split_backward) for k in dk] for dk in keys]
    started, sent, finished = _play(keys, deps, owner, durations, routes, blocking)
    orders = schedule.orders
    spans = [Span(d, orders[d][pos], t0, t1) for d, pos, t0, t1 in started]
    transfers = [Transfer(d, dst, orders[d][pos], t0, t1, nb) for d, pos, dst, t0, t1, nb in sent]
    return spans, transfers, finished


def _play(
    keys: list[list[int]], deps: list[list[list[int]]], owner: list[int], durations: list[float],
    routes: list[Route | None], blocking: bool = False,
) -> tuple[list[Started], list[Sent], bool]:  # fmt: skip
    """The event loop, the simulator's rule as a student reads it: run every device's order;
    returns the actions started, the messages sent, and whether every device got to the end of its
    order (False: a deadlock). `blocking`: a sender waits for its message's last byte to arrive
    (sends="blocking"). ``simulate`` runs ``simulator_fast.play``, which gives the same numbers."""
    n_sk, n_dev, n_keys = len(durations), len(keys), len(owner)
    end = [0.0] * n_keys  # when the action finished, on its own device
    arrive = [0.0] * n_keys  # when its output reached the device that needs it
    done = [False] * n_keys
    waiters: dict[int, list[int]] = {}  # key -> devices blocked until it is done
    ptr, free = [0] * n_dev, [0.0] * n_dev  # per device: next position in its order, when it is free
    wire_free: dict[tuple[int, int], float] = {}  # (src, dst) -> when that wire is next idle
    started: list[Started] = []
    sent: list[Sent] = []
    heap: list[tuple[float, int, int, int]] = []  # completions (end, key, device, position), in time order
    push, pop = heapq.heappush, heapq.heappop

    def try_start(d: int) -> None:
        # Start device d's next action if its inputs are in; otherwise wait on the first missing one.
        pos = ptr[d]
        if pos == len(keys[d]):
            return
        t = free[d]
        for dep in deps[d][pos]:
            if not done[dep]:
                waiters.setdefault(dep, []).append(d)
                return
            ready = end[dep] if owner[dep] == d else arrive[dep]
            if ready > t:
                t = ready
        k = keys[d][pos]
        finish = t + durations[k % n_sk]
        started.append((d, pos, t, finish))
        free[d], ptr[d] = finish, pos + 1
        push(heap, (finish, k, d, pos))

    for d in range(n_dev):
        try_start(d)
    while heap:
        t, k, d, pos = pop(heap)
        done[k], end[k] = True, t
        route = routes[k % n_sk]
        if route is None:
            arrive[k] = t
        else:  # bandwidth serialises messages on one wire; latency overlaps the next message
            dst, nbytes, on_wire, latency = route
            begin = max(t, wire_free.get((d, dst), 0.0))
            wire_free[(d, dst)] = begin + on_wire
            arrive[k] = begin + on_wire + latency
            sent.append((d, pos, dst, begin, arrive[k], nbytes))
            if blocking:  # the sender is held until the last byte is in (its next action has not started)
                free[d] = arrive[k]
        if k in waiters:
            for waiting in waiters.pop(k):
                try_start(waiting)
        try_start(d)
    return started, sent, all(ptr[d] == len(keys[d]) for d in range(n_dev))


def _timeline(
    schedule: Schedule, spans: list[Span], transfers: list[Transfer], nbytes: list, stash_bytes, source: str
) -> Timeline:
    """The simulation's records as a Timeline, with what the schedule and the sizes were."""
    n_st = schedule.n_stages
    if stash_bytes is None:  # the tensor each stage receives (stage 0 is charged the size it sends)
        stash = [int(nbytes[max(s - 1, 0)]) if n_st > 1 else 0 for s in range(n_st)]
    else:
        stash = [int(x) for x in stash_bytes]
        require(
            len(stash) == n_st,
            f"stash_bytes has {len(stash)} entries but the schedule has {n_st} stages; give one per stage",
        )
    return Timeline(
        source=source, n_devices=schedule.n_devices, spans=spans, transfers=transfers,
        schedule_name=schedule.name, n_stages=n_st, n_microbatches=schedule.n_microbatches,
        boundary_bytes=[int(x) for x in nbytes], stash_bytes=stash, stash_is_lower_bound=stash_bytes is None,
    )  # fmt: skip
