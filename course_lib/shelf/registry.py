"""The registry of every schedule, with what derives from it, and ``build_schedule`` by name.

Each entry names its builder (``basic.py``: naive, GPipe, 1F1B; ``interleaved.py``, ``looped.py``,
``zero_bubble.py``, ``v_shape.py``, ``controllable_memory.py``, ``latency_aware.py``), its closed-form
bubble and peak in flight with the range where each holds (``closed_forms.py``), its paper and its
PyTorch class.

Try it::

    from course_lib.shelf.registry import build_schedule, SCHEDULES
    print(build_schedule("1f1b", n_devices=4, n_microbatches=8))
    for name, info in SCHEDULES.items():
        print(name, "-", info.description, "- bubble", info.bubble.text, "for", info.bubble.where)

Names are case-insensitive, and PyTorch's class names work too: ``"GPipe"``, ``"Schedule1F1B"``,
``"Interleaved1F1B"``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from course_lib.schedules import closed_forms, controllable_memory, v_shape, zero_bubble
from course_lib.schedules.closed_forms import ClosedForm
from course_lib.schedules.interleaved import interleaved_1f1b
from course_lib.schedules.latency_aware import latency_aware_1f1b
from course_lib.schedules.looped import looped_bfs
from course_lib.schedules.zero_bubble import interleaved_zero_bubble, zb_h1, zb_h2
from course_lib.shelf.basic_schedules import LIMITS, check_sizes, gpipe, naive, one_f_one_b, within_limit
from course_lib.shelf.errors import require
from course_lib.shelf.schedule import Schedule

# the basic builders and the size limits, importable from here too (lessons and tests do)
__all__ = ["LIMITS", "SCHEDULES", "ScheduleInfo", "build_schedule", "check_sizes", "gpipe", "naive",
           "one_f_one_b", "resolve_name", "within_limit"]


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
    require(canonical is not None, f"unknown schedule {name!r}; choose one of: {', '.join(SCHEDULES)}")
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


def _latency_aware_1f1b(n_devices: int, n_microbatches: int) -> Schedule:
    """latency_aware_1f1b with one extra micro-batch in flight per link: its registered form."""
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
    "interleaved-zero-bubble",  # "zb1p" spells zb-1p (issue 27): the automatic scheduler at p
)
register(
    ScheduleInfo(
        "zb-h2", zb_h2,
        "Zero Bubble H2: warm-up of 2(p-1-d)+1 forwards and W's moved to the tail, so no device idles "
        "between its first and last action; up to 2p-1 micro-batches held",
        _ANY_SIZES, closed_forms.ZB_H2_BUBBLE, closed_forms.ZB_H2_PEAK,
        "ZB-H2 (Qi et al. 2024, arXiv 2401.10241 sec 2.2)",
    ),
    "zbh2", "zero-bubble-h2",  # "zb2p" spells zb-2p: the automatic scheduler at 2p
)


# ---- V-shape schedules (course_lib/schedules/v_shape.py): two stages per device, stage s and 2p-1-s ----
_V_SIZES = "any p >= 1; v = 2 only (the V: stage s on device s, stage 2p-1-s on device s)"
register(
    ScheduleInfo(
        "zb-v", v_shape.zb_v,
        "Zero Bubble V: two stages per device in a V (device 0 holds the first and the last), "
        "backward split into I and W; 1F1B's activation memory on every device, twice its messages",
        f"{_V_SIZES}; any m >= 1", closed_forms.ZB_V_BUBBLE, closed_forms.ZB_V_PEAK,
        "ZB-V (Qi et al. 2024, arXiv 2401.10241 sec 6)", torch_class="ScheduleZBVZeroBubble",
        uses_virtual=True, fixed_virtual=v_shape.V_STAGES_PER_DEVICE,
    ),
    "zbv", "zero-bubble-v",
)
register(
    ScheduleInfo(
        "dualpipe-v", v_shape.dualpipe_v,
        "DualPipeV (DeepSeek-V3's DualPipe cut in half): V placement, each forward paired with another "
        "stage's backward (overlapped on GPUs; one after the other here); 2p+1 stages' micro-batches held",
        f"{_V_SIZES}; m >= 2p", closed_forms.DUALPIPE_V_BUBBLE, closed_forms.DUALPIPE_V_PEAK,
        "DualPipe (DeepSeek-V3, arXiv 2412.19437 sec 3.2.1); DualPipeV: deepseek-ai/DualPipe",
        torch_class="ScheduleDualPipeV", uses_virtual=True, fixed_virtual=v_shape.V_STAGES_PER_DEVICE,
    ),
    "dualpipev",
)


# ---- V-Min, V-Half (course_lib/schedules/controllable_memory.py): the V with less memory ----
_CM = controllable_memory
for _name, _label, _build, _share, _bubble, _peak in (
    ("v-min", "V-Min", _CM.v_min, "a third", _CM.V_MIN_BUBBLE, _CM.V_MIN_PEAK),
    ("v-half", "V-Half", _CM.v_half, "half", _CM.V_HALF_BUBBLE, _CM.V_HALF_PEAK),
):
    register(
        ScheduleInfo(
            _name, _build,
            f"ZB-V's V placement with a tighter building block: about {_share} of 1F1B's activation memory, "
            "a longer fill and drain; no steady-state gap only at F = I = W",
            f"{_V_SIZES}; any m >= 1", _bubble, _peak,
            f"{_label} (Qi et al. 2024, Pipeline Parallelism with Controllable Memory, arXiv 2405.15362)",
            uses_virtual=True, fixed_virtual=v_shape.V_STAGES_PER_DEVICE,
        ),
        _name.replace("-", ""),
    )


# ---- ZB-1p / ZB-2p: the automatic scheduler's result at equal costs (schedules/zero_bubble.py) ----
_AUTO_WHERE = (
    "any p >= 1, m >= 1; built for equal costs and free links (autoschedule.auto_zero_bubble takes yours)"
)
register(
    ScheduleInfo(
        "zb-1p", zero_bubble.zb_1p,
        "automatic zero bubble at 1F1B's memory (at most p micro-batches held): the Zero Bubble paper's "
        "heuristic for given costs, never worse than ZB-H1",
        _AUTO_WHERE, closed_forms.ZB_1P_BUBBLE, closed_forms.ZB_1P_PEAK,
        "ZB-1p (Qi et al. 2024, arXiv 2401.10241 sec 3, Table 5)",
    ),
    "auto-zb-1p",
)
register(
    ScheduleInfo(
        "zb-2p", zero_bubble.zb_2p,
        "automatic zero bubble with up to 2p micro-batches held: the Zero Bubble paper's heuristic for "
        "given costs, never worse than ZB-H1 or ZB-H2",
        _AUTO_WHERE, closed_forms.ZB_2P_BUBBLE, closed_forms.ZB_2P_PEAK,
        "ZB-2p (Qi et al. 2024, arXiv 2401.10241 sec 3, Table 5)",
    ),
    "auto-zb-2p",
)
