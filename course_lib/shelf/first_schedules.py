"""The first schedules (naive, GPipe, 1F1B), the sizes any schedule accepts, and the registry (lessons 02-04).

Each builder returns a :class:`~course_lib.shelf.schedule.Schedule`: for every device, the list of
actions it runs, in order. A builder only decides the *order*; when each action actually starts is
the simulator's (or an engine's) business, because a device waits for its inputs.

The registry maps names to builders and what derives from each schedule (its paper, its PyTorch class,
its closed forms). The shelf registers these three; the other schedules live in the rooms of
``course_lib/schedules/`` and register themselves when ``course_lib.schedules`` is imported (the CLI,
the lessons and the notebooks do), as do the closed forms of these three.

Try it::

    from course_lib.shelf.first_schedules import build_schedule, one_f_one_b, SCHEDULES
    print(one_f_one_b(4, 8))
    print(build_schedule("1f1b", n_devices=4, n_microbatches=8))

Names are case-insensitive, and PyTorch's class names work too: ``"GPipe"``, ``"Schedule1F1B"``.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from course_lib.shelf.errors import LIMITS, CourseError, require, shown, whole, within_limit
from course_lib.shelf.schedule import Action, Kind, Schedule


def F(stage: int, mb: int) -> Action:
    return Action(stage, Kind.F, mb)


def B(stage: int, mb: int) -> Action:
    return Action(stage, Kind.B, mb)


def check_sizes(n_devices: int, n_microbatches: int, virtual: int = 1) -> tuple[int, int, int]:
    """Reject sizes no schedule can use or finish, naming the value that was given (build_schedule checks
    them for every builder; the three a lesson calls directly check them too). Returns them as Python
    ints (a numpy int is accepted as the same number)."""
    p, m = whole("n_devices", n_devices), whole("n_microbatches", n_microbatches)
    v = whole("virtual", virtual)
    for label, value in (("n_devices", p), ("n_microbatches", m), ("virtual", v)):
        # 10**5000 cannot even be printed in full: say so before 3*p*m*v is
        require(value < 2**64, f"{label} is {shown(value)}, alone over the limit of {LIMITS['actions']:,} "
                "actions (course_lib.shelf.errors.LIMITS)")  # fmt: skip
    within_limit("actions", 3 * p * m * v, f"3*p*m*v = 3*{p}*{m}*{v}")
    return p, m, v


def naive(n_devices: int, n_microbatches: int) -> Schedule:
    """One micro-batch at a time: F through every stage, B back through every stage, then the next.

    Device d's order is ``dF0 dB0 dF1 dB1 ...``. Because device 0 runs ``0F1`` only after ``0B0``,
    and ``0B0`` needs every later stage's backward, no two devices ever work at the same time.
    """
    n_devices, n_microbatches, _ = check_sizes(n_devices, n_microbatches)
    orders = [[a for mb in range(n_microbatches) for a in (F(d, mb), B(d, mb))] for d in range(n_devices)]
    return Schedule("naive", n_devices, n_microbatches, orders, list(range(n_devices)))


def gpipe(n_devices: int, n_microbatches: int) -> Schedule:
    """GPipe (Huang et al. 2019): every device runs all m forwards, then all m backwards.

    Backwards go in micro-batch order 0, 1, ..., m-1, as torch.distributed.pipelining's ScheduleGPipe
    does. Device 0 holds the activations of all m micro-batches until its first backward.
    """
    n_devices, n_microbatches, _ = check_sizes(n_devices, n_microbatches)
    mbs = range(n_microbatches)
    orders = [[F(d, mb) for mb in mbs] + [B(d, mb) for mb in mbs] for d in range(n_devices)]
    return Schedule("gpipe", n_devices, n_microbatches, orders, list(range(n_devices)))


def one_f_one_b(n_devices: int, n_microbatches: int, warmup: Sequence[int] | None = None) -> Schedule:
    """1F1B, also called PipeDream-Flush (Narayanan et al. 2021): GPipe's bubble on equal stages, less memory.

    Device d (of p) works in three phases:

    1. warm-up: ``p - 1 - d`` forwards, enough to fill the pipe below it (or ``warmup[d]``: the
       latency-aware variant passes a deeper one, to keep slow links busy);
    2. steady state: one forward, then one backward, until every forward has run;
    3. cool-down: the backwards still owed.

    So device d never holds more than ``p - d`` micro-batches' activations (device 0: p), where GPipe
    holds m. With m < p - 1 - d the warm-up is simply all m forwards.
    """
    n_devices, n_microbatches, _ = check_sizes(n_devices, n_microbatches)
    p, m = n_devices, n_microbatches
    warmup = [p - 1 - d for d in range(p)] if warmup is None else list(warmup)
    require(
        len(warmup) == p and all(isinstance(w, int) and w >= 0 for w in warmup),
        f"warmup must give {p} whole numbers >= 0 (forwards before the first backward, per device), "
        f"got {warmup!r}",
    )
    orders = []
    for d in range(p):
        warm = min(warmup[d], m)
        order = [F(d, mb) for mb in range(warm)]  # 1. warm-up: forwards only
        for k in range(m - warm):  # 2. steady state: one forward, one backward
            order += [F(d, warm + k), B(d, k)]
        order += [B(d, mb) for mb in range(m - warm, m)]  # 3. cool-down: the backwards still owed
        orders.append(order)
    return Schedule("1f1b", p, m, orders, list(range(p)))


# ---- the registry --------------------------------------------------------------------------------
@dataclass(frozen=True)
class ScheduleInfo:
    """What the CLI, the dashboard, the plots and the notebooks need to know about a schedule."""

    name: str
    build: Callable[..., Schedule]  # build(n_devices, n_microbatches[, virtual])
    description: str
    constraints: str
    # closed forms (course_lib.schedules.closed_forms.ClosedForm, which fills them in for the first three):
    bubble: object  # idle share of the step, with the range where the formula holds
    peak: object  # micro-batches in flight on the busiest device
    paper: str
    torch_class: str | None = None  # the matching class in torch.distributed.pipelining, if any
    uses_virtual: bool = False  # True if the builder takes v stages per device
    fixed_virtual: int | None = None  # the only v it takes, if it takes one only (V shape: 2)
    # whether torch_class is also a name of this entry; False where another entry owns that name
    torch_alias: bool = True

    @property
    def default_virtual(self) -> int:
        """v when none is given: the fixed one, 2 for interleaving, else 1."""
        return self.fixed_virtual or (2 if self.uses_virtual else 1)


SCHEDULES: dict[str, ScheduleInfo] = {}


def register(info: ScheduleInfo, *aliases: str) -> None:
    """Add a schedule to SCHEDULES; `aliases` are extra names build_schedule accepts."""
    names = (info.name, info.torch_class if info.torch_alias else None, *aliases)
    for alias in filter(None, names):
        owner = _ALIASES.get(_normalise(alias), info.name)
        require(owner == info.name, f"schedule name {alias!r} already belongs to {owner!r}")
    SCHEDULES[info.name] = info
    for alias in filter(None, names):
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
        # the rooms register theirs when imported; the shelf does not import them (it sits below them)
        more = "" if "course_lib.schedules" in sys.modules else (
            "; the other schedules (interleaved, zero bubble, V shapes, ...) register themselves when you "
            "import course_lib.schedules"
        )
        raise CourseError(f"unknown schedule {name!r}; choose one of: {', '.join(SCHEDULES)}{more}")
    return canonical


def build_schedule(name: str, n_devices: int, n_microbatches: int, virtual: int | None = None) -> Schedule:
    """Build schedule `name` for p = `n_devices` devices and m = `n_microbatches` micro-batches.

    `virtual` is the number of stages per device (v); only interleaved and V-shape schedules take v > 1
    (V shape: exactly 2). None: the schedule's ``default_virtual`` (1, or 2 for those).
    """
    info = SCHEDULES[resolve_name(name)]
    virtual = info.default_virtual if virtual is None else virtual
    n_devices, n_microbatches, virtual = check_sizes(n_devices, n_microbatches, virtual)
    if info.uses_virtual:
        return info.build(n_devices, n_microbatches, virtual)
    require(
        virtual == 1,
        f"schedule {info.name!r} puts one stage on each device, so virtual must be 1, got {virtual}; "
        "use 'interleaved-1f1b' for several stages per device",
    )
    return info.build(n_devices, n_microbatches)


_ANY_SIZES = "any p >= 1, m >= 1"
register(
    ScheduleInfo(
        "naive", naive,
        "one micro-batch at a time through the whole pipe: only one device works at any moment",
        _ANY_SIZES, None, None,
        "the baseline of GPipe (Huang et al. 2019, arXiv 1811.06965, Fig. 2b)",
    ),
    "sequential",
)
register(
    ScheduleInfo(
        "gpipe", gpipe, "all forwards, then all backwards (GPipe); holds all m micro-batches' activations",
        _ANY_SIZES, None, None,
        "GPipe (Huang et al. 2019, arXiv 1811.06965)", torch_class="ScheduleGPipe",
    ),
)
register(
    ScheduleInfo(
        "1f1b", one_f_one_b,
        "PipeDream-Flush: warm-up, one forward / one backward, cool-down; on equal stages the same bubble "
        "as GPipe (no larger on uneven ones), at most p micro-batches held",
        _ANY_SIZES, None, None,
        "PipeDream-Flush (Narayanan et al. 2021, arXiv 2104.04473 sec 2.2.1)", torch_class="Schedule1F1B",
    ),
    "pipedream-flush", "oneFoneB",
)
