"""Exhaustive search for the best zero-bubble order on tiny pipelines: how far is the heuristic from optimal?

Every device runs its forwards, input gradients and weight gradients each in micro-batch order (as the
heuristic and every handcrafted schedule do), I after its F, W after its I, and never holds more than
`memory_limit` micro-batches (from an F's start to its W's end). Within those rules this tries every
order on every device, simulates each combination, and keeps the shortest step. The number of orders
per device is the number of standard Young tableaux of a 3 x m rectangle (5 for m = 2, 42 for m = 3,
462 for m = 4), to the power p: only tiny sizes are feasible, which is why ``MAX_COMBINATIONS`` caps it.

Try it::

    from course_lib.autoschedule.exact import best_order
    schedule, step = best_order(2, 3, memory_limit=2)
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

import course_lib.fast_simulator  # noqa: F401  (registers the fast path this module asks for: fast=True)
from course_lib.shelf.costs import StageCosts
from course_lib.shelf.errors import require
from course_lib.shelf.schedule import Action, Kind, Schedule
from course_lib.shelf.validate import ScheduleError

MAX_COMBINATIONS = 20_000


def device_orders(d: int, m: int, limit: int) -> Iterator[list[Action]]:
    """Every order of device d's 3m actions under the rules in the module docstring."""

    def extend(order: list[Action], nf: int, ni: int, nw: int) -> Iterator[list[Action]]:
        if nw == m:
            yield list(order)
            return
        moves = []
        if nf < m and nf - nw < limit:
            moves.append((Kind.F, nf, (nf + 1, ni, nw)))
        if ni < nf:
            moves.append((Kind.I, ni, (nf, ni + 1, nw)))
        if nw < ni:
            moves.append((Kind.W, nw, (nf, ni, nw + 1)))
        for kind, k, counts in moves:
            order.append(Action(d, kind, k))
            yield from extend(order, *counts)
            order.pop()

    yield from extend([], 0, 0, 0)


def best_order(
    n_devices: int, n_microbatches: int, memory_limit: int, costs: StageCosts | None = None,
    comm: float | Sequence[float] = 0.0,
) -> tuple[Schedule, float]:  # fmt: skip
    """The order with the shortest simulated step (the first found of equals) and that step."""
    from course_lib.shelf.costs import Link  # noqa: PLC0415
    from course_lib.shelf.simulator import simulate  # noqa: PLC0415

    p, m = n_devices, n_microbatches
    per_device = [list(device_orders(d, m, memory_limit)) for d in range(p)]
    total = 1
    for orders in per_device:
        total *= len(orders)
    require(
        0 < total <= MAX_COMBINATIONS,
        f"an exhaustive search at p={p}, m={m}, memory_limit={memory_limit} would simulate {total:,} "
        f"combinations; the cap is {MAX_COMBINATIONS:,} (try p <= 3 and m <= 3)",
    )
    links = [Link(latency_s=float(c)) for c in ([comm] * (p - 1) if isinstance(comm, (int, float)) else comm)]
    best: tuple[Schedule, float] | None = None
    for combo in itertools.product(*per_device):
        schedule = Schedule("exact", p, m, [list(o) for o in combo], list(range(p)), split_backward=True)
        try:
            step = simulate(schedule, costs, links=links or None, fast=True).makespan
        except ScheduleError:
            continue  # the orders deadlock against each other
        if best is None or step < best[1] - 1e-12:
            best = (schedule, step)
    assert best is not None  # ZB-H1's order is always among them when the limit allows
    return best
