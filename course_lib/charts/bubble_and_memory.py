"""Charts beside the Gantt chart: the bubble against m for several p, and the activations each device held.

Every figure says where its numbers come from (simulated / measured compute + simulated links /
measured). Colours are the Okabe-Ito palette, which stays distinct for colour-blind readers; the
Gantt chart itself is in ``course_lib.charts.gantt``.

Try it::

    from course_lib.shelf.first_schedules import build_schedule
    from course_lib.shelf.simulator import simulate
    from course_lib.charts.bubble_and_memory import plot_bubble_vs_m, plot_memory
    plot_bubble_vs_m(ps=(2, 4, 8), schedule="gpipe")
    plot_memory(simulate(build_schedule("1f1b", 4, 8)))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from matplotlib.axes import Axes

from course_lib.charts.gantt import chart_title, new_axes
from course_lib.schedules.closed_forms import Case, megatron
from course_lib.shelf.errors import CourseError, require
from course_lib.shelf.timeline import SIMULATED, Timeline, format_bytes

SERIES_COLORS = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#D55E00", "#56B4E9", "#000000", "#F0E442"]


def plot_bubble_vs_m(
    ps: Sequence[int] = (2, 4, 8), ms: Sequence[int] = tuple(range(1, 33)), schedule: str = "1f1b",
    virtual: int | None = None, convention: str = "gpipe", costs=None, ax: Axes | None = None,
) -> Axes:  # fmt: skip
    """Simulated bubble for several p over m (points), with the closed form drawn over them (lines).

    `convention` "gpipe" plots the idle share of the step, (p-1)/(m+p-1); "megatron" plots bubble
    time relative to ideal compute, (p-1)/m. The same simulations, two ways of dividing. `costs`: a
    device's share of the model, as everywhere (``simulator.simulate_named``)."""
    from course_lib.shelf.costs import StageCosts
    from course_lib.shelf.first_schedules import SCHEDULES, resolve_name
    from course_lib.shelf.simulator import simulate_named

    require(
        convention in ("gpipe", "megatron"), f"convention must be 'gpipe' or 'megatron', got {convention!r}"
    )
    name = resolve_name(schedule)
    virtual = SCHEDULES[name].default_virtual if virtual is None else virtual  # V shapes take v = 2 only
    ax = new_axes(ax, (8.0, 4.5))
    form = SCHEDULES[name].bubble  # the schedule's closed form, drawn where it holds
    everywhere = True  # does it hold at every m plotted?
    for i, p in enumerate(ps):
        color = SERIES_COLORS[i % len(SERIES_COLORS)]
        xs, ys = [], []
        for m in ms:
            try:
                tl = simulate_named(name, p, m, virtual, costs)
            except CourseError:
                continue  # e.g. interleaved needs particular m; those points are simply absent
            xs.append(m)
            ys.append(megatron(tl.bubble_fraction) if convention == "megatron" else tl.bubble_fraction)
        ax.plot(xs, ys, "o", color=color, markersize=4, label=f"simulated, p={p}")
        case = Case.of(p, 1, virtual, (costs or StageCosts()).per_virtual_stage(virtual))
        held = [m for m in xs if form.holds(replace(case, m=m))]
        everywhere = everywhere and len(held) == len(xs)
        if held:  # a smooth line from the first m where the formula holds to the last
            dense = [held[0] + k * (held[-1] - held[0]) / 200 for k in range(201)]
            line = [form.value(replace(case, m=m)) for m in dense]
            line = [megatron(y) for y in line] if convention == "megatron" else line
            ax.plot(dense, line, "-", color=color, linewidth=1, alpha=0.8)
    formula = form.text if convention == "gpipe" else form.megatron_text
    label = f"formula {formula}" + ("" if everywhere else ", where it holds")
    ax.plot([], [], "-", color="grey", label=label)
    what = "idle share of the step" if convention == "gpipe" else "bubble time / ideal compute time"
    other = (f"Megatron's {form.megatron_text} divides by ideal compute instead" if convention == "gpipe"
             else f"GPipe's {form.text} divides by the whole step instead")  # fmt: skip
    ax.set(xlabel="micro-batches m", ylabel=what, ylim=(0, None))
    ax.legend(fontsize=8)
    vtxt = f", v={virtual}" if virtual > 1 else ""
    ax.set_title(f"{name}{vtxt}: bubble vs m, equal stage costs, free links · source: simulated\n"
                 f"convention: {formula} ({what});\n{other}", fontsize=9)  # fmt: skip
    return ax


def plot_memory(tl: Timeline, ax: Axes | None = None) -> Axes:
    """Peak micro-batches whose activations each device held at once (bytes on the bars if known)."""
    ax = new_axes(ax, (7.0, 3.5))
    devices = list(range(tl.n_devices))
    peaks = [tl.peak_inflight(d) for d in devices]
    bars = ax.bar(devices, peaks, color=SERIES_COLORS[0])
    nbytes = [tl.peak_stash_bytes(d) for d in devices]
    if any(nbytes):
        ax.bar_label(bars, labels=[format_bytes(b or 0) for b in nbytes], fontsize=7)
    ax.set(xticks=devices, xlabel="device", ylabel="peak micro-batches held")
    # what is held is counted off the timeline's order, not timed: a run's timing source does not apply
    counted = f"source: counted in a run ({tl.source} timing)"
    caption = "source: simulated" if tl.source == SIMULATED else counted
    if any(nbytes) and tl.stash_is_lower_bound:
        caption += " · bytes: boundary tensors only (a lower bound on what a stage stashes)"
    ax.set_title(f"{chart_title(tl)}: activations held per device\n{caption}", fontsize=10)
    return ax
