"""Ticks and a colour key as plain artists, where matplotlib's axes and legend would put theirs.

``plot_gantt.save_timeline_png`` draws with these instead of matplotlib's tick and legend machinery:
a Tick is five artists made anew for every figure, and a Legend lays out its entries several
times; together they cost half of a Gantt chart's drawing time. Only for a figure nobody else gets:
these marks do not follow later changes of the axes' limits. Sizes and paddings come from
rcParams, as matplotlib's do; a test checks that the texts land within a pixel of matplotlib's.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib as mpl
from matplotlib.axes import Axes
from matplotlib.collections import PolyCollection
from matplotlib.font_manager import FontProperties
from matplotlib.lines import Line2D
from matplotlib.markers import TICKDOWN, TICKLEFT
from matplotlib.transforms import Affine2D, ScaledTranslation


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
