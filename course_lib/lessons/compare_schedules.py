"""Schedules side by side, simulated: lessons 07a-07c's tables and charts (step, bubble, peak memory,
messages).

    from course_lib.lessons.compare_schedules import compare, format_comparison, plot_comparison
    rows = compare(p=4, m=8)            # a few named candidates; T_F = T_I = T_W = 1 per device's share
    print(format_comparison(rows))
    plot_comparison(rows)

    from course_lib.lessons.compare_schedules import family_rows, format_family, plot_family
    rows = family_rows(p=4, m=8)        # every registered schedule, at its default stages per device
    print(format_family(rows))
    plot_family(rows)

Every candidate does the same work; only the order differs. Costs are given for a device's share of
the model: with v stages per device each stage costs 1/v of that (``simulator.simulate_named``), and
memory is counted in *micro-batches of a device's layers*, so a stage of a device with v stages
holding one micro-batch counts 1/v. ``family_rows`` iterates over the registry (``SCHEDULES``), so a
schedule registered later appears without a change here. A candidate the sizes do not fit (say,
interleaving with an m that does not divide into rounds) comes back as a row whose ``error`` says
why, never as an exception.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from course_lib.schedules.closed_forms import Case
from course_lib.shelf.costs import Link, StageCosts
from course_lib.shelf.errors import CourseError
from course_lib.shelf.first_schedules import SCHEDULES, resolve_name
from course_lib.shelf.simulator import simulate_named
from course_lib.shelf.timeline import Timeline


@dataclass(frozen=True)
class Candidate:
    label: str
    schedule: str
    virtual: int = 1


DEFAULT_CANDIDATES = (
    Candidate("GPipe", "gpipe"),
    Candidate("1F1B", "1f1b"),
    Candidate("interleaved 1F1B, v=2", "interleaved-1f1b", 2),
    Candidate("interleaved 1F1B, v=4", "interleaved-1f1b", 4),
    Candidate("ZB-H1", "zb-h1"),
    Candidate("latency-aware 1F1B", "latency-aware-1f1b"),
)


@dataclass(frozen=True)
class ComparisonRow:
    """One candidate's simulated figures (all None, and `error` set, when the sizes do not fit)."""

    label: str
    schedule: str
    virtual: int
    makespan: float | None = None  # step time, in the unit of the costs
    bubble: float | None = None  # idle share of all device-time (GPipe's convention)
    idle: float | None = None  # the most idle time of any device, in the unit of the costs
    peak_per_device: tuple[float, ...] = ()  # micro-batches of a device's layers held at once, per device
    messages: int | None = None  # point-to-point sends per step (activations down, gradients up)
    formula: float | None = None  # the registry's closed form for the bubble, None outside its range
    error: str | None = None

    @property
    def name(self) -> str:  # the registry's name (family_rows labels each row with it)
        return self.schedule

    @property
    def peak_activations(self) -> float | None:
        """The most micro-batches of a device's layers any device holds at once."""
        return max(self.peak_per_device) if self.peak_per_device else None


def compare(
    p: int, m: int, candidates: Sequence[Candidate] = DEFAULT_CANDIDATES, costs: StageCosts | None = None,
    link: Link | None = None,
) -> list[ComparisonRow]:  # fmt: skip
    """Simulate every candidate at p devices and m micro-batches; `costs` are per device's share
    (scalars; default T_F = T_I = T_W = 1), `link` the same for every stage boundary (default free)."""
    costs = costs if costs is not None else StageCosts(f=1.0, i=1.0, w=1.0)
    rows = []
    for c in candidates:
        try:
            tl = simulate_named(c.schedule, p, m, c.virtual, costs, links=link)
        except CourseError as err:  # sizes this schedule refuses: a row that says why
            rows.append(ComparisonRow(c.label, c.schedule, c.virtual, error=str(err)))
            continue
        case = Case.of(p, m, c.virtual, costs.per_virtual_stage(c.virtual), link)
        rows.append(ComparisonRow(
            c.label, c.schedule, c.virtual, makespan=tl.makespan, bubble=tl.bubble_fraction,
            idle=max(tl.idle(d) for d in range(p)), messages=len(tl.transfers),
            peak_per_device=tuple(tl.peak_inflight(d) / c.virtual for d in range(p)),
            formula=SCHEDULES[resolve_name(c.schedule)].bubble.at(case),
        ))  # fmt: skip
    return rows


def family_rows(p: int, m: int, costs: StageCosts | None = None) -> list[ComparisonRow]:
    """Every registered schedule at p devices, m micro-batches, with its default stages per device
    (2 for one that takes v, as the CLI gives it); `costs` per device's share, links free."""
    every = [Candidate(name, name, info.default_virtual) for name, info in SCHEDULES.items()]
    return compare(p, m, every, costs)


def idle_inside(tl: Timeline, device: int) -> float:
    """Idle time between `device`'s own first start and last end: the Zero Bubble paper's bubble, which
    leaves out the time before a device's first action and after its last (the step's makespan does not)."""
    spans = tl.spans_of(device)
    if not spans:
        return 0.0
    return max(s.end for s in spans) - min(s.start for s in spans) - tl.busy(device)


def format_comparison(rows: Sequence[ComparisonRow], unit: str = "T") -> str:
    """A plain-text table (deterministic: rounded simulated numbers only)."""
    head = f"{'schedule':24s} {'step':>7s} {'bubble':>7s} {'idle/dev':>9s} {'peak act.':>9s} {'messages':>9s}"
    lines = [head, "-" * len(head)]
    for r in rows:
        if r.error is not None:
            lines.append(f"{r.label:24s} does not fit: {r.error.split(';')[0]}")
            continue
        lines.append(
            f"{r.label:24s} {r.makespan:6.2f}{unit} {r.bubble:7.1%} {r.idle:8.2f}{unit} "
            f"{r.peak_activations:9.2f} {r.messages:9d}"
        )
    return "\n".join(lines)


def format_family(rows: Sequence[ComparisonRow]) -> str:
    """``family_rows`` as text (rounded simulated numbers, the registry's formula, each device's peak)."""
    head = f"{'schedule':20s} {'v':>2s} {'step':>6s} {'bubble':>7s} {'formula':>8s} {'messages':>8s}"
    head += "  peak per device"
    lines = [head, "-" * len(head)]
    for r in rows:
        if r.error is not None:
            why = r.error if len(r.error) <= 70 else r.error[:69] + "…"
            lines.append(f"{r.name:20s} {r.virtual:2d} does not fit: {why}")
            continue
        formula = f"{r.formula:8.1%}" if r.formula is not None else f"{'-':>8s}"
        peaks = " ".join(f"{x:g}" for x in r.peak_per_device)
        step = f"{r.makespan:6.2f} {r.bubble:7.1%} {formula} {r.messages:8d}"
        lines.append(f"{r.name:20s} {r.virtual:2d} {step}  {peaks}")
    return "\n".join(lines)


def plot_comparison(rows: Sequence[ComparisonRow], title: str = ""):
    """Three bar charts (bubble, peak activations, messages) for the rows that fit; returns the figure."""
    import matplotlib.pyplot as plt

    ok = [r for r in rows if r.error is None]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.4))
    panels = (
        ([r.bubble * 100 for r in ok], "bubble (% of device-time idle)"),
        ([r.peak_activations for r in ok], "peak activations held\n(micro-batches of a device's layers)"),
        ([r.messages for r in ok], "point-to-point messages per step"),
    )
    colors = [f"C{i}" for i in range(len(ok))]
    for ax, (values, label) in zip(axes, panels, strict=True):
        ax.barh(range(len(ok)), values, color=colors)
        ax.set_xlabel(label)
    _label_rows(axes, [r.label for r in ok])
    fig.suptitle(title or "schedules compared · source: simulated")
    fig.tight_layout()
    return fig


def plot_family(rows: Sequence[ComparisonRow], title: str = ""):
    """Four bar charts (step, bubble, peak activations per device, messages); returns the figure."""
    import matplotlib.pyplot as plt

    ok = [r for r in rows if r.error is None]
    fig, axes = plt.subplots(1, 4, figsize=(15, 0.9 + 0.38 * len(ok)))
    y = list(range(len(ok)))
    n_dev = max((len(r.peak_per_device) for r in ok), default=1)
    axes[0].barh(y, [r.makespan for r in ok], color="C0")
    axes[0].set_xlabel("step (units of a device's T_F)")
    axes[1].barh(y, [r.bubble * 100 for r in ok], color="C1")
    axes[1].set_xlabel("bubble (% of device-time idle)")
    width = 0.8 / n_dev  # one thin bar per device, device 0 on top of each group
    for d in range(n_dev):
        offsets = [i - 0.4 + (d + 0.5) * width for i in y]
        axes[2].barh(offsets, [r.peak_per_device[d] for r in ok], height=width, color=f"C{d % 10}",
                     label=f"device {d}")  # fmt: skip
    axes[2].set_xlabel("peak activations held, per device\n(micro-batches of a device's layers)")
    axes[2].legend(fontsize=7, loc="lower right")
    axes[3].barh(y, [r.messages for r in ok], color="C2")
    axes[3].set_xlabel("point-to-point messages per step")
    _label_rows(axes, [f"{r.name}, v={r.virtual}" for r in ok])
    fig.suptitle(title or "every registered schedule · equal costs, free links · source: simulated")
    fig.tight_layout()
    return fig


def _label_rows(axes, labels: Sequence[str]) -> None:
    """ComparisonRow labels on the first chart only, the first row on top in every chart."""
    for ax in axes:
        ax.set_yticks(range(len(labels)))
        ax.set_yticklabels(labels if ax is axes[0] else [])
        ax.invert_yaxis()
