"""An ipywidgets planner: pick a model, a number of GPUs and a global batch; see the ranked layouts and
the chosen one's simulated Gantt chart.

Every change re-plans (well under a second for the presets on a few hundred GPUs) and redraws, once
per change (``bench/bench_widgets.py`` times it). A request no layout can meet shows the reason in words
beside the last chart drawn (which says the layout it shows), never a traceback or an empty image.
The table's rows are ranked by step time; "row" names a row of it (never "rank", which in the
course is a process of a distributed run).

Try it, in a notebook cell::

    from course_lib.widgets.planner import planner_widget
    box = planner_widget("megatron-145b", "a100-selene", gpus=64, global_batch=64)
    box                         # the widget box
    box.gpus_dropdown.value = 128
    box.choice_dropdown.value = 2       # the chart of the table's row 2 (the third fastest layout)
    print(box.table_text)       # the ranked table shown under the controls
"""

from __future__ import annotations

import html

import ipywidgets as widgets

from course_lib.charts.gantt import GanttPNG, swatches_html
from course_lib.charts.occupancy import OccupancyPNG, dense
from course_lib.planner import MODELS, cluster, plan
from course_lib.planner.enumerate import Plan, Planned
from course_lib.planner.step_time import pipeline_timeline, played_microbatches
from course_lib.shelf.errors import require, whole
from course_lib.shelf.timeline import Timeline
from course_lib.widgets.controls import WRAP_AT_SPACES, Shown

GPU_CHOICES = (8, 16, 32, 64, 128, 256, 512, 1024, 1536, 2048, 3072)
GIB = 2**30  # memory in GiB, as everywhere in the course
BATCH_CHOICES = (16, 32, 64, 128, 256, 512, 1024, 1536, 2048, 2304, 3072)


class PlannerWidget(Shown, widgets.VBox):
    """Controls are attributes (model_dropdown, gpus_dropdown, batch_dropdown, choice_dropdown); the
    ranked table is ``table`` (HTML) and ``table_text``; the chart ``image`` (PNG) with its title,
    bubbles and colour key under it, ``chart_key`` (HTML; ``chart_title`` and ``bubbles`` as text);
    ``result`` the Plan. A layout too dense for a Gantt chart (course_lib/charts/occupancy.py) is drawn
    as its devices' busy stretches."""

    what = "the planner"

    def __init__(self, model: str, cluster_name: str, gpus: int, global_batch: int, top: int = 8):
        gpus, global_batch, top = whole("gpus", gpus), whole("global_batch", global_batch), whole("top", top)
        require(model in MODELS, f"model must be one of {', '.join(MODELS)}, got {model!r}")
        self.cluster = cluster(cluster_name)
        self.top = top
        self.result: Plan | None = None
        self.table_text = ""
        style = {"description_width": "initial"}
        self.model_dropdown = widgets.Dropdown(
            options=list(MODELS), value=model, description="model", style=style
        )
        self.gpus_dropdown = widgets.Dropdown(
            options=sorted({*GPU_CHOICES, gpus}), value=gpus, description="GPUs", style=style
        )
        self.batch_dropdown = widgets.Dropdown(
            options=sorted({*BATCH_CHOICES, global_batch}), value=global_batch, description="global batch",
            style=style,
        )  # fmt: skip
        self.choice_dropdown = widgets.Dropdown(options=[0], value=0, description="chart of row", style=style)
        self.drawn = ""  # what the chart shows, in words (it stays while a request is refused)
        self._replanning = False  # the choice list changes while re-planning: draw once, not twice
        self.table = widgets.HTML()
        self.image = widgets.Image(format="png")
        self.chart_key = widgets.HTML()  # the chart's title and colour key
        self._gantt = GanttPNG(max_rows=16)  # taller charts get thinner rows
        # a layout with too many actions to draw one by one (p=16, v=5: 320 a device) shows busy stretches
        self._occupancy = OccupancyPNG(max_rows=16)
        self.bubbles = ""  # the chart's bubble beside the table's, and why they differ (under the chart)
        self.chart_title = ""  # the chart's title and its source and bubble line
        controls = [self.model_dropdown, self.gpus_dropdown, self.batch_dropdown, self.choice_dropdown]
        super().__init__([widgets.HBox(controls), self.table, self.image, self.chart_key])
        for control in controls[:3]:
            control.observe(lambda _change: self.replan(), names="value")
        self.choice_dropdown.observe(lambda _change: self._replanning or self.draw(), names="value")
        self.replan()

    @property
    def chosen(self) -> Planned | None:
        if self.result is None or not self.result.layouts:
            return None
        return self.result.layouts[min(self.choice_dropdown.value, len(self.result.layouts) - 1)]

    def replan(self) -> None:
        """Plan again for what the controls say; any problem becomes a message, not a traceback."""
        try:
            self.result = plan(
                self.model_dropdown.value, self.cluster, self.gpus_dropdown.value, self.batch_dropdown.value
            )
            self.result.best  # noqa: B018  (raises, with the reason, when nothing fits)
        except Exception as err:  # noqa: BLE001  (a student's choice must never show a traceback)
            self.result = None
            self.table_text = f"no plan: {err}"
            kept = f"<div>the chart below is still the last plan's: {html.escape(self.drawn)}</div>"
            self.table.value = (
                f"<pre style='color:#D55E00; {WRAP_AT_SPACES}'>{html.escape(self.table_text)}</pre>"
                + (kept if self.drawn else "")
            )  # fmt: skip
            return
        shown = self.result.layouts[: self.top]
        self._replanning = True
        try:
            self.choice_dropdown.options = list(range(len(shown)))
        finally:
            self._replanning = False
        self.table_text = _table(shown)
        self.table.value = "<pre>" + html.escape(self.table_text) + "</pre>"
        self.draw()

    def draw(self) -> None:
        """The chosen layout's pipeline, simulated for one replica (``played_microbatches``: at most 2p)."""
        chosen = self.chosen
        if chosen is None or self.result is None:
            return
        every = chosen.layout.microbatches(self.result.global_batch)
        m = played_microbatches(chosen.layout, self.result.global_batch)
        # the planner's own simulation of this row, when it re-ranked it (the fastest few)
        tl = chosen.timeline or pipeline_timeline(self.result.shape, self.result.cluster, chosen.layout, m)
        self.drawn = (
            f"{self.result.shape.name}, {self.result.gpus} GPUs, batch {self.result.global_batch}: "
            f"row {self.choice_dropdown.value}, {_label(chosen)}"
        )
        shown = f"{m} micro-batches" if m == every else f"the first {m} of its {every} micro-batches"
        chart = self._occupancy if dense(tl) else self._gantt
        heading = f"row {self.choice_dropdown.value}: {_label(chosen)}, {shown} (simulated)"
        self.image.value = chart.png(tl, heading)
        self.bubbles = compared_bubbles(chosen, tl, every)
        # title and colour key under the chart, as HTML (drawn, they cost a third of the redraw)
        self.chart_title = chart.title
        title = "<br>".join(html.escape(line) for line in chart.title.splitlines())
        key = swatches_html(chart.key)
        self.chart_key.value = f"<div>{title}<br>{html.escape(self.bubbles)}<br>{key}</div>"


def compared_bubbles(x: Planned, tl: Timeline, every: int) -> str:
    """The chart's bubble beside the table's, and why they differ. The chart plays at most 2p
    micro-batches, where fill and drain weigh more than in all m; the planner extends it by one steady
    slot per further micro-batch (step_time.simulate_pipeline), which gives the pipeline's idle share
    over all m. The table's bubble is another quantity: the schedule's own bubble (closed form) as a
    share of the whole step, which also holds the messages and the DP all-reduce."""
    played = tl.n_microbatches or every
    slot = (x.parts.compute_s + x.parts.tp_s) / every  # one micro-batch's work on a device
    makespan = tl.makespan + (every - played) * slot
    over_all = 1 - every * slot / makespan if makespan > 0 else 0.0
    drawn = f"{tl.bubble_fraction:.1%} of device-time idle in the {played} micro-batches drawn"
    if played < every:
        drawn += (
            f"; {over_all:.1%} over all {every} (each further micro-batch adds one steady slot, "
            "as the planner counts: fill and drain weigh less)"
        )
    return (
        f"bubbles: {drawn}; the table's {x.bubble_share:.1%} is the schedule's own bubble as a share of the "
        "whole step, which also holds the messages and the DP all-reduce"
    )


def _label(x: Planned) -> str:
    return f"t={x.t} p={x.p} d={x.d} b={x.b} {x.schedule} v={x.v}"


def _table(rows: list[Planned]) -> str:
    head = " row  layout                                          step s  TFLOP/s  MFU  memory GiB  bubble"
    lines = [head]
    for row, x in enumerate(rows):
        lines.append(
            f"{row:4d}  {_label(x) + (' recompute' if x.recompute else ''):46s} {x.step_s:7.2f} "
            f"{x.tflops_per_gpu:8.1f} {x.mfu:4.0%} {x.memory_per_gpu_bytes / GIB:11.1f} {x.bubble_share:7.1%}"
        )
    return "\n".join(lines)


def planner_widget(
    model: str = "megatron-145b",
    cluster_name: str = "a100-selene",
    gpus: int = 64,
    global_batch: int = 64,
    top: int = 8,
) -> PlannerWidget:
    """Build the planner widget (see PlannerWidget)."""
    return PlannerWidget(model, cluster_name, gpus, global_batch, top)
