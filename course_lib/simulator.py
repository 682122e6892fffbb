"""Discrete-event simulator: turn a Schedule plus a cost model into a Timeline.

Rules, the same ones a real pipeline obeys:

- each device runs its actions strictly in the order the schedule gives it;
- an action starts when its device is free AND everything it depends on has arrived
  (``ir.dependencies``: F needs the previous stage's F, a backward needs its own F and the next
  stage's input gradient, W needs its I);
- a send overlaps compute (the sender moves on at once), a receive waits for the last byte;
- messages on the same wire (one direction between two devices) queue for bandwidth, but latency
  pipelines: a second message may be in flight while the first is still travelling;
- a dependency between stages on the same device costs nothing.

Try it::

    from course_lib.schedules.builders import build_schedule
    from course_lib.simulator import simulate, uniform_costs
    from course_lib.links import Link
    tl = simulate(build_schedule("1f1b", 4, 8), uniform_costs(f=1e-3, b=1e-3, w=1e-3),
                  activation_bytes=64 * 2**20, links=Link(latency_s=1e-4, bandwidth_Bps=50e9))
    print(tl.makespan, tl.bubble_fraction)
"""

from __future__ import annotations

import contextlib
import gc
import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass

from course_lib.errors import CourseError, require
from course_lib.links import FREE, Link
from course_lib.schedules.ir import Action, Kind, Schedule
from course_lib.timeline import SIMULATED, SOURCES, Span, Timeline, Transfer

# Actions are numbered (micro-batch, stage, kind) -> int so the event loop works on plain lists;
# hashing Action objects 100k times would dominate the run time.
_KIND_CODE = {Kind.F: 0, Kind.B: 1, Kind.I: 2, Kind.W: 3}
_F, _B, _I, _W = 0, 1, 2, 3

Number = float | int


@dataclass(frozen=True)
class StageCosts:
    """How long each piece of work takes on each stage (seconds, or any one consistent unit).

    ``f``: forward; ``b``: backward for the input gradient; ``w``: backward for the weight gradient.
    Each is one number for every stage or a list indexed by stage. A full backward ``B`` costs
    ``b + w``, a split one costs ``b`` for ``I`` and ``w`` for ``W``.
    """

    f: Number | Sequence[Number] = 1.0
    b: Number | Sequence[Number] = 1.0
    w: Number | Sequence[Number] = 1.0

    def per_stage(self, n_stages: int) -> tuple[list[float], list[float], list[float]]:
        """The three cost lists expanded to `n_stages` entries (checked: finite, >= 0)."""
        out = []
        for label, value in (("f", self.f), ("b", self.b), ("w", self.w)):
            if isinstance(value, (int, float)):
                values = [float(value)] * n_stages
            else:
                values = [float(x) for x in value]
                require(
                    len(values) == n_stages,
                    f"StageCosts.{label} has {len(values)} entries but the schedule has {n_stages} "
                    "stages; give one number per stage, or a single number for all",
                )
            bad = [x for x in values if not (math.isfinite(x) and x >= 0)]
            require(not bad, f"StageCosts.{label} must be finite and >= 0, got {bad[0] if bad else None!r}")
            out.append(values)
        return out[0], out[1], out[2]

    def of(self, action: Action, n_stages: int) -> float:
        """Duration of one action (convenience; the simulator uses per_stage directly)."""
        f, b, w = self.per_stage(n_stages)
        s = action.stage
        return {Kind.F: f[s], Kind.B: b[s] + w[s], Kind.I: b[s], Kind.W: w[s]}[action.kind]


def uniform_costs(f: float = 1.0, b: float = 1.0, w: float = 1.0) -> StageCosts:
    """The same F, B (input grad) and W (weight grad) time on every stage."""
    return StageCosts(f=f, b=b, w=w)


def _per_boundary(value, n_boundaries: int, label: str, default):
    """One value per stage boundary (s -> s+1), from a scalar/Link or a list of them."""
    if value is None:
        return [default] * n_boundaries
    if isinstance(value, (Link, int, float)):
        return [value] * n_boundaries
    values = list(value)
    require(
        len(values) == n_boundaries,
        f"{label} has {len(values)} entries but the schedule has {n_boundaries} stage boundaries "
        "(stage s -> s+1); give one per boundary, or a single value for all",
    )
    return values


def _index_actions(schedule: Schedule):
    """Number every action, check it is placed on the device that holds its stage, reject repeats."""
    n_st, n_mb = schedule.n_stages, schedule.n_microbatches
    require(
        len(schedule.stage_to_device) == n_st,
        f"stage_to_device has {len(schedule.stage_to_device)} entries for {n_st} stages",
    )
    owner = [-1] * (n_mb * n_st * 4)  # key -> device that runs it (-1: nobody)
    where = schedule.stage_to_device
    keys: list[list[int]] = []
    for d, order in enumerate(schedule.orders):
        dk = []
        for pos, a in enumerate(order):
            s, m = a.stage, a.microbatch
            # messages are built only on failure: formatting 100k actions would cost more than the run
            if not (0 <= s < n_st and 0 <= m < n_mb):
                raise CourseError(
                    f"device {d} runs {a} (position {pos}) but the schedule has stages 0..{n_st - 1} "
                    f"and micro-batches 0..{n_mb - 1}"
                )
            if where[s] != d:
                raise CourseError(
                    f"device {d} runs {a} (position {pos}) but stage {s} lives on device {where[s]}"
                )
            k = (m * n_st + s) * 4 + _KIND_CODE[a.kind]
            if owner[k] != -1:
                raise CourseError(f"action {a} appears twice (devices {owner[k]} and {d}); each runs once")
            owner[k] = d
            dk.append(k)
        keys.append(dk)
    return keys, owner


@contextlib.contextmanager
def _gc_paused():
    """Pause the cyclic garbage collector while we build 100k small objects that hold no cycles:
    its repeated scans would otherwise cost about a third of the run. Restores the previous state."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


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


def _describe(k: int, n_st: int) -> str:
    kind, sm = k & 3, k >> 2
    return f"{sm % n_st}{'FBIW'[kind]}{sm // n_st}"


def simulate(
    schedule: Schedule,
    costs: StageCosts | None = None,
    activation_bytes: int | Sequence[int] = 0,
    links: Link | Sequence[Link] | None = None,
    *,
    stash_bytes: Sequence[int] | None = None,
    source: str = SIMULATED,
) -> Timeline:
    """Run `schedule` under the cost model and return what happened, as a Timeline.

    `activation_bytes`: bytes one micro-batch sends across each stage boundary (s -> s+1), one
    number or one per boundary; gradients going back have the same size. `links`: one Link for
    every boundary or one per boundary (default: free). `stash_bytes`: bytes of activations one
    micro-batch keeps alive on each stage until its backward; if not given, the boundary tensor
    the stage receives (a lower bound: a real stage stashes every layer's activations).
    `source`: SIMULATED, or MEASURED_COMPUTE when `costs` were measured.
    """
    require(source in SOURCES, f"unknown timeline source {source!r}; expected one of {SOURCES}")
    costs = costs if costs is not None else StageCosts()
    n_st, n_dev = schedule.n_stages, schedule.n_devices
    f_cost, b_cost, w_cost = costs.per_stage(n_st)
    bound_bytes = _per_boundary(activation_bytes, n_st - 1, "activation_bytes", 0)
    bound_links = _per_boundary(links, n_st - 1, "links", FREE)
    require(all(x >= 0 for x in bound_bytes), f"activation_bytes must be >= 0, got {bound_bytes}")
    where = schedule.stage_to_device

    keys, owner = _index_actions(schedule)
    split = schedule.split_backward
    deps = [[_dependency_keys(k, n_st, split) for k in dk] for dk in keys]
    # Everything that depends only on (stage, kind) lives in tables indexed by k % (4 * n_st),
    # which is stage * 4 + kind for key k.
    n_sk = 4 * n_st
    dur = [0.0] * n_sk  # how long the action takes
    route: list[tuple[int, int, float, float] | None] = [None] * n_sk  # (dst, bytes, on-wire s, latency)
    for st in range(n_st):
        dur[st * 4 : st * 4 + 4] = [f_cost[st], b_cost[st] + w_cost[st], b_cost[st], w_cost[st]]
        # where the output goes: F's activation to stage s+1, the backward's gradient to stage s-1
        for kind, nxt, boundary in ((_F, st + 1, st), (_B, st - 1, st - 1), (_I, st - 1, st - 1)):
            if 0 <= nxt < n_st and where[nxt] != where[st]:
                link, nbytes = bound_links[boundary], bound_bytes[boundary]
                on_wire = nbytes / link.bandwidth_Bps if nbytes and math.isfinite(link.bandwidth_Bps) else 0.0
                route[st * 4 + kind] = (where[nxt], int(nbytes), on_wire, link.latency_s)

    n_keys = len(owner)
    end = [0.0] * n_keys  # when the action finished, on its own device
    arrive = [0.0] * n_keys  # when its output reached the neighbouring device
    done = [False] * n_keys
    waiters: dict[int, list[int]] = {}  # key -> devices blocked until it is done
    ptr = [0] * n_dev  # next position in each device's order
    free = [0.0] * n_dev  # when each device finishes its current action
    wire_free: dict[tuple[int, int], float] = {}  # (src, dst) -> when the wire is next idle
    started: list[tuple[int, int, float, float]] = []  # (device, position, start, end)
    sent: list[tuple[int, int, int, float, float, int]] = []  # (src, position, dst, begin, arrive, bytes)
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
        finish = t + dur[k % n_sk]
        started.append((d, pos, t, finish))
        free[d] = finish
        ptr[d] = pos + 1
        push(heap, (finish, k, d, pos))

    with _gc_paused():
        for d in range(n_dev):
            try_start(d)
        while heap:
            t, k, d, pos = pop(heap)
            done[k] = True
            end[k] = t
            r = route[k % n_sk]
            if r is None:
                arrive[k] = t
            else:
                dst, nbytes, on_wire, latency = r
                wire = (d, dst)
                begin = max(t, wire_free.get(wire, 0.0))  # wait for the wire: bandwidth serialises
                wire_free[wire] = begin + on_wire
                arrive[k] = begin + on_wire + latency  # latency overlaps the next message
                sent.append((d, pos, dst, begin, arrive[k], nbytes))
            if k in waiters:
                for w in waiters.pop(k):
                    try_start(w)
            try_start(d)

    stuck = [d for d in range(n_dev) if ptr[d] < len(keys[d])]
    if stuck:
        # The validator explains deadlocks best (and the same way everywhere); our own message is
        # the fallback should it see no problem.
        from course_lib.schedules.validate import ScheduleError, check

        problems = check(schedule)
        if problems:
            raise ScheduleError(schedule.name, problems)
        raise CourseError(_deadlock_message(schedule, stuck, ptr, keys, deps, done, owner, n_st))

    orders = schedule.orders
    with _gc_paused():
        spans = [Span(d, orders[d][pos], t0, t1) for d, pos, t0, t1 in started]
        transfers = [Transfer(d, dst, orders[d][pos], t0, t1, nb) for d, pos, dst, t0, t1, nb in sent]
    if stash_bytes is None:
        # the tensor each stage receives (stage 0 is charged the size it sends)
        stash = [int(bound_bytes[max(s - 1, 0)]) if n_st > 1 else 0 for s in range(n_st)]
    else:
        stash = [int(x) for x in _per_boundary(stash_bytes, n_st, "stash_bytes", 0)]
    return Timeline(
        source=source,
        n_devices=n_dev,
        spans=spans,
        transfers=transfers,
        schedule_name=schedule.name,
        activation_bytes=stash,
        notes={
            "n_stages": n_st,
            "n_microbatches": schedule.n_microbatches,
            "stage_to_device": list(where),
            "boundary_bytes": [int(x) for x in bound_bytes],
            "stash_bytes_given": stash_bytes is not None,
        },
    )


def _deadlock_message(schedule, stuck, ptr, keys, deps, done, owner, n_st) -> str:
    """Say which device is stuck at which action, and what it waits for."""
    lines = ["deadlock: these per-device orders can never finish."]
    for d in stuck[:4]:
        pos = ptr[d]
        action = schedule.orders[d][pos]
        missing = [dep for dep in deps[d][pos] if not done[dep]]
        parts = []
        for dep in missing:
            name = _describe(dep, n_st)
            if owner[dep] < 0:
                parts.append(f"{name}, which no device runs")
            else:
                od = owner[dep]
                blocker = schedule.orders[od][ptr[od]] if ptr[od] < len(keys[od]) else None
                where = f"device {od}, position {keys[od].index(dep)} in its order"
                if od == d:
                    parts.append(f"{name}, which comes later in device {d}'s own order ({where})")
                else:
                    parts.append(f"{name} ({where}), but device {od} is itself stuck at {blocker}")
        lines.append(
            f"device {d} cannot run {action} (position {pos} in its order): it waits for " + "; ".join(parts)
        )
    if len(stuck) > 4:
        lines.append(f"... and {len(stuck) - 4} more stuck devices")
    lines.append("Reorder the actions so every action comes after what it needs (see ir.dependencies).")
    return "\n".join(lines)
