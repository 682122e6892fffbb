"""Lesson 04b's what-if: pick a link preset, training step or decode, the device count and m; see TP
against PP as the latency sweeps from NVLink to an ocean (the cost model of course_lib/tp/cost.py).

    from course_lib.widgets.tp_what_if import tp_what_if
    box = tp_what_if()                 # two dropdowns, two sliders, the chart, a line under it
    box.devices_slider.value = 16      # widgets are attributes, so code (and tests) can drive them
    box.text                           # the line under the chart

One redraw per change: the sliders send their value when the mouse lets go
(``continuous_update=False``), so the chart never trails the controls (``bench/bench_widgets.py``
times a redraw). In decode mode the m slider is off: one generated token has no micro-batches.
"""

from __future__ import annotations

import html
import io
from collections import OrderedDict
from dataclasses import replace

import ipywidgets as widgets
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, NullLocator

from course_lib.network import PRESETS
from course_lib.tp.cost import Scenario, pp_step, sweep, tp_step
from course_lib.tp.plots import plot_sweep
from course_lib.widgets.controls import Shown, slider_size

M_CHOICES = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128)  # a mouse can pick each of these
# t must divide the 70B-class model's 64 attention heads and p its 80 layers: the counts both can take
TP_WHAT_IF_DEVICES = (2, 4, 8, 16)
TRAINING, DECODE = "training step", "decode (one token)"
WHAT_IF_CACHE_SIZE = 64  # charts kept: moving back to a setting is instant
PLAIN = FuncFormatter(lambda value, _pos: f"{value:g}")  # 1, 10, 100, 1000, 10000 on log axes


def scenario(link: str, what: str, devices: int, microbatches: int) -> Scenario:
    """The lesson's 70B-class step (or one decoded token) on `devices`, at the preset's bandwidth."""
    if what == TRAINING:
        sc = Scenario.h200_70b_training(devices=devices, microbatches=microbatches)
    else:
        sc = Scenario.h200_70b_decode(devices=devices)
    return replace(sc, bandwidth_Bps=PRESETS[link].link.bandwidth_Bps)


class TpWhatIf(Shown, widgets.VBox):
    """Controls are attributes (link_dropdown, what_dropdown, devices_slider, m_slider); the chart is
    ``image`` (PNG), the line under it ``summary`` (HTML) and ``text``."""

    what = "the TP-against-PP what-if"

    def __init__(self, link: str = "nvlink4", what: str = TRAINING, devices: int = 8, microbatches: int = 8):
        self.link_dropdown = widgets.Dropdown(options=list(PRESETS), value=link, description="link")
        self.what_dropdown = widgets.Dropdown(options=[TRAINING, DECODE], value=what, description="what")
        self.devices_slider = widgets.SelectionSlider(
            options=TP_WHAT_IF_DEVICES, value=devices, description="devices", continuous_update=False,
            **slider_size(len(TP_WHAT_IF_DEVICES)),
        )  # fmt: skip
        self.m_slider = widgets.SelectionSlider(
            options=M_CHOICES, value=microbatches, description="micro-batches", continuous_update=False,
            **slider_size(len(M_CHOICES)),
        )  # fmt: skip
        self.image = widgets.Image(format="png")
        self.summary = widgets.HTML()
        self.text = ""
        self._figure = Figure(figsize=(11, 4), dpi=80)  # one Figure, cleared and reused (never pyplot)
        self._cache: OrderedDict[tuple, bytes] = OrderedDict()  # (scenario, latency) -> PNG
        controls = [self.link_dropdown, self.what_dropdown, self.devices_slider, self.m_slider]
        super().__init__([widgets.HBox(controls[:2]), *controls[2:], self.image, self.summary])
        for control in controls:
            control.observe(lambda _change: self.redraw(), names="value")
        self.redraw()

    def redraw(self) -> None:
        what = self.what_dropdown.value
        self.m_slider.disabled = what == DECODE  # a decoded token has no micro-batches
        sc = scenario(self.link_dropdown.value, what, self.devices_slider.value, self.m_slider.value)
        link = PRESETS[self.link_dropdown.value].link
        self.image.value = self._png(sc, link.latency_s)
        tp, pp = tp_step(sc, link.latency_s), pp_step(sc, link.latency_s)
        m = "" if what == DECODE else f", m={self.m_slider.value}"
        self.text = (
            f"{link.name}, {link.latency_s * 1e6:.3g} us, {link.bandwidth_Bps / 1e9:.1f} GB/s, "
            f"{sc.devices} devices{m} (source: model): TP {tp.total_s * 1e3:.2f} ms, "
            f"waits {tp.wait_share:.1%}; PP {pp.total_s * 1e3:.2f} ms, waits {pp.wait_share:.1%}"
        )
        self.summary.value = f"<span style='word-break:normal'>{html.escape(self.text)}</span>"

    def _png(self, sc: Scenario, latency_s: float) -> bytes:
        key = (sc, latency_s)
        if key not in self._cache:  # a setting seen before comes back at once
            fig = self._figure
            fig.clear()
            axes = fig.subplots(1, 2)
            plot_sweep(sweep(sc), marker_s=latency_s, ax_pair=axes)
            for axis in (axes[0].xaxis, axes[1].xaxis, axes[0].yaxis):  # log axes: minor ticks, and labels
                axis.set_minor_locator(NullLocator())  # set in TeX (10^3), cost most of the drawing time
                axis.set_major_formatter(PLAIN)
            fig.subplots_adjust(left=0.07, right=0.98, bottom=0.13, top=0.86, wspace=0.22)  # no tight_layout:
            buffer = io.BytesIO()  # it draws the figure once more, doubling the redraw
            fig.savefig(buffer, format="png", pil_kwargs={"compress_level": 1})  # fast; size barely grows
            self._cache[key] = buffer.getvalue()
            if len(self._cache) > WHAT_IF_CACHE_SIZE:
                self._cache.popitem(last=False)
        self._cache.move_to_end(key)
        return self._cache[key]


def tp_what_if(
    link: str = "nvlink4", what: str = TRAINING, devices: int = 8, microbatches: int = 8
) -> TpWhatIf:
    """Build the widget (see TpWhatIf)."""
    return TpWhatIf(link, what, devices, microbatches)
