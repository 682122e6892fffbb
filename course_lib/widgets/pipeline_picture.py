"""A picture of a pipeline, for before the first Gantt chart: what the boxes in those charts are.

    from course_lib.widgets.pipeline_picture import pipeline_picture
    fig = pipeline_picture(p=4)      # stages as workers, then the same step as a Gantt chart

Top: p workers (devices), each holding one stage (a slice of the model's layer list), handing one
micro-batch's activations forward and the gradients of those activations back. Bottom: that same
step as a Gantt chart, simulated with equal stages (forward 1, backward 2 time units), its boxes
and the grey idle time labelled, so that every later Gantt chart reads at a glance.
"""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.patches import FancyBboxPatch

from course_lib.charts.gantt import COLORS, IDLE_COLOR, new_figure, plot_timeline
from course_lib.shelf.first_schedules import build_schedule
from course_lib.shelf.model import uniform
from course_lib.shelf.schedule import Kind
from course_lib.shelf.simulator import StageCosts, simulate

N_LAYERS = 82  # the course model's list: embedding, 80 blocks, head


def pipeline_picture(p: int = 4, n_layers: int = N_LAYERS) -> Figure:
    """Workers handing activations forward and gradients back (top), the same step as a Gantt chart
    with its boxes explained (bottom). A pyplot figure in a notebook, so that it shows inline; a bare
    Figure where nothing shows figures (charts.gantt.new_figure), so that pyplot keeps none."""
    fig, (top, bottom) = new_figure((10, 5.6), 2, 1, gridspec_kw={"height_ratios": [1, 1.25]})
    _draw_workers(top, p, n_layers)
    tl = simulate(build_schedule("naive", p, 1), StageCosts.fused(f=1.0, b=2.0))
    plot_timeline(tl, ax=bottom, title="the same step as a Gantt chart (one micro-batch, naive schedule)")
    bottom.set_xlabel("time (units: a stage's forward takes 1, its backward 2)")
    first_f, last_b = tl.spans_of(0)[0], tl.spans_of(0)[-1]
    notes = [  # (points at, text, where the text goes: on grey, clear of the boxes)
        (
            (first_f.start + first_f.end) / 2,
            "a box: device 0 runs F,\nthe forward of micro-batch 0",
            (2.3, 0.75),
        ),
        ((last_b.start + last_b.end) / 2, "B: that micro-batch's\nbackward on device 0", (7.6, 3.0)),
        (tl.makespan * 0.45, "grey: device 0 idle\n(the bubble)", (4.3, 1.8)),
    ]
    for x, text, where in notes:
        bottom.annotate(
            text, (x, 0), where, fontsize=8, arrowprops={"arrowstyle": "->", "lw": 0.8},
            bbox={"boxstyle": "round,pad=0.2", "facecolor": "white", "edgecolor": "none", "alpha": 0.9},
        )  # fmt: skip
    fig.tight_layout()
    return fig


def _draw_workers(ax, p: int, n_layers: int) -> None:
    """p boxes in a row, arrows between neighbours: activations forward, gradients back."""
    part = uniform(n_layers, p)
    width, gap = 1.0, 0.6
    for d, (start, end) in enumerate(part.bounds):
        x = d * (width + gap)
        ax.add_patch(_rounded(x, width))
        ax.text(x + width / 2, 0.62, f"device {d}", ha="center", fontsize=10, weight="bold")
        ax.text(
            x + width / 2, 0.38, f"stage {d}\nlayers {start}-{end - 1}", ha="center", va="center", fontsize=8
        )
        if d + 1 < p:
            x1 = x + width
            ax.annotate(
                "", (x1 + gap, 0.62), (x1, 0.62), arrowprops={"arrowstyle": "->", "color": COLORS[Kind.F]}
            )
            ax.annotate(
                "", (x1, 0.2), (x1 + gap, 0.2), arrowprops={"arrowstyle": "->", "color": COLORS[Kind.B]}
            )
    right = p * (width + gap) - gap
    ax.text(right / 2, 0.93, "activations of a micro-batch go forward (F) →", ha="center", color="#0072B2")
    ax.text(
        right / 2, -0.12, "← the gradient of those activations comes back (B)", ha="center", color="#B35F00"
    )
    ax.text(right + 0.1, 0.4, "loss on\nthe last\nstage", fontsize=8, va="center")
    ax.set(xlim=(-0.2, right + 0.7), ylim=(-0.25, 1.05))
    ax.set_title(
        f"a pipeline of p={p} devices: each holds one stage, a slice of the model's {n_layers} layers"
    )
    ax.axis("off")


def _rounded(x: float, width: float) -> FancyBboxPatch:
    return FancyBboxPatch(
        (x, 0.1), width, 0.75, boxstyle="round,pad=0.02", facecolor=IDLE_COLOR, edgecolor="#444444"
    )
