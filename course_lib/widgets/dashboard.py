"""An ipywidgets dashboard: pick a schedule, p, m (and v), a link; see the Gantt chart and the bubble.

Every change re-simulates and redraws, once per change: the sliders send their value when the mouse
lets go (``continuous_update=False``), and a setting seen before comes back from a cache at once
(``bench/bench_dashboard.py`` and ``bench/bench_widgets.py`` time it). A size the schedule cannot take
shows the reason in words beside the last chart that could be drawn (labelled with its own setting),
never a traceback or an empty image.

The model is held fixed as p grows (the checkbox "same model as p grows"): the costs given are a
device's share of the model at ``costs_p`` devices (by default the starting p), so at p devices each
costs ``costs_p / p`` of that, the way lesson 02 cuts one model over more devices. Unticked, every
device keeps that share, so p = 8 simulates twice the model of p = 4. Every slider is wide enough to
pick each of its values with a mouse (``course_lib/widgets/controls.py``).

Try it, in a notebook cell::

    from course_lib.widgets.dashboard import pipeline_dashboard
    dash = pipeline_dashboard("1f1b", p=4, m=8)
    dash                       # the widget box
    dash.p_slider.value = 8    # widgets are attributes, so code (and tests) can drive them
    print(dash.summary_text)   # the figures shown under the chart

Later lessons can add controls: ``extra_controls=[...]`` appends widgets, and ``on_train=f`` adds
"train for real" and "stop" buttons (course_lib/widgets/run_panel.py: the course's one stop rule):
the button runs ``f(dash.config(), control)`` on a thread, where `control` is the engines'
``stop(steps_done)`` callable (set ``control.steps`` for the progress line); "stop" ends it within a
second, with one line. If ``f`` returns a Timeline (say, measured by an engine) it is drawn in place
of the simulation, with its own source in the title. ``dash.train()`` runs the same from a cell.
"""

from __future__ import annotations

import html
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import ipywidgets as widgets

from course_lib.charts.gantt import GanttPNG, key_html
from course_lib.network import PRESETS
from course_lib.schedules.closed_forms import Case
from course_lib.shelf.costs import FREE, Link, check_costs
from course_lib.shelf.errors import require, whole
from course_lib.shelf.first_schedules import SCHEDULES, resolve_name
from course_lib.shelf.simulator import StageCosts, simulate_named
from course_lib.shelf.timeline import Timeline, format_bytes
from course_lib.widgets.controls import WRAP_AT_SPACES, Shown, wide_slider
from course_lib.widgets.run_panel import RunControl, RunPanel

NBSP = "\u00a0"  # a non-breaking space: number and unit stay on one line
DASHBOARD_CACHE_SIZE = 64  # settings kept (timeline, PNG, figures): moving back to one is instant


def link_presets() -> dict[str, Link]:
    """The link choices: "free", then the course's network presets (course_lib.network.PRESETS)."""
    return {"free": FREE, **{name: preset.link for name, preset in PRESETS.items()}}


def scaled(costs: StageCosts, factor: float) -> StageCosts:
    """`costs` times `factor` (one number each, or one per stage)."""

    def times(value):
        return value * factor if isinstance(value, (int, float)) else [x * factor for x in value]

    return StageCosts(times(costs.f), times(costs.i), times(costs.w))


@dataclass(frozen=True)
class DashboardConfig:
    """What the controls say right now: handed to an ``on_train`` callback."""

    schedule: str
    p: int
    m: int
    v: int
    link_name: str
    link: Link
    costs: StageCosts  # a device's share of the model at this p (what is simulated)
    boundary_bytes: int  # one micro-batch's message across every stage boundary


TrainHook = Callable[[DashboardConfig, RunControl], "Timeline | None"]  # "train for real" (see above)


class PipelineDashboard(Shown, widgets.VBox):
    """The widget box; controls are attributes (p_slider, m_slider, v_slider, schedule_dropdown,
    link_dropdown, fixed_model_checkbox), the chart is ``image`` (PNG), the figures ``summary`` (HTML)
    and ``summary_text``."""

    what = "the pipeline dashboard"

    def __init__(
        self, schedule: str = "1f1b", p: int = 4, m: int = 8, v: int = 2, link: str = "free",
        costs: StageCosts | None = None, boundary_bytes: int = 64 * 2**20, max_p: int = 16, max_m: int = 64,
        links: dict[str, Link] | None = None, extra_controls: Sequence[widgets.Widget] = (),
        on_train: TrainHook | None = None, costs_p: int | None = None, fixed_model: bool = True,
    ):  # fmt: skip
        p, m, v = whole("p", p), whole("m", m), whole("v", v)  # numpy's too; a str is refused here
        max_p, max_m = whole("max_p", max_p), whole("max_m", max_m)
        check_costs(costs, boundary_bytes)  # their types, before a widget is built
        # default costs: 20 ms for each of F, I (input grad), W per device's share of the model,
        # so that link presets from NVLink to an ocean show their real weight
        self.costs = costs if costs is not None else StageCosts(f=0.02, i=0.02, w=0.02)
        self.costs_p = costs_p if costs_p is not None else p  # the p at which `costs` is a device's share
        self.boundary_bytes = boundary_bytes
        self.links = links if links is not None else link_presets()
        self.on_train = on_train
        self.summary_text = ""
        self.timeline: Timeline | None = None
        self._last_drawn: Timeline | None = None  # kept on screen while a setting is refused
        self._cache: OrderedDict[tuple, tuple[Timeline, bytes, str]] = OrderedDict()
        self._gantt = GanttPNG()  # draws the chart (a Figure per height, reused)

        style = {"description_width": "initial"}
        self.schedule_dropdown = widgets.Dropdown(
            options=list(SCHEDULES), value=resolve_name(schedule), description="schedule", style=style
        )
        self.p_slider = wide_slider(p, 1, max_p, "p (devices)")
        self.m_slider = wide_slider(m, 1, max_m, "m (micro-batches)")
        self.v_slider = wide_slider(v, 1, 4, "v (stages per device)")
        self.link_dropdown = widgets.Dropdown(
            options=list(self.links), value=link if link in self.links else next(iter(self.links)),
            description="link", style=style,
        )  # fmt: skip
        self.fixed_model_checkbox = widgets.Checkbox(
            value=fixed_model, description="same model as p grows", indent=False
        )
        self.image = widgets.Image(format="png")
        self.summary = widgets.HTML()
        own = [self.schedule_dropdown, self.p_slider, self.m_slider, self.v_slider, self.link_dropdown,
               self.fixed_model_checkbox]  # fmt: skip
        buttons = list(extra_controls)
        self.panel = RunPanel() if on_train is not None else None  # train / stop, and the run's lines
        self.train_button = self.stop_button = None
        if self.panel is not None:
            self.train_button, self.stop_button = self.panel.train_button, self.panel.stop_button
            self.train_button.on_click(lambda _: self._start())
            buttons += list(self.panel.box.children)
        self.output = self.panel.output if self.panel is not None else widgets.Output()
        top = widgets.HBox([self.schedule_dropdown, self.link_dropdown, self.fixed_model_checkbox])
        super().__init__(
            [top, widgets.HBox(buttons), self.p_slider, self.m_slider, self.v_slider, self.image,
             self.summary, self.output]
        )  # fmt: skip
        for control in own:
            control.observe(lambda _change: self.redraw(), names="value")
        self.redraw()

    def use_costs(self, costs: StageCosts, costs_p: int, boundary_bytes: int | None = None) -> None:
        """Simulate from now on with `costs` (a device's share at `costs_p` devices) and redraw."""
        self.costs, self.costs_p = costs, costs_p
        if boundary_bytes is not None:
            self.boundary_bytes = boundary_bytes
        self._cache.clear()
        self.redraw()

    # ---- reading the controls ----------------------------------------------------------------
    def config(self) -> DashboardConfig:
        name = self.schedule_dropdown.value
        info = SCHEDULES[name]  # V shapes take one v only (2): the slider is then off
        v = info.fixed_virtual or (self.v_slider.value if info.uses_virtual else 1)
        link_name, p = self.link_dropdown.value, self.p_slider.value
        return DashboardConfig(
            name, p, self.m_slider.value, v, link_name, self.links[link_name], self.device_costs(p),
            self.boundary_bytes,
        )  # fmt: skip

    def device_costs(self, p: int) -> StageCosts:
        """A device's share of the model at p devices: `costs` scaled by costs_p / p when the model is
        held fixed (per-stage lists describe one p only, so they are never scaled)."""
        scalar = all(isinstance(x, (int, float)) for x in (self.costs.f, self.costs.i, self.costs.w))
        if self.fixed_model_checkbox.value and scalar:
            return scaled(self.costs, self.costs_p / p)
        return self.costs

    def simulate(self) -> Timeline:
        """Simulate what the controls say (per-stage costs are 1/v of a device's share)."""
        c = self.config()
        return simulate_named(c.schedule, c.p, c.m, c.v, c.costs, c.boundary_bytes, c.link)

    # ---- drawing -----------------------------------------------------------------------------
    def redraw(self) -> None:
        """Re-simulate and redraw (or take both from the cache); any problem becomes a message in the
        box, not a traceback."""
        info = SCHEDULES[self.schedule_dropdown.value]
        self.v_slider.disabled = not info.uses_virtual or info.fixed_virtual is not None
        c = self.config()
        key = (c.schedule, c.p, c.m, c.v, c.link_name, repr(c.costs), self.boundary_bytes)
        if key in self._cache:
            self._cache.move_to_end(key)
            self._display(*self._cache[key])
            return
        try:
            tl = self.simulate()
        except Exception as err:  # noqa: BLE001  (a student's slider move must never show a traceback)
            self._show_problem(err)
            return
        self._cache[key] = (tl, self._gantt.png(tl), self._figures(tl))
        if len(self._cache) > DASHBOARD_CACHE_SIZE:
            self._cache.popitem(last=False)
        self._display(*self._cache[key])

    def show(self, tl: Timeline) -> None:
        """Draw `tl` (simulated here, or measured by an engine) and print its figures."""
        self._display(tl, self._gantt.png(tl), self._figures(tl))

    def _display(self, tl: Timeline, png: bytes, text: str) -> None:
        self.timeline = tl
        self.image.value = png
        self.summary_text = text
        self.summary.value = f"<pre style='{WRAP_AT_SPACES}'>" + html.escape(text) + "</pre>" + key_html(tl)

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
            held = ", ".join(format_bytes(b or 0).replace(" ", NBSP) for b in nbytes)  # a unit stays whole
            lines.append(f"peak boundary activations held: {held} (boundary tensors only: a lower bound)")
        return "\n".join(lines)

    def _show_problem(self, err: Exception) -> None:
        """The reason in words, beside the last chart drawn (kept, and named as another setting's)."""
        drawn, self.timeline = self.timeline, None  # no Timeline matches these controls
        self.summary_text = f"cannot simulate this combination: {err}"
        shown = f"<pre style='color:#D55E00; {WRAP_AT_SPACES}'>{html.escape(self.summary_text)}</pre>"
        if drawn is not None:
            self._last_drawn = drawn
        if self._last_drawn is not None:
            shown += "<div>the chart above is still the last setting that could be simulated:</div>"
            shown += key_html(self._last_drawn)
        self.summary.value = shown

    # ---- "train for real" (RunPanel: the course's one stop rule) ----------------------------------
    def _start(self) -> None:
        """The train button: the run goes on a thread, so that "stop" is heard."""
        self.panel.start(*self._run_of(self.config()))

    def train(self, c: DashboardConfig | None = None):
        """Run "train for real" here and now (from a cell: Kernel > Interrupt stops it with one line);
        returns what the hook returned, None when it was refused, failed or stopped."""
        require(self.panel is not None, "this dashboard has no 'train for real': build it with on_train=...")
        return self.panel.run(*self._run_of(self.config() if c is None else c))

    def _run_of(self, c: DashboardConfig) -> tuple:
        return _what(c), lambda control: self.on_train(c, control), lambda result: self._shown(result, c)

    def _shown(self, result, c: DashboardConfig) -> None:
        # what came back from a run: a Timeline (its source says "measured") replaces the simulation
        if isinstance(result, Timeline):
            self.show(result)
            self.panel.say(f"trained {c.schedule}, p={c.p}, m={c.m} for real: the chart shows that run")

    def stop(self) -> None:
        self.panel.stop()

    @property
    def running(self) -> bool:
        return self.panel is not None and self.panel.running

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for a button-started run to end (at most `timeout` seconds); True when none is left."""
        return self.panel is None or self.panel.wait(timeout)

    @property
    def train_text(self) -> str:
        return self.panel.text if self.panel is not None else ""  # the run's last line


def _what(c: DashboardConfig) -> str:
    return f"training {c.schedule}, p={c.p}, m={c.m}"


def pipeline_dashboard(
    schedule: str = "1f1b", p: int = 4, m: int = 8, v: int = 2, **kwargs
) -> PipelineDashboard:
    """Build the dashboard (see PipelineDashboard for the keyword arguments)."""
    return PipelineDashboard(schedule=schedule, p=p, m=m, v=v, **kwargs)
