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
records directly, as tuples (a Span is a named tuple): 100k of them cost little that way.
"""

from __future__ import annotations

from course_lib.schedules.ir import Action
from course_lib.timeline import Span, Transfer

Route = tuple[int, int, float, float]  # (destination device, bytes, seconds on the wire, latency)


def play(
    keys: list[list[int]], orders: list[list[Action]], durations: list[float], routes: list[Route | None],
    n_stages: int, split_backward: bool, n_keys: int, blocking: bool = False,
) -> tuple[list[Span], list[Transfer], bool]:  # fmt: skip
    """Place every action (`blocking`: sends="blocking"); returns the spans, the transfers, and whether
    every device got to the end of its order (False: a deadlock). Dependencies: ``_dependency_keys``
    inline: an input from the same stage (own forward, I before W) ran earlier on this device, so it
    only has to be done; an input from a neighbouring stage counts when it arrives."""
    n_sk, n_dev, last = len(durations), len(keys), n_stages - 1
    back = 2 if split_backward else 1  # the kind code whose gradient the previous stage waits for
    arrive = [-1.0] * n_keys  # when each action's output is usable by its consumer (< 0: not placed)
    ptr, free = [0] * n_dev, [0.0] * n_dev
    # [src][dst] -> when that wire is next idle: a dict per sender (a p x p table outgrows memory)
    wire_free: list[dict[int, float]] = [{} for _ in range(n_dev)]
    parked: dict[int, list[int]] = {}  # key -> devices waiting for it
    spans: list[Span] = []
    transfers: list[Transfer] = []
    new, add_span, add_transfer = tuple.__new__, spans.append, transfers.append
    runnable = list(range(n_dev - 1, -1, -1))
    while runnable:
        d = runnable.pop()
        order, actions, wires = keys[d], orders[d], wire_free[d]
        pos, t_free, n, missing = ptr[d], free[d], len(order), -1
        while pos < n:
            k = order[pos]
            kind = k & 3
            if kind == 0:  # F: the previous stage's activation (none on stage 0)
                own, other = -1, (k - 4 if (k >> 2) % n_stages else -1)
            elif kind == 3:  # W: its own I
                own, other = k - 1, -1
            else:  # B or I: its own forward, and the next stage's gradient (none on the last stage)
                own = k - kind
                other = (((k >> 2) + 1) << 2) + back if (k >> 2) % n_stages < last else -1
            if own >= 0 and arrive[own] < 0:
                missing = own
                break
            t = t_free
            if other >= 0:
                if arrive[other] < 0:
                    missing = other
                    break
                if arrive[other] > t:
                    t = arrive[other]
            sk = k % n_sk  # stage * 4 + kind
            finish = t + durations[sk]
            add_span(new(Span, (d, actions[pos], t, finish)))
            route = routes[sk]
            if route is None:
                arrive[k] = finish
            else:  # bandwidth serialises this wire's messages; latency overlaps the next one
                dst, nbytes, on_wire, latency = route
                idle = wires.get(dst, 0.0)
                begin = finish if finish > idle else idle
                wires[dst] = begin + on_wire
                arrive[k] = begin + on_wire + latency
                add_transfer(new(Transfer, (d, dst, actions[pos], begin, arrive[k], nbytes)))
                finish = arrive[k] if blocking else finish  # blocking: held until the last byte is in
            if k in parked:
                runnable += parked.pop(k)
            pos, t_free = pos + 1, finish
        ptr[d], free[d] = pos, t_free
        if pos < n:
            parked.setdefault(missing, []).append(d)
    return spans, transfers, all(ptr[d] == len(keys[d]) for d in range(n_dev))
