"""Schedule builders: naive, GPipe, 1F1B (and, registered from their own modules, interleaved 1F1B and ZB-H1).

Each builder returns a :class:`~course_lib.schedules.ir.Schedule`: for every device, the list of
actions it runs, in order. A builder only decides the *order*; when each action actually starts is
the simulator's (or an engine's) business, because a device waits for its inputs.

Try it::

    from course_lib.schedules.builders import build_schedule, SCHEDULES
    print(build_schedule("1f1b", n_devices=4, n_microbatches=8))
    for name, info in SCHEDULES.items():
        print(name, "-", info.description)

Names are case-insensitive, and PyTorch's class names work too: ``"GPipe"``, ``"Schedule1F1B"``,
``"Interleaved1F1B"``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from course_lib.errors import CourseError, require
from course_lib.schedules.ir import Action, Kind, Schedule


def F(stage: int, mb: int) -> Action:
    return Action(stage, Kind.F, mb)


def B(stage: int, mb: int) -> Action:
    return Action(stage, Kind.B, mb)


def check_sizes(n_devices: int, n_microbatches: int, virtual: int = 1) -> None:
    """Reject sizes no schedule can use, naming the value that was given."""
    for label, value in (("n_devices", n_devices), ("n_microbatches", n_microbatches), ("virtual", virtual)):
        require(
            isinstance(value, int) and not isinstance(value, bool) and value >= 1,
            f"{label} must be a whole number >= 1, got {value!r}",
        )


def naive(n_devices: int, n_microbatches: int) -> Schedule:
    """One micro-batch at a time: F through every stage, B back through every stage, then the next.

    Device d's order is ``dF0 dB0 dF1 dB1 ...``. Because device 0 runs ``0F1`` only after ``0B0``,
    and ``0B0`` needs every later stage's backward, no two devices ever work at the same time.
    """
    check_sizes(n_devices, n_microbatches)
    orders = []
    for d in range(n_devices):
        order = []
        for mb in range(n_microbatches):
            order += [F(d, mb), B(d, mb)]
        orders.append(order)
    return Schedule("naive", n_devices, n_microbatches, orders, list(range(n_devices)))


def gpipe(n_devices: int, n_microbatches: int) -> Schedule:
    """GPipe (Huang et al. 2019): every device runs all m forwards, then all m backwards.

    Backwards go in micro-batch order 0, 1, ..., m-1, as torch.distributed.pipelining's ScheduleGPipe
    does. Device 0 holds the activations of all m micro-batches until its first backward.
    """
    check_sizes(n_devices, n_microbatches)
    orders = []
    for d in range(n_devices):
        forwards = [F(d, mb) for mb in range(n_microbatches)]
        backwards = [B(d, mb) for mb in range(n_microbatches)]
        orders.append(forwards + backwards)
    return Schedule("gpipe", n_devices, n_microbatches, orders, list(range(n_devices)))


def one_f_one_b(n_devices: int, n_microbatches: int) -> Schedule:
    """1F1B, also called PipeDream-Flush (Narayanan et al. 2021): same bubble as GPipe, less memory.

    Device d (of p) works in three phases:

    1. warm-up: ``p - 1 - d`` forwards, enough to fill the pipe below it;
    2. steady state: one forward, then one backward, until every forward has run;
    3. cool-down: the backwards still owed.

    So device d never holds more than ``p - d`` micro-batches' activations (device 0: p), where GPipe
    holds m. With m < p - 1 - d the warm-up is simply all m forwards.
    """
    check_sizes(n_devices, n_microbatches)
    p, m = n_devices, n_microbatches
    orders = []
    for d in range(p):
        order: list[Action] = []
        next_f = 0  # next micro-batch to run forward
        next_b = 0  # next micro-batch to run backward
        warmup = min(p - 1 - d, m)
        steady = m - warmup

        for _ in range(warmup):  # 1. warm-up: forwards only
            order.append(F(d, next_f))
            next_f += 1
        for _ in range(steady):  # 2. steady state: one forward, one backward
            order.append(F(d, next_f))
            next_f += 1
            order.append(B(d, next_b))
            next_b += 1
        for _ in range(warmup):  # 3. cool-down: the backwards still owed
            order.append(B(d, next_b))
            next_b += 1
        orders.append(order)
    return Schedule("1f1b", p, m, orders, list(range(p)))


@dataclass(frozen=True)
class ScheduleInfo:
    """What the CLI, the dashboard and the notebooks need to list a schedule."""

    name: str
    build: Callable[..., Schedule]  # build(n_devices, n_microbatches[, virtual])
    description: str
    constraints: str
    torch_class: str | None = None  # the matching class in torch.distributed.pipelining, if any
    uses_virtual: bool = False  # True if the builder takes v stages per device


SCHEDULES: dict[str, ScheduleInfo] = {}


def register(info: ScheduleInfo, *aliases: str) -> None:
    """Add a schedule to SCHEDULES; `aliases` are extra names build_schedule accepts."""
    SCHEDULES[info.name] = info
    for alias in (info.name, info.torch_class or "", *aliases):
        if alias:
            _ALIASES[_normalise(alias)] = info.name


_ALIASES: dict[str, str] = {}


def _normalise(name: str) -> str:
    # "Schedule1F1B", "1F1B", "1f1b" and "one-f-one-b" spellings all meet here
    key = re.sub(r"[^a-z0-9]", "", name.lower())
    return key.removeprefix("schedule") or key


def resolve_name(name: str) -> str:
    """The canonical name (a key of SCHEDULES) for `name` or one of its aliases."""
    require(isinstance(name, str), f"schedule name must be a string, got {name!r}")
    canonical = _ALIASES.get(_normalise(name))
    if canonical is None:
        raise CourseError(f"unknown schedule {name!r}; choose one of: {', '.join(SCHEDULES)}")
    return canonical


def build_schedule(name: str, n_devices: int, n_microbatches: int, virtual: int = 1) -> Schedule:
    """Build schedule `name` for p = `n_devices` devices and m = `n_microbatches` micro-batches.

    `virtual` is the number of stages per device (v); only interleaved schedules take v > 1.
    """
    info = SCHEDULES[resolve_name(name)]
    check_sizes(n_devices, n_microbatches, virtual)
    if info.uses_virtual:
        return info.build(n_devices, n_microbatches, virtual)
    require(
        virtual == 1,
        f"schedule {info.name!r} puts one stage on each device, so virtual must be 1, got {virtual}; "
        "use 'interleaved-1f1b' for several stages per device",
    )
    return info.build(n_devices, n_microbatches)


register(
    ScheduleInfo(
        "naive",
        naive,
        "one micro-batch at a time through the whole pipe: only one device works at any moment",
        "any p >= 1, m >= 1",
    ),
    "sequential",
)
register(
    ScheduleInfo(
        "gpipe",
        gpipe,
        "all forwards, then all backwards (GPipe); holds all m micro-batches' activations",
        "any p >= 1, m >= 1",
        torch_class="ScheduleGPipe",
    ),
)
register(
    ScheduleInfo(
        "1f1b",
        one_f_one_b,
        "PipeDream-Flush: warm-up, one forward / one backward, cool-down; same bubble as GPipe, "
        "at most p micro-batches held",
        "any p >= 1, m >= 1",
        torch_class="Schedule1F1B",
    ),
    "pipedream-flush",
    "oneFoneB",
)


def _register_more() -> None:
    # imported here because those modules are separate lessons, and they import nothing from this one
    from course_lib.schedules.interleaved import interleaved_1f1b
    from course_lib.schedules.zero_bubble import zb_h1

    register(
        ScheduleInfo(
            "interleaved-1f1b",
            interleaved_1f1b,
            "1F1B with v stages per device (stage s on device s % p): bubble divided by v, "
            "v times the point-to-point traffic",
            "any p >= 1, v >= 1; m a multiple of max(1, m // p) "
            "(PyTorch's rule; Megatron: m a multiple of p)",
            torch_class="ScheduleInterleaved1F1B",
            uses_virtual=True,
        ),
        "interleaved",
        "virtual-pipeline",
    )
    register(
        ScheduleInfo(
            "zb-h1",
            zb_h1,
            "Zero Bubble H1: backward split into I (input grad) and W (weight grad); W fills 1F1B's "
            "gaps, same peak memory as 1F1B",
            "any p >= 1, m >= 1 (bubble one third of 1F1B's when T_F = T_I = T_W and m >= p)",
        ),
        "zbh1",
        "zero-bubble-h1",
    )
    from course_lib.schedules.latency_aware import latency_aware_1f1b

    register(
        ScheduleInfo(
            "latency-aware-1f1b",
            latency_aware_1f1b,
            "1F1B with a deeper warm-up for slow links: one more micro-batch in flight per link below "
            "a device (latency_aware_1f1b(..., extra_per_link=k) for k = ceil(2L / (t_f + t_b)))",
            "any p >= 1, m >= 1",
        ),
        "wan-1f1b",
    )


_register_more()
