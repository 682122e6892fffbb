"""The occupancy chart of a Timeline too dense for a Gantt chart: each device's busy stretches as bars.

A Gantt chart draws one box per action. A real layout has too many for that: lesson 09's planner picks
p = 16 stages with v = 5 chunks each, so 32 micro-batches are 320 actions a device, boxes a pixel or two
wide, and the chart turns into hairlines. What a reader wants from it there is where each device waits:
the fill, the drain and any gap between. So this chart joins the actions a device runs back to back (a
gap narrower than a pixel cannot be seen anyway) into one bar, and lets the idle time show through;
the Gantt chart (course_lib/charts/gantt.py) stays for timelines whose boxes a reader can tell apart
(``dense``).

    from course_lib.charts.occupancy import OccupancyPNG, dense
    png = OccupancyPNG().png(tl, "t=8 p=16 ... (simulated)") if dense(tl) else GanttPNG().png(tl)
"""

from __future__ import annotations

from matplotlib.colors import to_hex

from course_lib.charts.gantt import IDLE_COLOR, GanttPNG, time_scale
from course_lib.shelf.timeline import Timeline

BUSY_COLOR = "#0072B2"  # Okabe-Ito blue: any work, forward or backward
LEGIBLE_ACTIONS = 96  # actions per device a Gantt chart 800 pixels wide still draws as boxes (8 px each)
PIXELS = 800  # about the chart's width in pixels: gaps under one of these are joined


def dense(tl: Timeline) -> bool:
    """More actions on some device than a Gantt chart can draw as boxes a reader tells apart."""
    return len(tl.spans) > LEGIBLE_ACTIONS * tl.n_devices


def busy_stretches(tl: Timeline, join_gap_s: float | None = None) -> list[list[tuple[float, float]]]:
    """Per device, its (start, end) stretches of back-to-back work: actions less than `join_gap_s`
    apart joined (default: one pixel of an 800-pixel chart of the makespan)."""
    gap = tl.makespan / PIXELS if join_gap_s is None else join_gap_s
    rows: list[list[tuple[float, float]]] = [[] for _ in range(tl.n_devices)]
    for device in range(tl.n_devices):
        row = rows[device]
        for span in tl.spans_of(device):
            if row and span.start - row[-1][1] <= gap:
                row[-1] = (row[-1][0], max(row[-1][1], span.end))
            else:
                row.append((span.start, span.end))
    return rows


class OccupancyPNG(GanttPNG):
    """Draws occupancy charts as PNG bytes on one Figure per height (never pyplot), as GanttPNG draws
    Gantt charts; after each chart ``title`` and ``key`` hold its title and colour key."""

    def png(self, tl: Timeline, title: str) -> bytes:  # type: ignore[override]  (a title is required)
        ax = self._axes(tl)
        factor, unit = time_scale(tl.makespan)
        t0, end = tl.start, tl.makespan * factor
        for device, stretches in enumerate(busy_stretches(tl)):
            ax.broken_barh([(0.0, end)], (device - 0.4, 0.8), facecolors=IDLE_COLOR, linewidth=0)
            bars = [((a - t0) * factor, (b - a) * factor) for a, b in stretches]
            ax.broken_barh(bars, (device - 0.4, 0.8), facecolors=BUSY_COLOR, linewidth=0)
        ax.set(xlim=(0.0, end), ylim=(tl.n_devices - 0.5, -0.5), xlabel=f"time ({unit})")
        ax.set_yticks(range(tl.n_devices), [f"device {d}" for d in range(tl.n_devices)])
        ax.grid(False)
        self.title = f"{title}\nsource: {tl.source} · bubble {tl.bubble_fraction:.1%} of device-time idle"
        self.key = [
            (to_hex(BUSY_COLOR), "busy: forwards and backwards back to back (too many to draw one by one)"),
            (IDLE_COLOR, "idle (bubble)"),
        ]
        return self._png_bytes(ax)
