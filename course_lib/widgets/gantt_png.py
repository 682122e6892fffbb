"""The dashboard's Gantt chart as a PNG, and its title and colour key as one line of HTML under it.

    from course_lib.widgets.gantt_png import GanttPNG, key_html, swatches_html
    gantt = GanttPNG()
    png = gantt.png(timeline)          # bytes for an ipywidgets Image
    html = key_html(timeline)          # "chart: 1f1b: p=4, m=8, source: simulated" and the colours
    gantt.title, swatches_html(gantt.key)  # the title and key plot_timeline made (chunks included)

Title and legend go under the picture as HTML instead of being drawn: a third of the drawing time
saved, and a key that wraps with the page instead of being clipped. One Figure per chart height is
kept and cleared (building a new one costs more than clearing it).
"""

from __future__ import annotations

import html
import io

from matplotlib.colors import to_hex
from matplotlib.figure import Figure

from course_lib.plots import COLORS, IDLE_COLOR, LABELS, gantt_figsize, plot_timeline
from course_lib.shelf.schedule import Kind
from course_lib.shelf.timeline import Timeline

LABELLED_ACTIONS = 64  # micro-batch numbers in the boxes up to this many actions (each costs ~0.5 ms)
DPI = 80


class GanttPNG:
    """Draws Timelines as PNGs on Figures it keeps, one per chart height (never pyplot). After each
    chart, ``title`` and ``key`` hold the title and the colour key that plot_timeline made for it.
    `max_rows`: a chart is at most that many devices tall (beyond, its rows get thinner)."""

    def __init__(self, max_rows: int | None = None) -> None:
        self.max_rows = max_rows
        self._figure_of_size: dict[tuple[float, float], Figure] = {}
        self.title = ""
        self.key: list[tuple[str, str]] = []  # (colour, label) of each legend entry

    def png(self, tl: Timeline, title: str | None = None) -> bytes:
        rows = tl.n_devices if self.max_rows is None else min(tl.n_devices, self.max_rows)
        size = gantt_figsize(rows)
        if size not in self._figure_of_size:
            self._figure_of_size[size] = Figure(figsize=size, dpi=DPI)
        fig = self._figure_of_size[size]
        fig.clear()
        ax = fig.add_axes((0.1, 0.17, 0.87, 0.78))
        labels = len(tl.spans) if len(tl.spans) <= LABELLED_ACTIONS else 0  # all or none, never half a chart
        plot_timeline(tl, ax=ax, title=title, max_labels=labels)
        legend = ax.get_legend()
        entries = zip(legend.legend_handles, legend.get_texts(), strict=True)
        self.key = [(to_hex(patch.get_facecolor()), text.get_text()) for patch, text in entries]
        self.title = ax.get_title()
        legend.remove()
        ax.set_title("")
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", pil_kwargs={"compress_level": 1})  # fast; size barely grows
        return buffer.getvalue()


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
