"""Schedule builders (naive, GPipe, 1F1B) and the registry of every schedule, with what derives from it.

Each builder returns a :class:`~course_lib.schedules.ir.Schedule`: for every device, the list of
actions it runs, in order. A builder only decides the *order*; when each action actually starts is
the simulator's (or an engine's) business, because a device waits for its inputs.

Try it::

    from course_lib.schedules.builders import build_schedule, SCHEDULES
    print(build_schedule("1f1b", n_devices=4, n_microbatches=8))
    for name, info in SCHEDULES.items():
        print(name, "-", info.description, "- bubble", info.bubble.text, "for", info.bubble.where)

Names are case-insensitive, and PyTorch's class names work too: ``"GPipe"``, ``"Schedule1F1B"``,
``"Interleaved1F1B"``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from course_lib.errors import require
from course_lib.schedules import closed_forms
from course_lib.schedules.closed_forms import ClosedForm
from course_lib.schedules.interleaved import interleaved_1f1b
from course_lib.schedules.ir import Action, Kind, Schedule
from course_lib.schedules.looped import looped_bfs
from course_lib.schedules.zero_bubble import interleaved_zero_bubble, zb_h1, zb_h2


def F(stage: int, mb: int) -> Action:
    return Action(stage, Kind.F, mb)


def B(stage: int, mb: int) -> Action:
    return Action(stage, Kind.B, mb)


# The largest sizes the course accepts, refused at once rather than failing minutes later for want of time
# or memory. check_sizes (so every builder), TrainConfig.check and the command line's flags read them.
LIMITS = {
    "actions": 10**6,  # 3*p*m*v (F, I, W): 600k took 12 s to build, validate and simulate on 2 busy cores
    "layers": 1_000,  # lessons: 80; Llama 3 405B: 126; 1,000 toy blocks take 35 s a step on a busy CPU
    "parameters": 10**9,  # 16 B each with AdamW (weights, gradients, two moments): 16 GB
    "lr": 1e3,  # AdamW moves a weight by about lr a step: 1000 already diverges; 1e300 overflows float32
    "seed": 2**63 - 1,  # a signed 64-bit int; torch.manual_seed also takes seed + 12345 (held-out batches)
}


def within_limit(name: str, value: int, what: str) -> None:
    """Refuse `value` (what it counts: `what`) above LIMITS[name], naming the limit."""
    limit = f"the limit of {LIMITS[name]:,} {name} (course_lib.schedules.builders.LIMITS)"
    require(value <= LIMITS[name], f"{what} is {value:,}, over {limit}")


def check_sizes(n_devices: int, n_microbatches: int, virtual: int = 1) -> None:
    """Reject sizes no schedule can use or finish, naming the value that was given (build_schedule checks
    them for every builder; the three a lesson calls directly check them too)."""
    for label, value in (("n_devices", n_devices), ("n_microbatches", n_microbatches), ("virtual", virtual)):
        require(isinstance(value, int) and not isinstance(value, bool) and value >= 1,
                f"{label} must be a whole number >= 1, got {value!r}")  # fmt: skip
    actions = 3 * n_devices * n_microbatches * virtual
    within_limit("actions", actions, f"3*p*m*v = 3*{n_devices}*{n_microbatches}*{virtual}")


def naive(n_devices: int, n_microbatches: int) -> Schedule:
    """One micro-batch at a time: F through every stage, B back through every stage, then the next.

    Device d's order is ``dF0 dB0 dF1 dB1 ...``. Because device 0 runs ``0F1`` only after ``0B0``,
    and ``0B0`` needs every later stage's backward, no two devices ever work at the same time.
    """
    check_sizes(n_devices, n_microbatches)
    orders = [[a for mb in range(n_microbatches) for a in (F(d, mb), B(d, mb))] for d in range(n_devices)]
    return Schedule("naive", n_devices, n_microbatches, orders, list(range(n_devices)))


def gpipe(n_devices: int, n_microbatches: int) -> Schedule:
    """GPipe (Huang et al. 2019): every device runs all m forwards, then all m backwards.

    Backwards go in micro-batch order 0, 1, ..., m-1, as torch.distributed.pipelining's ScheduleGPipe
    does. Device 0 holds the activations of all m micro-batches until its first backward.
    """
    check_sizes(n_devices, n_microbatches)
    mbs = range(n_microbatches)
    orders = [[F(d, mb) for mb in mbs] + [B(d, mb) for mb in mbs] for d in range(n_devices)]
    return Schedule("gpipe", n_devices, n_microbatches, orders, list(range(n_devices)))


def one_f_one_b(n_devices: int, n_microbatches: int, warmup: Sequence[int] | None = None) -> Schedule:
    """1F1B, also called PipeDream-Flush (Narayanan et al. 2021): same bubble as GPipe, less memory.

    Device d (of p) works in three phases:

    1. warm-up: ``p - 1 - d`` forwards, enough to fill the pipe below it (or ``warmup[d]``: the
       latency-aware variant passes a deeper one, to keep slow links busy);
    2. steady state: one forward, then one backward, until every forward has run;
    3. cool-down: the backwards still owed.

    So device d never holds more than ``p - d`` micro-batches' activations (device 0: p), where GPipe
    holds m. With m < p - 1 - d the warm-up is simply all m forwards.
    """
    check_sizes(n_devices, n_microbatches)
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


@dataclass(frozen=True)
class ScheduleInfo:
    """What the CLI, the dashboard, the plots and the notebooks need to know about a schedule."""

    name: str
    build: Callable[..., Schedule]  # build(n_devices, n_microbatches[, virtual])
    description: str
    constraints: str
    bubble: ClosedForm  # idle share of the step, with the range where the formula holds
    peak: ClosedForm  # micro-batches in flight on the busiest device
    paper: str
    torch_class: str | None = None  # the matching class in torch.distributed.pipelining, if any
    uses_virtual: bool = False  # True if the builder takes v stages per device
    # whether torch_class is also a name of this entry; False where another entry owns that name
    torch_alias: bool = True


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
    require(canonical is not None, f"unknown schedule {name!r}; choose one of: {', '.join(SCHEDULES)}")
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


def _latency_aware_1f1b(n_devices: int, n_microbatches: int) -> Schedule:
    """latency_aware_1f1b with one extra micro-batch in flight per link: its registered form."""
    # imported here, not at the top: latency_aware builds on one_f_one_b, so it imports this module
    from course_lib.schedules.latency_aware import latency_aware_1f1b

    return latency_aware_1f1b(n_devices, n_microbatches, extra_per_link=1)


_ANY_SIZES = "any p >= 1, m >= 1"
register(
    ScheduleInfo(
        "naive", naive,
        "one micro-batch at a time through the whole pipe: only one device works at any moment",
        _ANY_SIZES, closed_forms.NAIVE_BUBBLE, closed_forms.NAIVE_PEAK,
        "the baseline of GPipe (Huang et al. 2019, arXiv 1811.06965, Fig. 2b)",
    ),
    "sequential",
)
register(
    ScheduleInfo(
        "gpipe", gpipe, "all forwards, then all backwards (GPipe); holds all m micro-batches' activations",
        _ANY_SIZES, closed_forms.FLUSH_BUBBLE, closed_forms.GPIPE_PEAK,
        "GPipe (Huang et al. 2019, arXiv 1811.06965)", torch_class="ScheduleGPipe",
    ),
)
register(
    ScheduleInfo(
        "1f1b", one_f_one_b,
        "PipeDream-Flush: warm-up, one forward / one backward, cool-down; same bubble as GPipe, "
        "at most p micro-batches held",
        _ANY_SIZES, closed_forms.FLUSH_BUBBLE, closed_forms.ONE_F_ONE_B_PEAK,
        "PipeDream-Flush (Narayanan et al. 2021, arXiv 2104.04473 sec 2.2.1)", torch_class="Schedule1F1B",
    ),
    "pipedream-flush", "oneFoneB",
)
register(
    ScheduleInfo(
        "interleaved-1f1b", interleaved_1f1b,
        "1F1B with v stages per device (stage s on device s % p): bubble divided by v, "
        "v times the point-to-point traffic",
        "any p >= 1, v >= 1; m a multiple of max(1, m // p) (PyTorch's rule; Megatron: m a multiple of p)",
        closed_forms.INTERLEAVED_BUBBLE, closed_forms.INTERLEAVED_PEAK,
        "interleaved 1F1B (Narayanan et al. 2021, arXiv 2104.04473 sec 2.2.2)",
        torch_class="ScheduleInterleaved1F1B", uses_virtual=True,
    ),
    "interleaved", "virtual-pipeline",
)
register(
    ScheduleInfo(
        "zb-h1", zb_h1,
        "Zero Bubble H1: backward split into I (input grad) and W (weight grad); W fills 1F1B's "
        "gaps, same peak memory as 1F1B",
        _ANY_SIZES, closed_forms.ZB_H1_BUBBLE, closed_forms.ZB_H1_PEAK,
        "ZB-H1 (Qi et al. 2024, arXiv 2401.10241 sec 2.1)",
        # with one stage per rank torch's class builds this order, for the m it accepts; the class name
        # itself belongs to 'interleaved-zb', which at v = 1 is this order under torch's rounds rule
        torch_class="ScheduleInterleavedZeroBubble", torch_alias=False,
    ),
    "zbh1", "zero-bubble-h1",
)
register(
    ScheduleInfo(
        "latency-aware-1f1b", _latency_aware_1f1b,
        "1F1B with a deeper warm-up for slow links: one more micro-batch in flight per link below "
        "a device (latency_aware_1f1b(..., extra_per_link=k) for k = ceil(2L / (t_f + t_b)))",
        _ANY_SIZES, closed_forms.LATENCY_AWARE_BUBBLE, closed_forms.LATENCY_AWARE_PEAK,
        "this course (lesson 06): Little's law applied to 1F1B's warm-up",
    ),
    "wan-1f1b",
)


# --- looped BFS, interleaved zero bubble, ZB-H2 (issue 13) ---------------------------------------
register(
    ScheduleInfo(
        "looped-bfs", looped_bfs,
        "breadth first on v stages per device (stage s on device s % p): all forwards of a stage, then "
        "the next; backwards last stage first; interleaving's bubble, GPipe's memory (v*m held)",
        "any p >= 1, m >= 1, v >= 1", closed_forms.LOOPED_BFS_BUBBLE, closed_forms.LOOPED_BFS_PEAK,
        "Breadth-First Pipeline Parallelism (Lamy-Poirier 2022, arXiv 2211.05953)",
        torch_class="ScheduleLoopedBFS", uses_virtual=True,
    ),
    "looped", "bfs",
)
register(
    ScheduleInfo(
        "interleaved-zb", interleaved_zero_bubble,
        "ZB-H1's rule on interleaved 1F1B (v stages per device, stage s on device s % p): W fills the "
        "gaps, warm-up one forward per hop; at v = 1 it is zb-h1",
        "any p >= 1, v >= 1; m a multiple of max(1, m // p) (PyTorch's rule, as interleaved-1f1b)",
        closed_forms.INTERLEAVED_ZB_BUBBLE, closed_forms.INTERLEAVED_ZB_PEAK,
        "ZB1P (Qi et al. 2024, arXiv 2401.10241) on Megatron's interleaving, as torch builds it",
        torch_class="ScheduleInterleavedZeroBubble", uses_virtual=True,
    ),
    "interleaved-zero-bubble", "zb1p",
)
register(
    ScheduleInfo(
        "zb-h2", zb_h2,
        "Zero Bubble H2: warm-up of 2(p-1-d)+1 forwards and W's moved to the tail, so no device idles "
        "between its first and last action; up to 2p-1 micro-batches held",
        _ANY_SIZES, closed_forms.ZB_H2_BUBBLE, closed_forms.ZB_H2_PEAK,
        "ZB-H2 (Qi et al. 2024, arXiv 2401.10241 sec 2.2)",
    ),
    "zbh2", "zero-bubble-h2", "zb2p",
)
