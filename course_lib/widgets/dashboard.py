"""An ipywidgets dashboard: pick a schedule, p, m (and v), a link; see the Gantt chart and the bubble.

Every change re-simulates and redraws (well under a second for p <= 8, m <= 32). A size the
schedule cannot take shows the reason in words instead of a chart, never a traceback.

Try it, in a notebook cell::

    from course_lib.widgets.dashboard import pipeline_dashboard
    dash = pipeline_dashboard("1f1b", p=4, m=8)
    dash                       # the widget box
    dash.p_slider.value = 8    # widgets are attributes, so code (and tests) can drive them
    print(dash.summary_text)   # the figures shown under the chart

Later lessons can add controls: ``extra_controls=[...]`` appends widgets, and ``on_train=f`` adds a
"train for real" button that calls ``f(dash.config())``; if ``f`` returns a Timeline (say, measured
by an engine) it is drawn in place of the simulation, with its own source in the title. ``on_stop=g``
adds a "stop" button beside it that calls ``g()``, for an ``f`` that trains on a thread (the button
starts disabled: ``f`` enables it while its run goes on).
"""

from __future__ import annotations

import html
import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import ipywidgets as widgets
from matplotlib.figure import Figure

from course_lib.links import FREE, Link
from course_lib.network import PRESETS
from course_lib.plots import format_bytes, gantt_figsize, plot_timeline
from course_lib.schedules.builders import SCHEDULES, build_schedule, resolve_name
from course_lib.schedules.closed_forms import Case
from course_lib.simulator import StageCosts, simulate
from course_lib.timeline import Timeline


def link_presets() -> dict[str, Link]:
    """The link choices: "free", then the course's network presets (course_lib.network.PRESETS)."""
    return {"free": FREE, **{name: preset.link for name, preset in PRESETS.items()}}


@dataclass(frozen=True)
class DashboardConfig:
    """What the controls say right now: handed to an ``on_train`` callback."""

    schedule: str
    p: int
    m: int
    v: int
    link_name: str
    link: Link
    costs: StageCosts
    boundary_bytes: int  # one micro-batch's message across every stage boundary


class PipelineDashboard(widgets.VBox):
    """The widget box; controls are attributes (p_slider, m_slider, v_slider, schedule_dropdown,
    link_dropdown), the chart is ``image`` (PNG), the figures ``summary`` (HTML) and ``summary_text``."""

    def __init__(
        self, schedule: str = "1f1b", p: int = 4, m: int = 8, v: int = 2, link: str = "free",
        costs: StageCosts | None = None, boundary_bytes: int = 64 * 2**20, max_p: int = 16, max_m: int = 64,
        links: dict[str, Link] | None = None, extra_controls: Sequence[widgets.Widget] = (),
        on_train: Callable[[DashboardConfig], Timeline | None] | None = None,
        on_stop: Callable[[], None] | None = None,
    ):  # fmt: skip
        # default costs: 20 ms for each of F, I (input grad), W per device's share of the model,
        # so that link presets from NVLink to an ocean show their real weight
        self.costs = costs if costs is not None else StageCosts(f=0.02, i=0.02, w=0.02)
        self.boundary_bytes = boundary_bytes
        self.links = links if links is not None else link_presets()
        self.on_train = on_train
        self.summary_text = ""
        self.timeline: Timeline | None = None

        style = {"description_width": "initial"}
        self.schedule_dropdown = widgets.Dropdown(
            options=list(SCHEDULES), value=resolve_name(schedule), description="schedule", style=style
        )
        slider = dict(min=1, continuous_update=False, style=style)
        self.p_slider = widgets.IntSlider(value=p, max=max_p, description="p (devices)", **slider)
        self.m_slider = widgets.IntSlider(value=m, max=max_m, description="m (micro-batches)", **slider)
        self.v_slider = widgets.IntSlider(value=v, max=4, description="v (stages per device)", **slider)
        self.link_dropdown = widgets.Dropdown(
            options=list(self.links), value=link if link in self.links else next(iter(self.links)),
            description="link", style=style,
        )  # fmt: skip
        self.image = widgets.Image(format="png")
        self.summary = widgets.HTML()
        self.output = widgets.Output()  # for messages from extra controls / on_train
        own = [self.schedule_dropdown, self.p_slider, self.m_slider, self.v_slider, self.link_dropdown]
        controls = own + list(extra_controls)
        self.train_button = self.stop_button = None
        if on_train is not None:
            self.train_button = widgets.Button(description="train for real", button_style="success")
            self.train_button.on_click(lambda _: self._train())
            controls.append(self.train_button)
        if on_stop is not None:
            self.stop_button = widgets.Button(description="stop", button_style="danger", disabled=True)
            self.stop_button.on_click(lambda _: on_stop())
            controls.append(self.stop_button)
        super().__init__(
            [widgets.HBox(controls[:3]), widgets.HBox(controls[3:]), self.image, self.summary, self.output]
        )
        for control in own:
            control.observe(lambda _change: self.redraw(), names="value")
        self.redraw()

    # ---- reading the controls ----------------------------------------------------------------
    def config(self) -> DashboardConfig:
        name = self.schedule_dropdown.value
        info = SCHEDULES[name]  # V shapes take one v only (2): the slider is then off
        v = info.fixed_virtual or (self.v_slider.value if info.uses_virtual else 1)
        link_name = self.link_dropdown.value
        return DashboardConfig(
            name, self.p_slider.value, self.m_slider.value, v, link_name, self.links[link_name], self.costs,
            self.boundary_bytes,
        )  # fmt: skip

    def simulate(self) -> Timeline:
        """Simulate what the controls say (per-stage costs are 1/v of a device's share)."""
        c = self.config()
        schedule = build_schedule(c.schedule, c.p, c.m, c.v)
        costs = c.costs.per_virtual_stage(c.v)
        return simulate(schedule, costs, boundary_bytes=c.boundary_bytes, links=c.link)

    # ---- drawing -----------------------------------------------------------------------------
    def redraw(self) -> None:
        """Re-simulate and redraw; any problem becomes a message in the box, not a traceback."""
        info = SCHEDULES[self.schedule_dropdown.value]
        self.v_slider.disabled = not info.uses_virtual or info.fixed_virtual is not None
        try:
            tl = self.simulate()
        except Exception as err:  # noqa: BLE001  (a student's slider move must never show a traceback)
            self._show_problem(err)
            return
        self.show(tl)

    def show(self, tl: Timeline) -> None:
        """Draw `tl` (simulated here, or measured by an engine) and print its figures."""
        self.timeline = tl
        fig = Figure(figsize=gantt_figsize(tl.n_devices), dpi=80)
        ax = fig.add_axes((0.12, 0.14, 0.6, 0.7))
        plot_timeline(tl, ax=ax)
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png")
        self.image.value = buffer.getvalue()
        self.summary_text = self._figures(tl)
        self.summary.value = "<pre>" + html.escape(self.summary_text) + "</pre>"

    def _figures(self, tl: Timeline) -> str:
        c = self.config()
        bubble = f"bubble: {tl.bubble_fraction:.1%} of device-time idle ({tl.source})"
        case = Case.of(c.p, c.m, c.v, c.costs, c.link, c.boundary_bytes)
        bubble += "; " + SCHEDULES[c.schedule].bubble.explain(case, ".1%")
        inflight = ", ".join(str(tl.peak_inflight(d)) for d in range(tl.n_devices))
        lines = [bubble, f"makespan: {tl.makespan * 1e3:.1f} ms · link: {c.link_name}",
                 f"peak micro-batches in flight per device: {inflight}"]  # fmt: skip
        nbytes = [tl.peak_stash_bytes(d) for d in range(tl.n_devices)]
        if any(nbytes):
            held = ", ".join(format_bytes(b or 0) for b in nbytes)
            lines.append(f"peak boundary activations held: {held} (boundary tensors only: a lower bound)")
        return "\n".join(lines)

    def _show_problem(self, err: Exception) -> None:
        self.timeline = None
        self.image.value = b""
        self.summary_text = f"cannot simulate this combination: {err}"
        shown = html.escape(self.summary_text)
        self.summary.value = f"<pre style='color:#D55E00; white-space:pre-wrap'>{shown}</pre>"

    def _train(self) -> None:
        # The engines' hook: run for real, then draw what came back (its source says "measured").
        try:
            result = self.on_train(self.config())
        except Exception as err:  # noqa: BLE001
            self._show_problem(err)
            return
        if isinstance(result, Timeline):
            self.show(result)


def pipeline_dashboard(
    schedule: str = "1f1b", p: int = 4, m: int = 8, v: int = 2, **kwargs
) -> PipelineDashboard:
    """Build the dashboard (see PipelineDashboard for the keyword arguments)."""
    return PipelineDashboard(schedule=schedule, p=p, m=m, v=v, **kwargs)
