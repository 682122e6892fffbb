"""Lesson 05's widget: move the memory budget and p, see how each way of cutting the layers fares.

    from course_lib.widgets.budget_cuts import budget_cuts
    box = budget_cuts(prof, step_of, p=4, m=8, budget_factor=1.1)   # step_of(part, p) -> Timeline
    box                                # a slider, a dropdown, the chart, a line under it
    box.budget_slider.value = 1.3      # widgets are attributes, so code (and tests) can drive them
    box.text                           # the line under the chart

The budget is a multiple of the uniform split's average stage (1F1B memory, m micro-batches). For each
cut (uniform, by parameters, by memory, fastest, fastest that fits the budget) the chart shows the
simulated step, grey where the cut does not fit. One redraw per change: the slider sends its value
when the mouse lets go (``continuous_update=False``; ``bench/bench_widgets.py`` times a redraw). A
budget no partition fits shows the reason beside the last chart drawn, never an empty chart.
"""

from __future__ import annotations

import html
import io
from collections.abc import Callable

import ipywidgets as widgets
from matplotlib.figure import Figure

from course_lib.balance import LayerProfile, OutOfMemory, balanced, format_bytes, stage_memory
from course_lib.shelf.model import Partition, uniform
from course_lib.shelf.timeline import Timeline
from course_lib.widgets.controls import Shown, slider_size

FITS, OVER = "#0072B2", "#BBBBBB"


def budget_bytes(prof: LayerProfile, p: int, m: int, factor: float) -> int:
    """`factor` times the uniform split's average stage memory (1F1B, m micro-batches)."""
    base = uniform(prof.n_layers, p)
    return int(sum(st.total_bytes for st in stage_memory(base, prof, "1f1b", m)) / p * factor)


def cuts(prof: LayerProfile, p: int, m: int, cap: int) -> dict[str, Partition]:
    """The five ways of cutting the layers into p stages; OutOfMemory when none fits `cap`."""
    return {
        "uniform": uniform(prof.n_layers, p),
        "by params": balanced(prof, p, by="params"),
        "by memory": balanced(prof, p, by="memory"),
        "fastest, no budget": balanced(prof, p, by="time"),
        "optimal under budget": balanced(
            prof, p, by="time", schedule="1f1b", microbatches=m, budget_bytes=cap
        ),
    }


class BudgetCuts(Shown, widgets.VBox):
    """Controls are attributes (budget_slider, p_dropdown); the chart is ``image`` (PNG), the line
    under it ``note`` (HTML) and ``text``; ``drawn``: the setting the chart shows."""

    what = "the budget widget"

    def __init__(
        self, prof: LayerProfile, step_of: Callable[[Partition, int], Timeline], p: int = 4, m: int = 8,
        budget_factor: float = 1.1, p_choices: tuple[int, ...] = (2, 4, 8),
    ):  # fmt: skip
        self.prof, self.step_of, self.m = prof, step_of, m
        self.budget_slider = widgets.FloatSlider(  # 0.90, 0.92, ... 1.50: each one a mouse can pick
            value=budget_factor, min=0.9, max=1.5, step=0.02, description="budget x avg",
            continuous_update=False, **slider_size(31),
        )  # fmt: skip
        self.p_dropdown = widgets.Dropdown(options=list(p_choices), value=p, description="p")
        self.image = widgets.Image(format="png")
        self.note = widgets.HTML()
        self.text, self.drawn = "", ""
        super().__init__([widgets.HBox([self.budget_slider, self.p_dropdown]), self.image, self.note])
        for control in (self.budget_slider, self.p_dropdown):
            control.observe(lambda _change: self.redraw(), names="value")
        self.redraw()

    def redraw(self) -> None:
        p, factor = self.p_dropdown.value, self.budget_slider.value
        cap = budget_bytes(self.prof, p, self.m, factor)
        setting = f"p={p}, budget {factor:.2f}x the average stage = {format_bytes(cap)} per device"
        try:
            parts = cuts(self.prof, p, self.m, cap)
        except OutOfMemory:
            self.text = f"no partition into {p} stages fits {format_bytes(cap)} per device ({setting})"
            kept = f"; the chart is still the last setting that fits: {self.drawn}" if self.drawn else ""
            self.note.value = f"<span style='color:#D55E00'>{html.escape(self.text + kept)}</span>"
            return
        step = {name: self.step_of(part, p).makespan * 1e3 for name, part in parts.items()}
        peak = {name: max(st.total_bytes for st in stage_memory(part, self.prof, "1f1b", self.m))
                for name, part in parts.items()}  # fmt: skip
        self.image.value = _chart(parts, step, {n: peak[n] <= cap for n in parts}, setting, self.m)
        self.drawn = setting
        best = "optimal under budget"
        self.text = f"{setting}: the fastest cut that fits, {parts[best].sizes}, steps in {step[best]:.0f} ms"
        self.note.value = html.escape(self.text)


def _chart(parts: dict[str, Partition], step: dict[str, float], fits: dict[str, bool], setting: str,
           m: int) -> bytes:  # fmt: skip
    """Horizontal bars, one per cut, labelled with its step and its stage sizes; a PNG."""
    fig = Figure(figsize=(9, 3.2), dpi=80)
    ax = fig.subplots()
    names = list(parts)
    bars = ax.barh(names, [step[n] for n in names], color=[FITS if fits[n] else OVER for n in names])
    labels = [f"{step[n]:.0f} ms {parts[n].sizes}" + ("" if fits[n] else "  over budget") for n in names]
    ax.bar_label(bars, labels=labels, padding=3, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 1.7 * max(step.values()))
    ax.set_xlabel("simulated 1F1B step (ms), from measured layer times; grey: does not fit the budget")
    ax.set_title(f"{setting}, m={m}", fontsize=10)
    # room for the names of the cuts and the title, set once: tight_layout would draw everything twice
    fig.subplots_adjust(left=0.2, right=0.98, bottom=0.17, top=0.9)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", pil_kwargs={"compress_level": 1})  # fast; size barely grows
    return buffer.getvalue()


def budget_cuts(
    prof: LayerProfile, step_of: Callable[[Partition, int], Timeline], p: int = 4, m: int = 8,
    budget_factor: float = 1.1,
) -> BudgetCuts:  # fmt: skip
    """Build the widget (see BudgetCuts); `step_of(part, p)` simulates one step of that cut."""
    return BudgetCuts(prof, step_of, p, m, budget_factor)
