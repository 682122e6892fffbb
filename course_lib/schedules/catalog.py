"""The registry's entries for every schedule the rooms hold, and the closed forms of the shelf's three.

Importing ``course_lib.schedules`` (or any module in it) runs this once: each schedule of
``interleaved.py``, ``looped.py``, ``zero_bubble.py``, ``v_shape.py``, ``controllable_memory.py`` and
``latency_aware.py`` joins the shelf's registry (course_lib/shelf/first_schedules.py) with its closed-form
bubble and peak in flight (``closed_forms.py``), its paper and its PyTorch class; naive, GPipe and 1F1B,
which the shelf registers itself, get their closed forms here.

    import course_lib.schedules
    from course_lib.shelf.first_schedules import SCHEDULES
    for name, info in SCHEDULES.items():
        print(name, "-", info.description, "- bubble", info.bubble.text, "for", info.bubble.where)
"""

from __future__ import annotations

from dataclasses import replace

# each module by its full name: `from course_lib.schedules import x` would read as importing this package
import course_lib.schedules.closed_forms as closed_forms
import course_lib.schedules.controllable_memory as controllable_memory
import course_lib.schedules.v_shape as v_shape
import course_lib.schedules.zero_bubble as zero_bubble
from course_lib.schedules.interleaved import interleaved_1f1b
from course_lib.schedules.latency_aware import latency_aware_1f1b
from course_lib.schedules.looped import looped_bfs
from course_lib.schedules.zero_bubble import interleaved_zero_bubble, zb_h1, zb_h2
from course_lib.shelf.first_schedules import SCHEDULES, ScheduleInfo, register
from course_lib.shelf.schedule import Schedule

_ANY_SIZES = "any p >= 1, m >= 1"
for _name, _bubble, _peak in (
    ("naive", closed_forms.NAIVE_BUBBLE, closed_forms.NAIVE_PEAK),
    ("gpipe", closed_forms.FLUSH_BUBBLE, closed_forms.GPIPE_PEAK),
    ("1f1b", closed_forms.FLUSH_BUBBLE, closed_forms.ONE_F_ONE_B_PEAK),
):
    register(replace(SCHEDULES[_name], bubble=_bubble, peak=_peak))


def _latency_aware_1f1b(n_devices: int, n_microbatches: int) -> Schedule:
    """latency_aware_1f1b with one extra micro-batch in flight per link: its registered form."""
    return latency_aware_1f1b(n_devices, n_microbatches, extra_per_link=1)


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
