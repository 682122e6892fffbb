"""The Gantt chart of a Timeline: a row per device, a box per action, coloured by kind (and chunk).

``plot_timeline`` draws it on matplotlib Axes (notebooks, the dashboard), with matplotlib's own
ticks and legend; ``save_timeline_png`` writes it to a file and draws its ticks and colour key as
plain text, lines and boxes instead, in the same places (``gantt_artists``): the same picture
without matplotlib's tick and legend machinery, which cost half of the drawing time. What the
key says (``chart_key``) is decided in one place for both. Colours are the Okabe-Ito palette
(distinct for colour-blind readers); where a device holds several stages each of its chunks gets
its own shade of the kind's colour, lighter for later stages, as in Megatron-LM's interleaving
figure (Narayanan et al. 2021, arXiv 2104.04473 Fig. 4). ``course_lib.plots`` re-exports all this.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from matplotlib.axes import Axes
from matplotlib.collections import LineCollection, PathCollection, PolyCollection
from matplotlib.colors import to_hex, to_rgb
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.path import Path

from course_lib import gantt_artists
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
    axes' ticks and its key are plain artists here (``gantt_artists``): the figure is never handed
    out, so nothing can ask it for ticks or a Legend."""
    fig = Figure(figsize=gantt_figsize(tl.n_devices), dpi=dpi)
    ax = fig.add_axes((0.1, 0.12, 0.62, 0.72))
    key = _draw_chart(tl, ax, show_transfers, None, 600, None)
    gantt_artists.draw_x_axis(ax)
    gantt_artists.draw_key(ax, key.rows, key.entries, _KEY_FONTSIZE)
    ax.set_title(key.title, fontsize=10)
    fig.savefig(path, dpi=dpi, pil_kwargs={"compress_level": 1})  # the same pixels; zlib's fastest level
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
    heading = title if title is not None else _default_title(tl)
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


def _default_title(tl: Timeline) -> str:
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
