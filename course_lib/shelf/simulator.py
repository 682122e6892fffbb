"""The simulator: turn a Schedule plus costs and links into a Timeline (lessons 02-04, 06).

Rules, the same ones a real pipeline obeys:

- each device runs its actions strictly in the order the schedule gives it;
- an action starts when its device is free AND everything it reads (``schedule.inputs_of``, the one
  rule) is in: its own stage's earlier work when that finished, its producer's output when it arrived
  (at once, when the producer is on the same device);
- an output crosses to another device exactly when ``schedule.message_of`` says it does (the rule the
  engines use too); a dependency between stages on the same device costs nothing;
- a receive waits for the last byte; a send, by the option ``sends`` (``SENDS``): "overlapped" (the
  default: the sender moves on at once, like torch's isend or a NIC's DMA) or "blocking" (the sender's
  device is busy until the message's last byte has arrived, like a blocking send/recv pair; the wait
  shows as idle, not as a span);
- messages on the same wire (one direction between two devices) queue for bandwidth, but latency
  pipelines: a second message may be in flight while the first is still travelling.

Why one pass over the actions is enough, with no clock and no event queue: messages on one wire must
take the wire in the order they were sent, and only one device sends on a wire, one action at a time,
in its order. So a wire's queue is known as soon as each action is placed, and every other time is a
maximum of times already known. Any order that respects the dependencies gives the same Timeline; the
loop takes the validator's (``validate.execution_order``), which also refuses a schedule that cannot
run, with the validator's explanation.

Lesson sizes (p <= 16, m <= 64) always run this loop. ``course_lib/fast_simulator.py`` (the planner's,
the automatic scheduler's and the benchmarks') computes the same numbers on integer tables; it registers
itself here when imported, and is used when asked for (``fast=True``) or, once imported, past lesson sizes.

Try it (``simulate_named("1f1b", 4, 8)`` builds and simulates a registered schedule in one call)::

    from course_lib.shelf.first_schedules import build_schedule
    from course_lib.shelf.simulator import StageCosts, simulate
    from course_lib.shelf.costs import Link
    tl = simulate(build_schedule("1f1b", 4, 8), StageCosts(f=1e-3, i=1e-3, w=1e-3),
                  boundary_bytes=64 * 2**20, links=Link(latency_s=1e-4, bandwidth_Bps=50e9))
    print(tl.makespan, tl.bubble_fraction)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from course_lib.shelf.costs import (
    FREE,
    SENDS,
    Link,
    StageCosts,
    check_costs,
    check_inputs,
    check_sends,
    per_boundary,
)
from course_lib.shelf.errors import CourseError, require
from course_lib.shelf.first_schedules import build_schedule
from course_lib.shelf.schedule import Action, Key, Kind, Schedule, inputs_of, key_of, message_of
from course_lib.shelf.timeline import SIMULATED, Span, Timeline, Transfer
from course_lib.shelf.validate import execution_order, validate

__all__ = ["SENDS", "LESSON_SIZES", "StageCosts", "register_fast_path", "simulate", "simulate_named"]

LESSON_SIZES = (16, 64)  # the largest p and m the lessons use: up to here, always the loop below

Played = tuple[list[Span], list[Transfer]]
# the fast path: (schedule, costs per stage, bytes per boundary, link per boundary, blocking) -> Played
FastPath = Callable[[Schedule, StageCosts, list[int], list[Link], bool], Played]
_FAST_PATHS: list[FastPath] = []  # course_lib.fast_simulator adds its own when imported


def register_fast_path(play: FastPath) -> None:
    """Let ``simulate`` run `play` instead of its loop (course_lib.fast_simulator calls this)."""
    _FAST_PATHS[:] = [play]


def simulate(
    schedule: Schedule, costs: StageCosts | None = None, boundary_bytes: int | Sequence[int] = 0,
    links: Link | Sequence[Link] | None = None, *, stash_bytes: Sequence[int] | None = None,
    source: str = SIMULATED, sends: str = "overlapped", fast: bool | None = None,
) -> Timeline:  # fmt: skip
    """Run `schedule` under the cost model and return what happened, as a Timeline.

    `costs`: StageCosts (default: 1 for each of F, I and W). `boundary_bytes`: bytes one
    micro-batch sends across each stage boundary (s -> s+1), one number or one per boundary;
    gradients going back have the same size. `links`: one Link for every boundary or one per
    boundary (default: free). `stash_bytes`: bytes of activations one micro-batch keeps alive on
    each stage until its backward; if not given, the boundary tensor the stage receives (a lower
    bound: a real stage stashes every layer's activations). `source`: SIMULATED, or
    MEASURED_COMPUTE when `costs` were measured. `sends`: one of SENDS, what a sender does while its
    message travels (see the module's docstring). `fast`: True runs course_lib.fast_simulator's
    path (import it first), False this module's loop; None (the default) the loop at lesson sizes,
    the fast path past them if it is imported. A schedule that cannot run raises the validator's
    ScheduleError, whichever runs."""
    check_sends(sends)
    check_inputs(schedule, costs, boundary_bytes, links, stash_bytes)
    n_st = schedule.n_stages
    if type(n_st) is not int or n_st < 1:  # "4", 0: nothing below can count its boundaries
        validate(schedule)  # the validator's message, as for any schedule that cannot run
    nbytes = per_boundary(boundary_bytes, n_st - 1, "boundary_bytes", 0)
    require(all(x >= 0 for x in nbytes), f"boundary_bytes must be >= 0, got {nbytes}")
    wires = per_boundary(links, n_st - 1, "links", FREE)
    costs = costs if costs is not None else StageCosts()
    if _fast(schedule, fast):
        spans, transfers = _FAST_PATHS[0](schedule, costs, nbytes, wires, sends == "blocking")
    else:
        spans, transfers = play(schedule, costs, nbytes, wires, sends == "blocking")
    return _timeline(schedule, spans, transfers, nbytes, stash_bytes, source)


def _fast(schedule: Schedule, fast: bool | None) -> bool:
    """Whether to take the fast path: asked for, or (None) past lesson sizes once it is imported."""
    if fast is None:
        big = schedule.n_devices > LESSON_SIZES[0] or schedule.n_microbatches > LESSON_SIZES[1]
        return big and bool(_FAST_PATHS)
    if fast and not _FAST_PATHS:
        raise CourseError("simulate(fast=True) needs the fast path: import course_lib.fast_simulator first")
    return bool(fast)


def play(
    schedule: Schedule, costs: StageCosts, nbytes: list[int], wires: list[Link], blocking: bool
) -> Played:
    """The simulator's loop: place every action, in an order its dependencies allow, at the time its
    device is free and its inputs are in; send its output if it crosses to another device. `nbytes`
    and `wires`: one per stage boundary. `blocking`: a sender waits for its message's last byte."""
    order = execution_order(schedule)  # validates first: a schedule that cannot run stops here
    n_st, split = schedule.n_stages, schedule.split_backward
    f, i, w = costs.per_stage(n_st)
    seconds = {"F": f, "B": [a + b for a, b in zip(i, w, strict=True)], "I": i, "W": w}
    # which outputs cross devices depends only on stage and kind: ask the rule once for each
    crossing = {(s, k.value): message_of(Action(s, k, 0), schedule) for s in range(n_st) for k in Kind}
    free = [0.0] * schedule.n_devices  # when each device is next free
    ended: dict[Key, float] = {}  # when each action finished, on its own device
    arrived: dict[Key, float] = {}  # when its output reached the device that reads it
    wire_free: dict[tuple[int, int], float] = {}  # (src, dst) -> when that wire is next idle
    spans: list[Span] = []
    transfers: list[Transfer] = []
    for action in order:
        device, (stage, kind, mb) = schedule.device_of(action.stage), key_of(action)
        own, producer = inputs_of(stage, kind, mb, n_st, split)  # the one rule (schedule.py)
        start = max(free[device], ended[own] if own else 0.0, arrived[producer] if producer else 0.0)
        end = start + seconds[kind][stage]
        spans.append(Span(device, action, start, end))
        free[device] = ended[stage, kind, mb] = arrived[stage, kind, mb] = end
        msg = crossing[stage, kind]
        if msg is not None:  # bandwidth serialises the messages on one wire; latency overlaps the next
            link, size = wires[msg.boundary], nbytes[msg.boundary]
            on_wire = size / link.bandwidth_Bps if size and math.isfinite(link.bandwidth_Bps) else 0.0
            begin = max(end, wire_free.get((device, msg.dst), 0.0))
            wire_free[(device, msg.dst)] = begin + on_wire
            arrived[stage, kind, mb] = begin + on_wire + link.latency_s
            transfers.append(Transfer(device, msg.dst, action, begin, arrived[stage, kind, mb], int(size)))
            if blocking:  # the sender is held until the last byte is in
                free[device] = arrived[stage, kind, mb]
    return spans, transfers


def simulate_named(
    name: str, p: int, m: int, virtual: int | None = None, costs: StageCosts | None = None,
    boundary_bytes: int | Sequence[int] = 0, links: Link | Sequence[Link] | None = None,
    sends: str = "overlapped", fast: bool | None = None,
) -> Timeline:  # fmt: skip
    """Build the registered schedule `name` for p devices, m micro-batches and `virtual` stages per
    device (None: the registry's default), and simulate it: the one way every caller (CLI, dashboard,
    comparisons, plots, planner) simulates a schedule by name. `costs` are a device's share of the
    model (default: 1 each for F, I, W), so each of its v stages costs 1/v and every v does the same work.
    `sends`, `fast`: as ``simulate``'s."""
    check_sends(sends)
    schedule = build_schedule(name, p, m, virtual)
    check_costs(costs, None)  # before per_virtual_stage; simulate checks the rest once
    share = (costs if costs is not None else StageCosts()).per_virtual_stage(schedule.stages_per_device)
    return simulate(schedule, share, boundary_bytes, links, sends=sends, fast=fast)


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
