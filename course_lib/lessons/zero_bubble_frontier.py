"""Lesson 10's glue: the Zero Bubble paper's table replayed in the simulator, and the memory frontier.

**Published against predicted.** Qi et al. 2024 (arXiv 2401.10241) profile T_F, T_B, T_W and T_comm
for 12 settings (their Table 9; their B is our I) and compute each schedule's bubble rate from them
(their Table 5: computed, not measured); ``PAPER_SETTINGS`` holds all 12. Their bubble rate is
(cost - m(T_F+T_B+T_W)) / cost with cost the *largest time any one stage takes from its first action to
its last*; this course's ``Timeline.bubble_fraction`` divides by the step's makespan instead. The two
agree where the busiest device is busy from the first start to the last end (1F1B, ZB-H1) and differ
where every device starts late and ends early by the pipeline's slant: ZB-H2's parallelogram once 2T_W
clearly exceeds T_F (the 6.2B to 28.3B rows), where the makespan counts the fill and drain, theirs not.

**The frontier.** For given costs and a link time, every schedule is a point (peak activations held,
bubble); the automatic scheduler (``autoschedule.auto_zero_bubble``) is a curve over the memory limit.

Try it::

    from course_lib.lessons.zero_bubble_frontier import published_vs_predicted, format_whole_table
    print(format_whole_table(published_vs_predicted()))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from course_lib.autoschedule.auto_zero_bubble import auto_zero_bubble
from course_lib.autoschedule.scoring import stage_span
from course_lib.schedules.controllable_memory import v_half_memory, v_min_memory  # noqa: F401 (lesson 10)
from course_lib.shelf.costs import Link, StageCosts
from course_lib.shelf.first_schedules import build_schedule, one_f_one_b
from course_lib.shelf.schedule import Schedule
from course_lib.shelf.simulator import simulate
from course_lib.shelf.timeline import Timeline

# A pending W as the authors count its memory: 32h of a forward's 34h + 5as per token (their Table 1;
# ``paper_memory``). About a third for GPT-style layers; any share from 0.25 to 0.6 gives the same
# schedules in the table below (tests/autoschedule/test_zero_bubble_frontier.py checks both ends).
PAPER_W_MEMORY = 1 / 3


@dataclass(frozen=True)
class ProfiledSetting:
    """One row of the paper's Table 9 (ms per micro-batch on one stage) and its Table 5 bubble rates."""

    model: str
    p: int
    m: int
    t_f: float
    t_b: float  # the paper's B: our I, the input gradient
    t_w: float
    t_comm: float
    published: dict[str, float]  # schedule -> Table 5's bubble rate

    @property
    def costs(self) -> StageCosts:
        return StageCosts(self.t_f, self.t_b, self.t_w)


# Qi et al. 2024, arXiv 2401.10241, appendix: Table 9 (the profile, ms) and Table 5 (the bubble rates
# computed from it), all 12 settings: four models, three micro-batch counts m each. Every setting holds
# Table 5's handcrafted three; the first (the lesson's running example) also its ZB-1p and ZB-2p.
TABLE_5_HANDCRAFTED = ("1f1b", "zb-h1", "zb-h2")
_TABLE_9_AND_5 = (
    # model     p    m    T_F     T_B     T_W   T_comm   1F1B    ZB-H1   ZB-H2
    ("1.5B",   8,  24, 18.522, 18.086,  9.337, 0.601, 0.2431, 0.1585, 0.1083),
    ("1.5B",   8,  32, 18.513, 18.086,  9.331, 0.626, 0.1985, 0.1242, 0.0837),
    ("1.5B",   8,  64, 18.546, 18.097,  9.321, 0.762, 0.1240, 0.0674, 0.0444),
    ("6.2B",   8,  24, 29.718, 29.444, 19.927, 0.527, 0.2347, 0.1323, 0.0698),
    ("6.2B",   8,  32, 29.802, 29.428, 19.530, 0.577, 0.1898, 0.1045, 0.0559),
    ("6.2B",   8,  64, 29.935, 29.621, 19.388, 0.535, 0.1091, 0.0554, 0.0294),
    ("14.6B", 16,  48, 11.347, 11.248,  8.132, 0.377, 0.2552, 0.1397, 0.0672),
    ("14.6B", 16,  64, 11.307, 11.254,  8.101, 0.379, 0.2082, 0.1088, 0.0516),
    ("14.6B", 16, 128, 11.325, 11.308,  8.109, 0.378, 0.1251, 0.0576, 0.0266),
    ("28.3B", 32,  96, 10.419, 10.207,  7.715, 0.408, 0.2646, 0.1421, 0.0641),
    ("28.3B", 32, 128, 10.408, 10.204,  7.703, 0.408, 0.2168, 0.1106, 0.0490),
    ("28.3B", 32, 256, 10.402, 10.248,  7.698, 0.460, 0.1352, 0.0594, 0.0257),
)  # fmt: skip
_published = [dict(zip(TABLE_5_HANDCRAFTED, row[7:], strict=True)) for row in _TABLE_9_AND_5]
_published[0] |= {"zb-1p": 0.1585, "zb-2p": 0.0433}  # Table 5's automatic two, 1.5B, p = 8, m = 24
PAPER_SETTINGS = tuple(
    ProfiledSetting(*row[:7], pub) for row, pub in zip(_TABLE_9_AND_5, _published, strict=True)
)


@dataclass(frozen=True)
class TableRow:
    """One schedule at one setting: Table 5's rate, and the simulator's under both definitions."""

    model: str
    p: int
    m: int
    schedule: str
    published: float
    paper_rate: float  # (cost - m(F+I+W)) / cost, cost = the longest stage span (the paper's)
    makespan_rate: float  # idle share of the step (this course's Timeline.bubble_fraction)
    peak: int  # most micro-batches any device held, counted to the end of their W


def paper_bubble_rate(tl: Timeline, m: int, costs: StageCosts) -> float:
    """The Zero Bubble paper's bubble rate of a simulated step (equal stages: one stage's costs)."""
    cost = stage_span(tl)
    f, i, w = (x[0] for x in costs.per_stage(1))
    return (cost - m * (f + i + w)) / cost


def schedule_for(name: str, s: ProfiledSetting) -> tuple[Schedule, StageCosts]:
    """The schedule Table 5 names, and the costs to simulate it with (1F1B's backward is fused)."""
    if name == "1f1b":
        return one_f_one_b(s.p, s.m), StageCosts.fused(s.t_f, s.t_b + s.t_w)
    if name in ("zb-1p", "zb-2p"):
        limit = s.p if name == "zb-1p" else 2 * s.p
        sched = auto_zero_bubble(s.p, s.m, limit, s.costs, s.t_comm, w_memory=PAPER_W_MEMORY,
                                 objective="stage-span", name=name)  # fmt: skip
        return sched, s.costs
    return build_schedule(name, s.p, s.m), s.costs


def published_vs_predicted(settings: Sequence[ProfiledSetting] = PAPER_SETTINGS) -> list[TableRow]:
    """Every schedule of every setting, simulated with its profile and the link time T_comm."""
    rows = []
    for s in settings:
        for name, published in s.published.items():
            sched, costs = schedule_for(name, s)
            tl = simulate(sched, costs, links=Link(latency_s=s.t_comm))
            peak = max(tl.peak_inflight(d) for d in range(s.p))
            rows.append(TableRow(s.model, s.p, s.m, name, published, paper_bubble_rate(tl, s.m, s.costs),
                                 tl.bubble_fraction, peak))  # fmt: skip
    return rows


def largest_difference(rows: Sequence[TableRow]) -> tuple[float, TableRow]:
    """The largest |published - predicted| (the paper's definition), in rate units, and its row."""
    worst = max(rows, key=lambda r: abs(r.published - r.paper_rate))
    return abs(worst.published - worst.paper_rate), worst


def format_paper_table(rows: Sequence[TableRow]) -> str:
    """Published against predicted, both definitions side by side."""
    head = (f"{'model':6s} {'p':>3s} {'m':>4s} {'schedule':9s} {'Table 5':>8s} {'paper def':>10s} "
            f"{'diff':>7s} {'makespan def':>13s} {'peak':>5s}")  # fmt: skip
    lines = ["Table 5: computed by the paper from its profile; paper def, makespan def: source: simulated",
             head, "-" * len(head)]  # fmt: skip
    for r in rows:
        lines.append(
            f"{r.model:6s} {r.p:3d} {r.m:4d} {r.schedule:9s} {r.published:8.2%} {r.paper_rate:10.2%} "
            f"{r.paper_rate - r.published:+7.2%} {r.makespan_rate:13.2%} {r.peak:5d}"
        )
    return "\n".join(lines)


def format_whole_table(rows: Sequence[TableRow], schedules: Sequence[str] = TABLE_5_HANDCRAFTED) -> str:
    """One line per setting: for each of `schedules`, Table 5's rate, the simulator's (the paper's
    definition) and their difference in percentage points."""
    settings = list(dict.fromkeys((r.model, r.p, r.m) for r in rows))
    by_key = {(r.model, r.p, r.m, r.schedule): r for r in rows}
    top = f"{'':14s}" + "".join(f" | {name.upper():^24s}" for name in schedules)
    head = f"{'model':6s} {'p':>3s} {'m':>3s}" + " | Table 5 simulated   diff" * len(schedules)
    title = "Table 5: computed by the paper from its Table 9; simulated: source: simulated, the paper's def"
    lines = [title, top.rstrip(), head, "-" * len(head)]
    for model, p, m in settings:
        cells = []
        for name in schedules:
            r = by_key[model, p, m, name]
            cells.append(
                f" | {r.published:7.2%} {r.paper_rate:9.2%} {100 * (r.paper_rate - r.published):+6.3f}"
            )
        lines.append(f"{model:6s} {p:3d} {m:3d}" + "".join(cells))
    return "\n".join(lines)


@dataclass(frozen=True)
class FrontierPoint:
    """One schedule at one memory: the peak it held and its simulated bubble (both definitions)."""

    label: str
    limit: float | None  # the memory limit it was built for (None: a handcrafted schedule)
    peak: float  # most micro-batches of a device's layers held at once, on any device
    step: float
    makespan_rate: float
    paper_rate: float


def _point(label: str, sched: Schedule, costs: StageCosts, comm: float, m: int, limit=None) -> FrontierPoint:
    v = sched.stages_per_device
    tl = simulate(sched, costs.per_virtual_stage(v), links=Link(latency_s=comm))
    peak = max(tl.peak_inflight(d) for d in range(sched.n_devices)) / v
    paper = paper_bubble_rate(tl, m * v, costs.per_virtual_stage(v))
    return FrontierPoint(label, limit, peak, tl.makespan, tl.bubble_fraction, paper)


HANDCRAFTED = (("1F1B", "1f1b"), ("ZB-H1", "zb-h1"), ("ZB-H2", "zb-h2"), ("ZB-V", "zb-v"), ("V-Min", "v-min"),
               ("V-Half", "v-half"))  # fmt: skip
LINE, V = "automatic, one stage per device", "automatic, V (two stages per device)"


def frontier(p: int, m: int, costs: StageCosts, comm: float = 0.0):
    """(handcrafted points, {curve name: points}) for p devices, m micro-batches, a device's `costs`
    and `comm` seconds per message. Handcrafted points: 1F1B, ZB-H1, ZB-H2, and on a V ZB-V, V-Min and
    V-Half (schedules/controllable_memory.py). Curves, one stage per device: the limit from p (1F1B's)
    to 2p; on a V (each stage half a device): from V-Min's memory to p."""
    points = []
    for label, name in HANDCRAFTED:
        sched = build_schedule(name, p, m)
        if name == "1f1b":
            f, i, w = (x[0] for x in costs.per_stage(1))
            points.append(_point(label, sched, StageCosts.fused(f, i + w), comm, m))
        else:
            points.append(_point(label, sched, costs, comm, m))
    line = [_point(LINE, auto_zero_bubble(p, m, lim, costs, comm), costs, comm, m, lim)
            for lim in range(p, 2 * p + 1)]  # fmt: skip
    half = costs.per_virtual_stage(2)
    v = [_point(V, auto_zero_bubble(p, m, lim, half, comm, placement="v"), costs, comm, m, lim)
         for lim in range(v_min_memory(p), p + 1)]  # fmt: skip
    return points, {LINE: line, V: v}


def plot_frontier(points: Sequence[FrontierPoint], curves: dict[str, list[FrontierPoint]], title: str = ""):
    """Bubble (makespan definition) against peak memory: handcrafted points (V-Min and V-Half among
    them) and the automatic curves."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.4))
    for k, (label, curve) in enumerate(curves.items()):
        ax.plot([c.peak for c in curve], [c.makespan_rate * 100 for c in curve], "-o", color=f"C{k}", ms=4,
                label=f"{label}: one memory limit per dot")  # fmt: skip
    for k, pt in enumerate(points):
        ax.plot(pt.peak, pt.makespan_rate * 100, "s", ms=9, color=f"C{k + len(curves)}", label=pt.label)
    ax.set_xlabel("peak activations held on the busiest device (micro-batches of a device's layers)")
    ax.set_ylabel("bubble: idle share of the step (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title(title or "the zero-bubble frontier · source: simulated", fontsize=10)
    fig.tight_layout()
    return fig
