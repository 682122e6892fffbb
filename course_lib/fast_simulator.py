"""The simulator's fast path: the same Timeline as ``shelf/simulator.py``'s loop, on integer tables.

The planner, the automatic scheduler and the benchmarks simulate thousands of schedules or 100k actions
at a time; they import this module, which registers itself with the shelf's simulator, and ask for it
with ``simulate(..., fast=True)`` (past lesson sizes it is then chosen by size too). The lessons never
need it: at their sizes the shelf's loop is as quick as anyone could notice.

What it does the same way: the shelf's one pass over the actions in an order their dependencies allow
(its docstring says why that gives the event loop's numbers). What it does differently, for speed:

- actions are integer keys, (micro-batch * n_stages + stage) * 4 + kind code, so that key % (4 *
  n_stages) = stage * 4 + kind indexes the tables that depend only on stage and kind (hashing 100k
  Action objects would dominate the run);
- the dependency rule (``schedule.inputs_of``) is re-encoded as key offsets per (stage, kind)
  (``_offsets``), and the message rule (``schedule.message_of``) as a route per (stage, kind)
  (``_routes``); ``tests/test_simulator_fast.py`` holds both, and the whole Timeline, equal to the
  shelf's on every registered schedule, with links that queue, for every value of ``SENDS``;
- instead of the validator's order, each device runs as far as its inputs allow, parks on the first
  input that is missing, and wakes when that input is placed; the validator runs only when something
  is wrong (an action out of place, twice, missing, or a deadlock), so the refusal is its own;
- Span and Transfer are made by ``tuple.__new__`` and ``map`` (in C), with the garbage collector paused.
"""

from __future__ import annotations

import contextlib
import gc
import math
from collections.abc import Iterator
from itertools import repeat
from typing import NoReturn

from course_lib.shelf.costs import Link, StageCosts
from course_lib.shelf.schedule import Action, Kind, Schedule, message_of
from course_lib.shelf.simulator import Played, play, register_fast_path
from course_lib.shelf.timeline import Span, Transfer
from course_lib.shelf.validate import ScheduleError, check

Route = tuple[int, int, float, float]  # (destination device, bytes, seconds on the wire, latency)
_KINDS = (Kind.F, Kind.B, Kind.I, Kind.W)  # kind codes 0..3
_KIND_CODE = {kind: code for code, kind in enumerate(_KINDS)}


def fast_play(
    schedule: Schedule, costs: StageCosts, nbytes: list[int], wires: list[Link], blocking: bool
) -> Played:
    """``simulator.play``'s spans and transfers (the shelf calls this with ``fast=True``). A schedule
    the tables below do not cover (forward only, for inference) is played by the shelf's loop, and so
    is one this path would refuse but the validator does not: one validation, the validator's."""
    if getattr(schedule, "forward_only", False):
        return play(schedule, costs, nbytes, wires, blocking)
    try:
        try:  # odd input (a stage out of range, text for a size) is the validator's to explain
            keys, n_keys = _index_actions(schedule)
            durations, routes = _durations(costs, schedule.n_stages), _routes(schedule, nbytes, wires)
        except (AttributeError, LookupError, TypeError, ValueError):
            _reject(schedule)
        with gc_paused():
            args = keys, schedule.orders, durations, routes, schedule.n_stages, schedule.split_backward
            spans, transfers, finished = place_keys(*args, n_keys, blocking)
        if not finished:
            _reject(schedule)  # a deadlock: the validator explains it best (and the same way everywhere)
    except _ValidatorDisagrees:
        return play(schedule, costs, nbytes, wires, blocking)
    return spans, transfers


def _index_actions(schedule: Schedule) -> tuple[list[list[int]], int]:
    """Each device's action keys in order, and how many keys there are. An action out of place
    (unknown stage or micro-batch, the wrong kind, on a device that does not hold its stage, seen
    twice) or one missing hands the schedule to the validator, which says what is wrong."""
    n_st, n_mb, where = schedule.n_stages, schedule.n_microbatches, schedule.stage_to_device
    kinds = (Kind.F, Kind.I, Kind.W) if schedule.split_backward else (Kind.F, Kind.B)
    if len(where) != n_st:
        _reject(schedule)
    seen = [False] * (n_mb * n_st * 4)
    keys: list[list[int]] = []
    for d, order in enumerate(schedule.orders):
        dk = []
        for a in order:
            s, m = a.stage, a.microbatch
            k = (m * n_st + s) * 4 + _KIND_CODE[a.kind]
            if not (0 <= s < n_st and 0 <= m < n_mb and where[s] == d and not seen[k] and a.kind in kinds):
                _reject(schedule)
            seen[k] = True
            dk.append(k)
        keys.append(dk)
    if sum(map(len, keys)) != n_st * n_mb * len(kinds):  # each in place, none twice: so one is missing
        _reject(schedule)
    return keys, len(seen)


class _ValidatorDisagrees(Exception):
    """This path's quick checks refused a schedule that the validator finds valid."""


def _reject(schedule: Schedule) -> NoReturn:
    """Raise the validator's explanation of why `schedule` cannot run (the shelf's loop raises the same);
    should the validator find nothing wrong, the loop plays it (``_ValidatorDisagrees``)."""
    if problems := check(schedule):
        raise ScheduleError(getattr(schedule, "name", "?"), problems)
    raise _ValidatorDisagrees


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


def place_keys(
    keys: list[list[int]], orders: list[list[Action]], durations: list[float], routes: list[Route | None],
    n_stages: int, split_backward: bool, n_keys: int, blocking: bool = False,
) -> tuple[list[Span], list[Transfer], bool]:  # fmt: skip
    """Place every action (`blocking`: sends="blocking"); returns the spans, the transfers, and whether
    every device got to the end of its order (False: a deadlock). Inputs: see ``_offsets``, ``_routes``."""
    own_of, other_of = _offsets(n_stages, split_backward)
    n_sk, n_dev = len(durations), len(keys)
    arrive = [-1.0] * n_keys  # when each action's output is usable by its consumer (< 0: not placed)
    ptr, free, began, ended, wire_free = _per_device(keys)
    parked: dict[int, list[int]] = {}  # key -> devices waiting for it
    transfers: list[Transfer] = []
    new, add_transfer = tuple.__new__, transfers.append
    runnable = list(range(n_dev - 1, -1, -1))
    while runnable:
        d = runnable.pop()
        order, actions, wires, t0s, t1s = keys[d], orders[d], wire_free[d], began[d], ended[d]
        pos, t_free, n, missing = ptr[d], free[d], len(order), -1
        while pos < n:
            k = order[pos]
            sk = k % n_sk  # stage * 4 + kind
            o = own_of[sk]
            if o and arrive[k + o] < 0:
                missing = k + o
                break
            t = t_free
            o = other_of[sk]
            if o:
                a = arrive[k + o]
                if a < 0:
                    missing = k + o
                    break
                if a > t:
                    t = a
            t0s[pos] = t
            t1s[pos] = finish = t + durations[sk]
            route = routes[sk]
            if route is None:
                arrive[k] = finish
            else:  # bandwidth serialises this wire's messages; latency overlaps the next one
                dst, nbytes, on_wire, latency = route
                idle = wires.get(dst, 0.0)
                begin = finish if finish > idle else idle
                wires[dst] = idle = begin + on_wire  # (the same sums as the shelf's loop)
                arrive[k] = got = idle + latency
                add_transfer(new(Transfer, (d, dst, actions[pos], begin, got, nbytes)))
                if blocking:  # held until the last byte is in
                    finish = got
            if k in parked:
                runnable += parked.pop(k)
            pos += 1
            t_free = finish
        ptr[d], free[d] = pos, t_free
        if pos < n:
            parked.setdefault(missing, []).append(d)
    spans: list[Span] = []  # made here, from the times written above, by map and zip (in C)
    for d in range(n_dev):  # (zip: repeat(d) never ends)
        spans += map(new, repeat(Span), zip(repeat(d), orders[d], began[d][: ptr[d]], ended[d], strict=False))
    return spans, transfers, all(ptr[d] == len(keys[d]) for d in range(n_dev))


def _per_device(keys: list[list[int]]) -> tuple[list, list, list, list, list[dict[int, float]]]:
    """Per device: its next position, when it is next free, each position's start and end (the loop
    writes them), and [dst] -> when its wire to dst is next idle (a dict per sender: a p x p table
    outgrows memory)."""
    n_dev = len(keys)
    times = [[0.0] * len(dk) for dk in keys], [[0.0] * len(dk) for dk in keys]
    return [0] * n_dev, [0.0] * n_dev, *times, [{} for _ in range(n_dev)]


def _offsets(n_stages: int, split_backward: bool) -> tuple[list[int], list[int]]:
    """Per (stage, kind), at stage * 4 + kind: key offset of the input from the same stage, and of the
    input from a neighbouring stage (0: none): ``schedule.inputs_of``'s (own, producer) as key offsets.
    The first ran earlier on the same device, so it only has to be done; the second counts when it
    arrives."""
    back = 2 if split_backward else 1  # the kind code whose gradient the previous stage waits for
    own, other = [], []
    for s in range(n_stages):
        own += [0, -1, -2, -1]  # F: none; B, I: own forward; W: own I
        nxt = [0, 0] if s == n_stages - 1 else [4 + back - 1, 4 + back - 2]  # the next stage's gradient
        other += [-4 if s > 0 else 0, *nxt, 0]  # F: previous stage's forward; W: nothing
    return own, other


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a run builds 100k small records that hold no cycles:
    its repeated scans would otherwise cost a third of the run. Re-enabling it would start a scan of
    every object made meanwhile at the next allocation (another seventh of a large run), so first they
    are handed to the oldest generation without a scan (freeze, then unfreeze: two list splices); the
    next full collection sees them as it sees every long-lived object. Not done when the program has
    frozen objects of its own (unfreeze would thaw those). Restores the collector's previous state."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if gc.get_freeze_count() == 0:
            gc.freeze()
            gc.unfreeze()
        if was_enabled:
            gc.enable()


register_fast_path(fast_play)  # importing this module is what lets simulate(fast=True) run it
