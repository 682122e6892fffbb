"""The Gantt chart of a Timeline: a row per device, a box per action, coloured by kind (and chunk).

One idea, read whole (past 300 lines on purpose): the chart, in the three places it is drawn.

- ``plot_timeline`` draws it on matplotlib Axes (notebooks), with matplotlib's own ticks and legend.
- ``save_timeline_png`` writes it to a file and draws its ticks and colour key as plain text, lines
  and boxes instead, in the same places (``draw_x_axis``, ``draw_key``): the same picture without
  matplotlib's tick and legend machinery, which cost half of the drawing time.
- ``GanttPNG`` draws it as PNG bytes for the dashboard, with its title and key as HTML under it
  (``key_html``, ``swatches_html``): a third of the drawing time saved, and a key that wraps with
  the page instead of being clipped.

What the key says (``chart_key``) is decided in one place for all three. Colours are the Okabe-Ito
palette (distinct for colour-blind readers); where a device holds several stages each of its chunks
gets its own shade of the kind's colour, lighter for later stages, as in Megatron-LM's interleaving
figure (Narayanan et al. 2021, arXiv 2104.04473 Fig. 4).

Try it::

    from course_lib.shelf.first_schedules import build_schedule
    from course_lib.shelf.simulator import simulate
    from course_lib.charts.gantt import GanttPNG, plot_timeline, save_timeline_png
    tl = simulate(build_schedule("1f1b", 4, 8))
    plot_timeline(tl)                    # in a notebook
    save_timeline_png(tl, "1f1b.png")    # anywhere (no display needed)
    GanttPNG().png(tl)                   # bytes for an ipywidgets Image
"""

from __future__ import annotations

import html
import io
import os
from collections.abc import Sequence
from typing import NamedTuple

import matplotlib as mpl
import numpy as np
from matplotlib.axes import Axes
from matplotlib.collections import LineCollection, PathCollection, PolyCollection
from matplotlib.colors import to_hex, to_rgb
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.lines import Line2D
from matplotlib.markers import TICKDOWN, TICKLEFT
from matplotlib.patches import Patch
from matplotlib.path import Path
from matplotlib.transforms import Affine2D, ScaledTranslation

from course_lib.output_files import write_whole
from course_lib.shelf.errors import real, require, shown, whole
from course_lib.shelf.schedule import Kind
from course_lib.shelf.timeline import Timeline

COLORS = {Kind.F: "#56B4E9", Kind.B: "#E69F00", Kind.I: "#D55E00", Kind.W: "#009E73"}
LABELS = {
    Kind.F: "F: forward",
    Kind.B: "B: backward (input + weight grad)",
    Kind.I: "I: backward, input grad",
    Kind.W: "W: backward, weight grad",
}
IDLE_COLOR = "#EEEEEE"  # the row behind the boxes: whatever shows through is idle time
_KINDS = (Kind.F, Kind.B, Kind.I, Kind.W)
_KIND_CODE = {kind: code for code, kind in enumerate(_KINDS)}
_KEY_FONTSIZE = 8.0  # points
_HEIGHT = 0.8  # a box's height, in rows


class ChartKey(NamedTuple):
    """What a chart's labels say: its title, each row's label, and its colour key (colour, label)."""

    title: str
    rows: list[str]
    entries: list[tuple[str, str]]


def chunks_of(tl: Timeline) -> dict[tuple[int, int], int]:
    """(device, stage) -> chunk: the stage's rank among the stages that device ran (0 = its first)."""
    stages: dict[int, set[int]] = {}
    for d, s in set(zip([s.device for s in tl.spans], [s.action.stage for s in tl.spans], strict=True)):
        stages.setdefault(d, set()).add(s)
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


def new_axes(ax: Axes | None, figsize: tuple[float, float]) -> Axes:
    """`ax`, or new axes on a figure of `figsize`: a pyplot figure where something shows it (a notebook's
    inline backend, which also closes it after the cell, or a window), else a bare Figure that pyplot
    never holds, so that a script drawing 50 charts does not keep 50 figures alive (save one with
    ``ax.figure.savefig``)."""
    return ax if ax is not None else new_figure(figsize)[1]


def new_figure(
    figsize: tuple[float, float], nrows: int = 1, ncols: int = 1, **subplots: object
) -> tuple[Figure, object]:
    """(figure, axes) as ``plt.subplots`` makes them, under :func:`new_axes`'s rule: pyplot's where
    something shows figures, a bare Figure where nothing does (a script, the test suite)."""
    if mpl.get_backend().lower() in _NOTHING_SHOWS:
        fig = Figure(figsize=figsize)
        return fig, fig.subplots(nrows, ncols, **subplots)
    import matplotlib.pyplot as plt  # only here: notebooks show pyplot figures inline

    return plt.subplots(nrows, ncols, figsize=figsize, **subplots)


_NOTHING_SHOWS = {"agg", "cairo", "pdf", "pgf", "ps", "svg", "template"}  # matplotlib's file-only backends


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
    require(isinstance(tl, Timeline), f"tl must be a Timeline (simulate's or a run's), got {shown(tl)}")
    max_labels = whole("max_labels", max_labels, low=0)
    extent_s = None if extent_s is None else real("extent_s", extent_s)  # 0: a step of no time
    ax = new_axes(ax, gantt_figsize(tl.n_devices))
    key = _draw_chart(tl, ax, show_transfers, title, max_labels, extent_s)
    ax.set(yticks=range(tl.n_devices), yticklabels=key.rows)
    handles = [Patch(facecolor=color, label=label) for color, label in key.entries]
    ax.legend(
        handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=_KEY_FONTSIZE, frameon=False
    )
    ax.set_title(key.title, fontsize=10)
    return ax


def save_timeline_png(tl: Timeline, path: str, show_transfers: bool = False, dpi: int = 100) -> str:
    """Render the Gantt chart straight to a PNG file (no pyplot, no display); returns the path. Its
    axes' ticks and its key are plain artists here (``draw_x_axis``, ``draw_key`` below): the figure
    is never handed out, so nothing can ask it for ticks or a Legend."""
    fig = Figure(figsize=gantt_figsize(tl.n_devices), dpi=dpi)
    ax = fig.add_axes((0.1, 0.12, 0.62, 0.72))
    key = _draw_chart(tl, ax, show_transfers, None, 600, None)
    draw_x_axis(ax)
    draw_key(ax, key.rows, key.entries, _KEY_FONTSIZE)
    ax.set_title(key.title, fontsize=10)
    kind = os.path.splitext(path)[1][1:].lower() or "png"
    options = {"pil_kwargs": {"compress_level": 1}} if kind == "png" else {}  # zlib's fastest: same pixels
    # whole or not at all: a full disk leaves the old chart, not a 0-byte one
    write_whole(path, lambda file: fig.savefig(file, format=kind, dpi=dpi, **options))
    return path


def chart_key(tl: Timeline, n_chunks: int, show_transfers: bool, title: str | None) -> ChartKey:
    """The chart's title (with its source and bubble), row labels and colour key."""
    present = {s.action.kind for s in tl.spans}
    entries = [(COLORS[k], LABELS[k]) for k in _KINDS if k in present]
    if n_chunks > 1:  # one swatch per chunk, in the forward's colour: which of its stages a device runs
        entries += [
            (shade(COLORS[Kind.F], c, n_chunks), f"chunk {c}: a device's stage {c + 1} of {n_chunks}")
            for c in range(n_chunks)
        ]
    entries.append((IDLE_COLOR, "idle (bubble)"))
    if show_transfers and tl.transfers:
        entries.append(("#444444", "transfer (send -> arrival)"))
    heading = title if title is not None else chart_title(tl)
    caption = f"source: {tl.source} · bubble {tl.bubble_fraction:.1%} of device-time idle"
    return ChartKey(f"{heading}\n{caption}", [f"device {d}" for d in range(tl.n_devices)], entries)


def _draw_chart(
    tl: Timeline, ax: Axes, show_transfers: bool, title: str | None, max_labels: int, extent_s: float | None
) -> ChartKey:
    """Everything but the row labels, the key and the title (which the two callers draw their own
    ways); returns what those say."""
    t0 = tl.start
    extent = max(tl.makespan, extent_s or 0.0)
    factor, unit = time_scale(extent)
    span_x = max(extent * factor, 1e-12)
    # idle background: one band per device across the whole step
    ax.broken_barh([(0.0, span_x)], (-0.5, tl.n_devices), facecolors="white")
    bands = [_box(0.0, span_x, d) for d in range(tl.n_devices)]
    # (the white bar already set the data limits to the whole chart: the collections need not)
    ax.add_collection(PolyCollection(bands, facecolors=IDLE_COLOR, edgecolors="none"), autolim=False)
    columns, codes, n_chunks = _span_columns(tl, t0, factor)
    x0, x1, rows = columns
    # one compound path per colour (kind and chunk), all in one collection: a few paths to draw
    # however many boxes, where one path per box costs matplotlib a Python call each
    by_colour = np.argsort(codes, kind="stable")
    present, first = np.unique(codes[by_colour], return_index=True)
    groups = np.split(by_colour, first[1:]) if len(first) else []
    seen = np.argsort(by_colour[first], kind="stable")  # paths in the order their colours first appear
    faces = [shade(COLORS[_KINDS[c // n_chunks]], int(c % n_chunks), n_chunks) for c in present[seen]]
    paths = [_boxes_path(x0[groups[g]], x1[groups[g]], rows[groups[g]]) for g in seen]
    # white edges separate neighbouring boxes, but would swallow boxes only a few pixels wide
    fig = ax.figure
    px_per_x = ax.get_position().width * fig.get_figwidth() * fig.dpi / span_x
    shortest = float(np.min(x1 - x0, initial=np.inf)) * px_per_x if len(x0) else 0.0
    edge = 0.4 if shortest > 8 else 0.0
    ax.add_collection(
        PathCollection(paths, facecolors=faces, edgecolors="white", linewidths=edge), autolim=False
    )
    if show_transfers and tl.transfers:
        lines = [
            [((t.start - t0) * factor, t.src_device), ((t.end - t0) * factor, t.dst_device)]
            for t in tl.transfers
        ]
        ax.add_collection(LineCollection(lines, colors="#444444", linewidths=0.6, alpha=0.6), autolim=False)
    ax.set(xlim=(0, span_x), ylim=(tl.n_devices - 0.5, -0.5), xlabel=f"time ({unit})")  # device 0 on top
    _label_boxes(ax, tl, columns, px_per_x, max_labels)
    return chart_key(tl, n_chunks, show_transfers, title)


def _box(x0: float, x1: float, row: int) -> list[tuple[float, float]]:
    lo, hi = row - _HEIGHT / 2, row + _HEIGHT / 2
    return [(x0, lo), (x1, lo), (x1, hi), (x0, hi)]


Columns = tuple[np.ndarray, np.ndarray, np.ndarray]  # per span: x start, x end, row


def _span_columns(tl: Timeline, t0: float, factor: float) -> tuple[Columns, np.ndarray, int]:
    """Every span's start and end on the chart's axis and its row, as arrays; its colour's code
    (kind * n_chunks + chunk); and n_chunks, the stages per device (v)."""
    spans = tl.spans
    chunk = chunks_of(tl)
    n_chunks = max(chunk.values(), default=0) + 1
    x0 = (np.array([s.start for s in spans], dtype=float) - t0) * factor
    x1 = (np.array([s.end for s in spans], dtype=float) - t0) * factor
    devices = [s.device for s in spans]
    kinds = [_KIND_CODE[s.action.kind] for s in spans]
    chunks = list(map(chunk.__getitem__, zip(devices, [s.action.stage for s in spans], strict=True)))
    codes = np.array(kinds, dtype=np.intp) * n_chunks + np.array(chunks, dtype=np.intp)
    return (x0, x1, np.array(devices, dtype=float)), codes, n_chunks


_BOX_CODES = [Path.MOVETO, Path.LINETO, Path.LINETO, Path.LINETO, Path.CLOSEPOLY]


def _boxes_path(x0: np.ndarray, x1: np.ndarray, rows: np.ndarray) -> Path:
    """One path holding a closed rectangle per box (x0..x1, row +- _HEIGHT/2)."""
    lo, hi = rows - _HEIGHT / 2, rows + _HEIGHT / 2
    corners = np.stack(
        [np.stack(xy, axis=-1) for xy in ((x0, lo), (x1, lo), (x1, hi), (x0, hi), (x0, lo))], 1
    )
    return Path(corners.reshape(-1, 2), np.tile(np.array(_BOX_CODES, dtype=Path.code_type), len(x0)))


def chart_title(tl: Timeline) -> str:
    m = tl.n_microbatches
    name = tl.schedule_name or "schedule"
    return f"{name}: p={tl.n_devices}" + (f", m={m}" if m is not None else "")


def _label_boxes(ax: Axes, tl: Timeline, columns: Columns, px_per_x: float, max_labels: int) -> None:
    """Write micro-batch numbers only into boxes wide (and tall) enough to hold them, earliest first."""
    fig = ax.figure
    row_px = ax.get_position().height * fig.get_figheight() * fig.dpi / max(tl.n_devices, 1) * _HEIGHT
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


# Ticks and a colour key as plain artists, where matplotlib's axes and legend would put theirs.
# A Tick is five artists made anew for every figure, and a Legend lays out its entries several
# times; together they cost half of a Gantt chart's drawing time. Only for a figure nobody else
# gets: these marks do not follow later changes of the axes' limits. Sizes and paddings come from
# rcParams, as matplotlib's do; a test checks that the texts land within a pixel of matplotlib's.


def draw_x_axis(ax: Axes) -> None:
    """The x axis's ticks, their labels and the axis label, as matplotlib would place them for the
    axes' present limits (its own locator and formatter choose them); kept as they are if the
    formatter wants an offset or a multiplier (1e6 at the axis' end), which this does not draw."""
    rc, axis = mpl.rcParams, ax.xaxis
    locs = axis.get_major_locator()()
    labels = axis.get_major_formatter().format_ticks(locs)
    if axis.get_major_formatter().get_offset() or rc["xtick.direction"] != "out":
        return
    lo, hi = sorted(ax.get_xlim())
    close = 1e-10 * (hi - lo)  # matplotlib's tolerance for a tick at the very end of the axis
    shown = [(x, label) for x, label in zip(locs, labels, strict=True) if lo - close <= x <= hi + close]
    title = ax.get_xlabel()
    ax.set_xticks([])
    ax.set_xlabel("")
    size, pad = rc["xtick.major.size"], rc["xtick.major.pad"]
    width, colour = rc["xtick.major.width"], rc["xtick.color"]
    marks = Line2D([x for x, _ in shown], [0] * len(shown), transform=ax.get_xaxis_transform("tick1"),
                   linestyle="none", marker=TICKDOWN, markersize=size, markeredgewidth=width, color=colour,
                   clip_on=False)  # fmt: skip
    ax.add_artist(marks)
    text_at, va, ha = ax.get_xaxis_text1_transform(pad + size)
    colour = colour if rc["xtick.labelcolor"] == "inherit" else rc["xtick.labelcolor"]
    for x, label in shown:
        ax.text(x, 0, label, transform=text_at, va=va, ha=ha, fontsize=rc["xtick.labelsize"], color=colour,
                clip_on=False)  # fmt: skip
    # the axis label hangs below the tick labels (a text's box is one font size tall) by labelpad
    below = pad + size + FontProperties(size=rc["xtick.labelsize"]).get_size_in_points() + rc["axes.labelpad"]
    at = ax.transAxes + ScaledTranslation(0, -below / 72, ax.figure.dpi_scale_trans)
    ax.text(0.5, 0, title, transform=at, va="top", ha="center", fontsize=rc["axes.labelsize"],
            color=rc["axes.labelcolor"], fontweight=rc["axes.labelweight"], clip_on=False)  # fmt: skip


def draw_key(ax: Axes, rows: Sequence[str], entries: Sequence[tuple[str, str]], fontsize: float) -> None:
    """A label per row (row r at y = r) with its tick mark, and the colour key (colour, label) right
    of the axes, where ``legend(loc="upper left", bbox_to_anchor=(1, 1), frameon=False)`` puts it
    (its paddings, in font sizes, from rcParams; a text's ascent and height as DejaVu Sans has them)."""
    rc, fig = mpl.rcParams, ax.figure
    ax.set_yticks([])
    size, pad = rc["ytick.major.size"], rc["ytick.major.pad"]
    at = range(len(rows))
    marks = Line2D([0] * len(rows), at, transform=ax.get_yaxis_transform("tick1"), linestyle="none",
                   marker=TICKLEFT, markersize=size, markeredgewidth=rc["ytick.major.width"],
                   color=rc["ytick.color"], clip_on=False)  # fmt: skip
    ax.add_artist(marks)
    text_at, va, ha = ax.get_yaxis_text1_transform(pad + size)
    colour = rc["ytick.color"] if rc["ytick.labelcolor"] == "inherit" else rc["ytick.labelcolor"]
    for row, label in zip(at, rows, strict=True):
        ax.text(0, row, label, transform=text_at, va=va, ha=ha, fontsize=rc["ytick.labelsize"], color=colour,
                clip_on=False)  # fmt: skip
    fs = fontsize  # the key, in points from the axes' top right corner (y up)
    points = Affine2D().scale(1 / 72) + fig.dpi_scale_trans + ScaledTranslation(1.0, 1.0, ax.transAxes)
    left = (rc["legend.borderaxespad"] + rc["legend.borderpad"]) * fs
    top = -left - 0.81 * fs  # the first row's baseline: below the top padding by the text's ascent
    pitch = (1.05 + rc["legend.labelspacing"]) * fs  # a row's text height, then the spacing
    width, height = rc["legend.handlelength"] * fs, rc["legend.handleheight"] * fs
    swatches = [_swatch(left, top - i * pitch, width, height) for i in range(len(entries))]
    faces = [color for color, _ in entries]
    ax.add_artist(
        PolyCollection(swatches, facecolors=faces, edgecolors="none", transform=points, clip_on=False)
    )
    text_x = left + width + rc["legend.handletextpad"] * fs
    for i, (_, label) in enumerate(entries):
        ax.text(text_x, top - i * pitch, label, transform=points, va="baseline", ha="left", fontsize=fs,
                clip_on=False)  # fmt: skip


def _swatch(x: float, baseline: float, width: float, height: float) -> list[tuple[float, float]]:
    return [(x, baseline), (x + width, baseline), (x + width, baseline + height), (x, baseline + height)]


# The dashboard's chart: PNG bytes, its title and key as HTML under it.

LABELLED_ACTIONS = 64  # micro-batch numbers in the boxes up to this many actions (each costs ~0.5 ms)
DASHBOARD_DPI = 80  # the dashboard's PNGs; save_timeline_png takes its own dpi


class GanttPNG:
    """Draws Timelines as PNGs on Figures it keeps, one per chart height (never pyplot). After each
    chart, ``title`` and ``key`` hold the title and the colour key that plot_timeline made for it.
    `max_rows`: a chart is at most that many devices tall (beyond, its rows get thinner)."""

    def __init__(self, max_rows: int | None = None) -> None:
        self.max_rows = max_rows
        self._figure_of_size: dict[tuple[float, float], Figure] = {}
        self.title = ""
        self.key: list[tuple[str, str]] = []  # (colour, label) of each legend entry

    def _axes(self, tl: Timeline) -> Axes:
        """Fresh axes on the kept Figure of `tl`'s chart height (made the first time that height comes)."""
        rows = tl.n_devices if self.max_rows is None else min(tl.n_devices, self.max_rows)
        size = gantt_figsize(rows)
        if size not in self._figure_of_size:
            self._figure_of_size[size] = Figure(figsize=size, dpi=DASHBOARD_DPI)
        fig = self._figure_of_size[size]
        fig.clear()
        return fig.add_axes((0.1, 0.17, 0.87, 0.78))

    @staticmethod
    def _png_bytes(ax: Axes) -> bytes:
        buffer = io.BytesIO()
        ax.figure.savefig(buffer, format="png", pil_kwargs={"compress_level": 1})  # fast; size barely grows
        return buffer.getvalue()

    def png(self, tl: Timeline, title: str | None = None) -> bytes:
        ax = self._axes(tl)
        labels = len(tl.spans) if len(tl.spans) <= LABELLED_ACTIONS else 0  # all or none, never half a chart
        plot_timeline(tl, ax=ax, title=title, max_labels=labels)
        legend = ax.get_legend()
        entries = zip(legend.legend_handles, legend.get_texts(), strict=True)
        self.key = [(to_hex(patch.get_facecolor()), text.get_text()) for patch, text in entries]
        self.title = ax.get_title()
        legend.remove()
        ax.set_title("")
        return self._png_bytes(ax)


def swatches_html(entries: list[tuple[str, str]]) -> str:
    """A colour key as HTML: a small square of each colour, then its label; wraps between entries."""
    return " ".join(
        f"<span style='white-space:nowrap'><span style='background:{color}; border:1px solid #999; "
        f"display:inline-block; width:0.9em; height:0.9em'></span> {html.escape(label)}</span>"
        for color, label in entries
    )


def key_html(tl: Timeline) -> str:
    """The chart's title and colour key, as one line of HTML under the figures."""
    kinds = [k for k in (Kind.F, Kind.B, Kind.I, Kind.W) if any(s.action.kind is k for s in tl.spans)]
    key = swatches_html([(COLORS[k], LABELS[k]) for k in kinds] + [(IDLE_COLOR, "idle (bubble)")])
    name = tl.schedule_name or "schedule"
    what = f"{name}: p={tl.n_devices}" + (f", m={tl.n_microbatches}" if tl.n_microbatches is not None else "")
    return f"<div>chart: {html.escape(what)}, source: {tl.source} &nbsp; {key}</div>"
