"""The simulator's fast path: the same numbers as ``simulator._play`` (the readable event loop), in one
pass over the actions, with no event queue.

Why no queue is needed. The event loop pops completions in time order for one reason only: messages
on one wire must take the wire in the order they were sent. A wire is one direction between two
devices, so only one device sends on it, and a device runs one action at a time, in its order. Its
messages therefore reach the wire in its order, whatever the other devices do: the wire's queue is
known as soon as each action is placed. Every other time is a maximum of times already known, so
the actions can be placed in any order that respects their dependencies. This pass runs each device
as far as its inputs allow, parks it on the first input that is missing, and wakes it when that
input is placed. With blocking sends the same holds: a sender's next action waits for a time already
known when the send is placed. ``tests/test_simulator_fast.py`` checks it equals the event loop on
every registered schedule, with links that queue, for every value of ``simulator.SENDS``.

It works on the integer keys and tables ``simulator`` builds (see there) and makes the Timeline's
records as tuples (Span and Transfer are named tuples): a message's in the loop, an action's after it,
from the times the loop wrote, by ``map`` and ``zip`` (in C): 100k of them cost little that way.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from itertools import repeat

from course_lib.shelf.schedule import Action
from course_lib.shelf.timeline import Span, Transfer

Route = tuple[int, int, float, float]  # (destination device, bytes, seconds on the wire, latency)


def play(
    keys: list[list[int]], orders: list[list[Action]], durations: list[float], routes: list[Route | None],
    n_stages: int, split_backward: bool, n_keys: int, blocking: bool = False,
) -> tuple[list[Span], list[Transfer], bool]:  # fmt: skip
    """Place every action (`blocking`: sends="blocking"); returns the spans, the transfers, and whether
    every device got to the end of its order (False: a deadlock). Inputs: see ``_offsets``."""
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
                wires[dst] = idle = begin + on_wire  # (the same sums as _play's, one float fewer)
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
    input from a neighbouring stage (0: none). ``simulator._dependency_keys`` in table form. The first
    ran earlier on the same device, so it only has to be done; the second counts when it arrives."""
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
