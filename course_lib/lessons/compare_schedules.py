"""Schedules side by side: step time, bubble, peak activation memory and messages, from the simulator.

    from course_lib.lessons.compare_schedules import compare, format_table, plot_comparison
    rows = compare(p=4, m=8)            # T_F = T_B = T_W = 1 for a device's share of the model
    print(format_table(rows))
    plot_comparison(rows)

Every candidate does the same work; only the order differs. Costs are given for a device's share of
the model: with v stages per device (interleaving) each stage costs 1/v of that, and memory is
counted in *micro-batches of a device's layers*, so a stage of an interleaved device holding one
micro-batch counts 1/v. A candidate the sizes do not fit (say, interleaving with an m that does not
divide into rounds) comes back as a row whose ``error`` says why, never as an exception.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from course_lib.errors import CourseError
from course_lib.links import Link
from course_lib.schedules.builders import build_schedule
from course_lib.simulator import StageCosts, simulate
from course_lib.timeline import SIMULATED


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
class Row:
    """One candidate's simulated figures (all None, and `error` set, when the sizes do not fit)."""

    label: str
    schedule: str
    virtual: int
    makespan: float | None = None  # step time, in the unit of the costs
    bubble: float | None = None  # idle share of all device-time (GPipe's convention)
    idle: float | None = None  # the most idle time of any device, in the unit of the costs
    peak_activations: float | None = None  # most micro-batches of a device's layers held, any device
    messages: int | None = None  # point-to-point sends per step (activations down, gradients up)
    error: str | None = None


def compare(
    p: int, m: int, candidates: Sequence[Candidate] = DEFAULT_CANDIDATES, costs: StageCosts | None = None,
    link: Link | None = None,
) -> list[Row]:  # fmt: skip
    """Simulate every candidate at p devices and m micro-batches; `costs` are per device's share
    (scalars; default T_F = T_B = T_W = 1), `link` the same for every stage boundary (default free)."""
    costs = costs if costs is not None else StageCosts(f=1.0, i=1.0, w=1.0)
    rows = []
    for c in candidates:
        try:
            schedule = build_schedule(c.schedule, p, m, c.virtual)
            tl = simulate(schedule, costs.per_virtual_stage(c.virtual), links=link, source=SIMULATED)
        except CourseError as err:
            rows.append(Row(c.label, c.schedule, c.virtual, error=str(err)))
            continue
        devices = range(tl.n_devices)
        rows.append(Row(
            c.label, c.schedule, c.virtual, makespan=tl.makespan, bubble=tl.bubble_fraction,
            idle=max(tl.idle(d) for d in devices), messages=len(tl.transfers),
            peak_activations=max(tl.peak_inflight(d) for d in devices) / c.virtual,
        ))  # fmt: skip
    return rows


def format_table(rows: Sequence[Row], unit: str = "T") -> str:
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


def plot_comparison(rows: Sequence[Row], title: str = ""):
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
        ax.set_yticks(range(len(ok)))
        ax.set_yticklabels([r.label for r in ok] if ax is axes[0] else [])
        ax.invert_yaxis()
        ax.set_xlabel(label)
    fig.suptitle(title or "schedules compared · source: simulated")
    fig.tight_layout()
    return fig
