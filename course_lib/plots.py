"""Pictures of Timelines: the Gantt chart, bubble-versus-m curves, memory held per device.

Every figure says where its numbers come from (simulated / measured compute + simulated links /
measured) and, for a Gantt chart, the bubble fraction. Colours are the Okabe-Ito palette, which
stays distinct for colour-blind readers. Where a device holds several stages (interleaved, looped or
V-shape schedules) each of its chunks gets its own shade of the kind's colour, lighter for later
stages, as in Megatron-LM's interleaving figure (Narayanan et al. 2021, arXiv 2104.04473 Fig. 4).

Try it::

    from course_lib.schedules.builders import build_schedule
    from course_lib.simulator import simulate
    from course_lib.plots import plot_timeline, plot_bubble_vs_m, plot_memory, save_timeline_png
    tl = simulate(build_schedule("1f1b", 4, 8))
    plot_timeline(tl)                    # in a notebook
    save_timeline_png(tl, "1f1b.png")    # anywhere (no display needed)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
from matplotlib.axes import Axes
from matplotlib.collections import LineCollection, PathCollection, PolyCollection
from matplotlib.colors import to_hex, to_rgb
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.path import Path

from course_lib.errors import CourseError, require
from course_lib.schedules.closed_forms import Case, megatron
from course_lib.schedules.closed_forms import gpipe_bubble as gpipe_bubble  # notebooks import it from here
from course_lib.schedules.ir import Kind
from course_lib.timeline import SIMULATED, Timeline, format_bytes

COLORS = {Kind.F: "#56B4E9", Kind.B: "#E69F00", Kind.I: "#D55E00", Kind.W: "#009E73"}
LABELS = {
    Kind.F: "F: forward",
    Kind.B: "B: backward (input + weight grad)",
    Kind.I: "I: backward, input grad",
    Kind.W: "W: backward, weight grad",
}
IDLE_COLOR = "#EEEEEE"  # the row behind the boxes: whatever shows through is idle time
SERIES_COLORS = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#D55E00", "#56B4E9", "#000000", "#F0E442"]


def chunks_of(tl: Timeline) -> dict[tuple[int, int], int]:
    """(device, stage) -> chunk: the stage's rank among the stages that device ran (0 = its first)."""
    stages: dict[int, set[int]] = {}
    for s in tl.spans:
        stages.setdefault(s.device, set()).add(s.action.stage)
    return {(d, stage): c for d, held in stages.items() for c, stage in enumerate(sorted(held))}


def shade(color: str, chunk: int, n_chunks: int) -> str:
    """`color` for a device's `chunk` (of `n_chunks`): the kind's own colour for its first stage, mixed
    towards white for later ones (half-way for the last, still well apart from the idle grey)."""
    light = 0.5 * chunk / (n_chunks - 1) if n_chunks > 1 else 0.0
    return to_hex([(1 - light) * x + light for x in to_rgb(color)])


def time_scale(seconds: float) -> tuple[float, str]:
    """(factor, unit) so that seconds * factor reads well: s, ms or µs."""
    if seconds >= 1.0 or seconds == 0:
        return 1.0, "s"
    if seconds >= 1e-3:
        return 1e3, "ms"
    return 1e6, "µs"


def _new_axes(ax: Axes | None, figsize: tuple[float, float]) -> Axes:
    if ax is not None:
        return ax
    import matplotlib.pyplot as plt  # only here: notebooks show pyplot figures inline

    _, ax = plt.subplots(figsize=figsize)
    return ax


def gantt_figsize(n_devices: int) -> tuple[float, float]:
    return 10.0, min(1.6 + 0.38 * n_devices, 14.0)


def plot_timeline(
    tl: Timeline, ax: Axes | None = None, show_transfers: bool = False, title: str | None = None,
    max_labels: int = 600, extent_s: float | None = None,
) -> Axes:  # fmt: skip
    """Gantt chart: a row per device (device 0 on top), a box per action coloured by kind.

    `extent_s` fixes the x axis to that many seconds (and picks its unit from it), so that charts
    drawn one above the other share one scale; by default the axis ends at this timeline's makespan.
    Micro-batch numbers are written inside boxes wide enough to hold them (at most `max_labels`);
    grey shows through where a device is idle. `show_transfers` draws each message as a thin line
    from sender (when it left) to receiver (when it arrived)."""
    ax = _new_axes(ax, gantt_figsize(tl.n_devices))
    t0 = tl.start
    extent = max(tl.makespan, extent_s or 0.0)
    factor, unit = time_scale(extent)
    span_x = max(extent * factor, 1e-12)
    height = 0.8

    # idle background: one band per device across the whole step
    ax.broken_barh([(0.0, span_x)], (-0.5, tl.n_devices), facecolors="white")
    bands = [_box(0.0, span_x, d, height) for d in range(tl.n_devices)]
    # (the white bar already set the data limits to the whole chart: the collections need not)
    ax.add_collection(PolyCollection(bands, facecolors=IDLE_COLOR, edgecolors="none"), autolim=False)

    # one compound path per colour (kind and chunk), all in one collection: a few paths to draw
    # however many boxes, where one path per box costs matplotlib a Python call each
    chunk = chunks_of(tl)
    n_chunks = max(chunk.values(), default=0) + 1  # stages per device (v)
    palette = {(k, c): shade(COLORS[k], c, n_chunks) for k in Kind for c in range(n_chunks)}
    colours = [palette[s.action.kind, chunk[s.device, s.action.stage]] for s in tl.spans]
    x0, x1, rows = _span_columns(tl, t0, factor)
    index: dict[str, int] = {}  # colour -> its path, in first-seen order
    codes = np.fromiter((index.setdefault(c, len(index)) for c in colours), dtype=np.intp, count=len(colours))
    faces = list(index)
    paths = [_boxes_path(x0[codes == i], x1[codes == i], rows[codes == i], height) for i in range(len(faces))]
    # white edges separate neighbouring boxes, but would swallow boxes only a few pixels wide
    fig = ax.figure
    px_per_x = ax.get_position().width * fig.get_figwidth() * fig.dpi / span_x
    shortest = float(np.min(x1 - x0, initial=np.inf)) * px_per_x if len(x0) else 0.0
    edge = 0.4 if shortest > 8 else 0.0
    boxes = PathCollection(paths, facecolors=faces, edgecolors="white", linewidths=edge)
    ax.add_collection(boxes, autolim=False)

    if show_transfers and tl.transfers:
        lines = [
            [((t.start - t0) * factor, t.src_device), ((t.end - t0) * factor, t.dst_device)]
            for t in tl.transfers
        ]
        ax.add_collection(LineCollection(lines, colors="#444444", linewidths=0.6, alpha=0.6), autolim=False)

    ax.set(xlim=(0, span_x), ylim=(tl.n_devices - 0.5, -0.5), xlabel=f"time ({unit})")  # device 0 on top
    ax.set(yticks=range(tl.n_devices), yticklabels=[f"device {d}" for d in range(tl.n_devices)])
    _label_boxes(ax, tl, (x0, x1, rows), px_per_x, height, max_labels)

    present = {s.action.kind for s in tl.spans}
    kinds = [k for k in (Kind.F, Kind.B, Kind.I, Kind.W) if k in present]
    handles = [Patch(facecolor=COLORS[k], label=LABELS[k]) for k in kinds]
    if n_chunks > 1:  # one swatch per chunk, in the forward's colour: which of its stages a device runs
        handles += [
            Patch(facecolor=palette[Kind.F, c], label=f"chunk {c}: a device's stage {c + 1} of {n_chunks}")
            for c in range(n_chunks)
        ]
    handles.append(Patch(facecolor=IDLE_COLOR, label="idle (bubble)"))
    if show_transfers and tl.transfers:
        handles.append(Patch(facecolor="#444444", label="transfer (send -> arrival)"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)

    heading = title if title is not None else _default_title(tl)
    caption = f"source: {tl.source} · bubble {tl.bubble_fraction:.1%} of device-time idle"
    ax.set_title(f"{heading}\n{caption}", fontsize=10)
    return ax


def _box(x0: float, x1: float, row: int, height: float) -> list[tuple[float, float]]:
    return [(x0, row - height / 2), (x1, row - height / 2), (x1, row + height / 2), (x0, row + height / 2)]


Columns = tuple[np.ndarray, np.ndarray, np.ndarray]  # per span: x start, x end, row


def _span_columns(tl: Timeline, t0: float, factor: float) -> Columns:
    """Every span's start and end on the chart's axis, and its row, as arrays (one pass each)."""
    n = len(tl.spans)
    x0 = (np.fromiter((s.start for s in tl.spans), dtype=float, count=n) - t0) * factor
    x1 = (np.fromiter((s.end for s in tl.spans), dtype=float, count=n) - t0) * factor
    rows = np.fromiter((s.device for s in tl.spans), dtype=float, count=n)
    return x0, x1, rows


_BOX_CODES = [Path.MOVETO, Path.LINETO, Path.LINETO, Path.LINETO, Path.CLOSEPOLY]


def _boxes_path(x0: np.ndarray, x1: np.ndarray, rows: np.ndarray, height: float) -> Path:
    """One path holding a closed rectangle per box (x0..x1, row +- height/2)."""
    lo, hi = rows - height / 2, rows + height / 2
    corners = np.stack(
        [np.stack(xy, axis=-1) for xy in ((x0, lo), (x1, lo), (x1, hi), (x0, hi), (x0, lo))], 1
    )
    return Path(corners.reshape(-1, 2), np.tile(np.array(_BOX_CODES, dtype=Path.code_type), len(x0)))


def _default_title(tl: Timeline) -> str:
    m = tl.n_microbatches
    name = tl.schedule_name or "schedule"
    return f"{name}: p={tl.n_devices}" + (f", m={m}" if m is not None else "")


def _label_boxes(
    ax: Axes, tl: Timeline, columns: Columns, px_per_x: float, height: float, max_labels: int
) -> None:
    """Write micro-batch numbers only into boxes wide (and tall) enough to hold them, earliest first."""
    fig = ax.figure
    row_px = ax.get_position().height * fig.get_figheight() * fig.dpi / max(tl.n_devices, 1) * height
    fontsize = 7.0
    char_px = 0.62 * fontsize * fig.dpi / 72  # average glyph width of a digit
    if row_px < 1.3 * fontsize * fig.dpi / 72:
        return
    x0, x1, rows = columns
    wide = np.flatnonzero((x1 - x0) * px_per_x >= char_px + 3)  # room for one digit at least
    placed = 0
    for i in wide[np.argsort(x0[wide], kind="stable")]:
        text = str(tl.spans[i].action.microbatch)
        if (x1[i] - x0[i]) * px_per_x < char_px * len(text) + 3:
            continue
        if placed >= max_labels:
            break
        ax.text(
            (x0[i] + x1[i]) / 2, rows[i], text, ha="center", va="center", fontsize=fontsize, color="black"
        )
        placed += 1


def save_timeline_png(tl: Timeline, path: str, show_transfers: bool = False, dpi: int = 100) -> str:
    """Render the Gantt chart straight to a PNG file (no pyplot, no display); returns the path."""
    fig = Figure(figsize=gantt_figsize(tl.n_devices), dpi=dpi)
    ax = fig.add_axes((0.1, 0.12, 0.62, 0.72))
    plot_timeline(tl, ax=ax, show_transfers=show_transfers)
    fig.savefig(path, dpi=dpi, pil_kwargs={"compress_level": 1})  # the same pixels; zlib's fastest level
    return path


def plot_bubble_vs_m(
    ps: Sequence[int] = (2, 4, 8), ms: Sequence[int] = tuple(range(1, 33)), schedule: str = "1f1b",
    virtual: int | None = None, convention: str = "gpipe", costs=None, ax: Axes | None = None,
) -> Axes:  # fmt: skip
    """Simulated bubble for several p over m (points), with the closed form drawn over them (lines).

    `convention` "gpipe" plots the idle share of the step, (p-1)/(m+p-1); "megatron" plots bubble
    time relative to ideal compute, (p-1)/m. The same simulations, two ways of dividing. `costs`: a
    device's share of the model, as everywhere (``simulator.simulate_named``)."""
    from course_lib.costs import StageCosts
    from course_lib.schedules.builders import SCHEDULES, resolve_name
    from course_lib.simulator import simulate_named

    require(
        convention in ("gpipe", "megatron"), f"convention must be 'gpipe' or 'megatron', got {convention!r}"
    )
    name = resolve_name(schedule)
    virtual = SCHEDULES[name].default_virtual if virtual is None else virtual  # V shapes take v = 2 only
    ax = _new_axes(ax, (8.0, 4.5))
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
    ax = _new_axes(ax, (7.0, 3.5))
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
    ax.set_title(f"{_default_title(tl)}: activations held per device\n{caption}", fontsize=10)
    return ax
