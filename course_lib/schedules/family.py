"""Every registered schedule side by side, simulated: the table and chart of lesson 07.

It iterates over the registry (``SCHEDULES``), so a schedule registered later appears without a
change here. Each runs at p devices and m micro-batches with its default stages per device (2 for a
schedule that takes v, as the CLI gives it), the same work per device (T_F = T_I = T_W = 1 for a
device's share of the model, each of its v stages 1/v of that) and free links. Memory is counted in
micro-batches of a device's layers: a stage of a device with v stages counts 1/v.

Try it::

    from course_lib.schedules.family import family_rows, format_family, plot_family
    rows = family_rows(p=4, m=8)
    print(format_family(rows))
    plot_family(rows)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from course_lib.costs import StageCosts
from course_lib.errors import CourseError
from course_lib.schedules.builders import SCHEDULES, build_schedule
from course_lib.schedules.closed_forms import Case
from course_lib.simulator import simulate
from course_lib.timeline import Timeline


@dataclass(frozen=True)
class FamilyRow:
    """One registry entry's simulated figures at (p, m, v); `error` says why it could not run."""

    name: str
    virtual: int
    step: float | None = None  # simulated step, in units of a device's T_F
    bubble: float | None = None  # idle share of all device-time (GPipe's convention)
    formula: float | None = None  # the registry's closed form for the bubble, None outside its range
    peak_per_device: tuple[float, ...] = ()  # micro-batches of a device's layers held at once, per device
    messages: int | None = None  # point-to-point messages per step
    error: str | None = None


def idle_inside(tl: Timeline, device: int) -> float:
    """Idle time between `device`'s own first start and last end: the Zero Bubble paper's bubble, which
    leaves out the time before a device's first action and after its last (the step's makespan does not)."""
    spans = tl.spans_of(device)
    if not spans:
        return 0.0
    return max(s.end for s in spans) - min(s.start for s in spans) - tl.busy(device)


def family_rows(p: int, m: int, costs: StageCosts | None = None) -> list[FamilyRow]:
    """Simulate every registered schedule at p devices, m micro-batches; `costs` per device's share."""
    costs = costs if costs is not None else StageCosts(1.0, 1.0, 1.0)
    rows = []
    for name, info in SCHEDULES.items():
        v = SCHEDULES[name].default_virtual
        try:
            tl = simulate(build_schedule(name, p, m, v), costs.per_virtual_stage(v))
        except CourseError as err:  # sizes this schedule refuses: a row that says why
            rows.append(FamilyRow(name, v, error=str(err)))
            continue
        stage_costs = costs.per_virtual_stage(v)
        case = Case(p, m, v, stage_costs.f, stage_costs.i, stage_costs.w)
        rows.append(FamilyRow(
            name, v, step=tl.makespan, bubble=tl.bubble_fraction, formula=info.bubble.at(case),
            peak_per_device=tuple(tl.peak_inflight(d) / v for d in range(p)), messages=len(tl.transfers),
        ))  # fmt: skip
    return rows


def format_family(rows: Sequence[FamilyRow]) -> str:
    """A plain-text table of `rows` (rounded simulated numbers, and the registry's formula)."""
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
        lines.append(
            f"{r.name:20s} {r.virtual:2d} {r.step:6.2f} {r.bubble:7.1%} {formula} {r.messages:8d}  {peaks}"
        )
    return "\n".join(lines)


def plot_family(rows: Sequence[FamilyRow], title: str = ""):
    """Four bar charts (step, bubble, peak activations per device, messages); returns the figure."""
    import matplotlib.pyplot as plt

    ok = [r for r in rows if r.error is None]
    fig, axes = plt.subplots(1, 4, figsize=(15, 0.9 + 0.38 * len(ok)))
    y = list(range(len(ok)))
    n_dev = max((len(r.peak_per_device) for r in ok), default=1)
    axes[0].barh(y, [r.step for r in ok], color="C0")
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
    for ax in axes:
        ax.set_yticks(y)
        ax.set_yticklabels([f"{r.name}, v={r.virtual}" for r in ok] if ax is axes[0] else [])
        ax.invert_yaxis()
    fig.suptitle(title or "every registered schedule · equal costs, free links · source: simulated")
    fig.tight_layout()
    return fig
