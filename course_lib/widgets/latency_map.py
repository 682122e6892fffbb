"""Latency map: put pipeline stages in datacenters around the world and watch the step time.

In a notebook::

    from course_lib.widgets.latency_map import latency_map
    latency_map(["Ashburn VA", "Dublin", "Frankfurt", "Singapore"])    # a dropdown per stage

Without widgets (what the widget calls, and what the tests check)::

    from course_lib.widgets.latency_map import link_rows, simulate_placement
    link_rows(["Ashburn VA", "Dublin"])            # distance, latency, bandwidth of each link
    tl = simulate_placement(["Ashburn VA", "Dublin"], microbatches=8, t_f=0.01, t_b=0.02)

Latencies are fiber at 4.9 us/km over the great circle times a route factor (1.0 is the physical
floor; internet paths run about 2.1x). Every link has the bandwidth of the "Gb/s" slider, and each
message carries the "MiB per message" control's boundary tensor, so a slow link shows as the wire, not
the latency. Compute costs are yours to give, so the timeline is simulated and says so.

The widget sets its Output's content in one assignment (a table, a line, one PNG) instead of printing
and ``plt.show()`` inside ``with output:``. That capture files what it catches under the message that
started the redraw; a slider's callback (on ipykernel 7, often on another thread) is not a cell, so
JupyterLab sent some of it to the Log Console, and ``plt.show()`` showed every pyplot figure still open,
so two charts came out drawn over each other. A ``Figure`` outside pyplot is never left open.
"""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Sequence

import ipywidgets as widgets
from matplotlib.figure import Figure

from course_lib.charts.gantt import plot_timeline
from course_lib.network import Gbit, distance_km, load_sites, site, site_link
from course_lib.schedules.latency_aware import extra_in_flight, flush_bound, latency_aware_1f1b
from course_lib.shelf.costs import Link
from course_lib.shelf.errors import CourseError, require
from course_lib.shelf.first_schedules import build_schedule
from course_lib.shelf.simulator import StageCosts, simulate
from course_lib.shelf.timeline import Timeline
from course_lib.widgets.controls import Shown, slider_size

LATENCY_MAP_SCHEDULES = ("1f1b", "latency-aware-1f1b")


def placement_links(
    sites: Sequence[str], route_factor: float = 1.0, bandwidth_Bps: float = 100 * Gbit
) -> list[Link]:
    """One Link per boundary between consecutive stages placed at `sites`."""
    require(len(sites) >= 1, "place at least one stage")
    return [site_link(a, b, route_factor, bandwidth_Bps) for a, b in zip(sites, sites[1:], strict=False)]


def link_rows(
    sites: Sequence[str], route_factor: float = 1.0, bandwidth_Bps: float = 100 * Gbit, nbytes: int = 0
) -> list[dict[str, object]]:
    """A row per link: stages, sites, great-circle km, one-way latency, bandwidth, time for `nbytes`."""
    rows = []
    for i, link in enumerate(placement_links(sites, route_factor, bandwidth_Bps)):
        a, b = site(sites[i]), site(sites[i + 1])
        rows.append({
            "link": f"stage {i} -> {i + 1}", "from": a.name, "to": b.name, "km": distance_km(a, b),
            "latency_ms": link.latency_s * 1e3, "bandwidth_Gbps": link.bandwidth_Bps / Gbit,
            "transfer_ms": link.transfer_time(nbytes) * 1e3,
        })  # fmt: skip
    return rows


def simulate_placement(
    sites: Sequence[str], microbatches: int = 8, t_f: float = 0.01, t_b: float = 0.02, schedule: str = "1f1b",
    route_factor: float = 1.0, bandwidth_Bps: float = 100 * Gbit, nbytes: int = 0,
) -> Timeline:  # fmt: skip
    """Simulate one training step with stage s at sites[s]. `schedule`: '1f1b' or
    'latency-aware-1f1b' (extra micro-batches per link from extra_in_flight)."""
    require(
        schedule in LATENCY_MAP_SCHEDULES,
        f"unknown schedule {schedule!r}; choose one of {LATENCY_MAP_SCHEDULES}",
    )
    require(t_f > 0 and t_b > 0, f"compute times must be > 0 seconds, got t_f={t_f!r}, t_b={t_b!r}")
    links = placement_links(sites, route_factor, bandwidth_Bps)
    if schedule == "1f1b":
        sched = build_schedule("1f1b", len(sites), microbatches)
    else:
        extras = [extra_in_flight(link, t_f, t_b, nbytes) for link in links]
        sched = latency_aware_1f1b(len(sites), microbatches, extras)
    return simulate(sched, StageCosts.fused(f=t_f, b=t_b), boundary_bytes=nbytes, links=links or None)


def _rows_html(rows: list[dict[str, object]]) -> str:
    head = (
        "<tr><th>link</th><th>from</th><th>to</th><th>km</th><th>one-way ms</th><th>Gb/s</th>"
        "<th>message arrives after, ms</th></tr>"
    )
    body = "".join(
        f"<tr><td>{r['link']}</td><td>{r['from']}</td><td>{r['to']}</td><td>{r['km']:,.0f}</td>"
        f"<td>{r['latency_ms']:.2f}</td><td>{r['bandwidth_Gbps']:.3g}</td><td>{r['transfer_ms']:.2f}</td></tr>"
        for r in rows
    )
    return f"<table>{head}{body}</table>"


class LatencyMap(Shown, widgets.VBox):
    """The widget: a dropdown per stage, route factor, schedule, m, t_f, t_b, message size and
    bandwidth; shows the links and the simulated Gantt chart. Bad input becomes a message, never a
    traceback. After each redraw: ``timeline`` (None after a problem) and ``text`` (the line shown)."""

    what = "the latency map"

    def __init__(self, sites: Sequence[str], microbatches: int, t_f: float, t_b: float, nbytes: int,
                 bandwidth_Gbps: float):  # fmt: skip
        names = list(load_sites())
        self.stages = [
            widgets.Dropdown(options=names, value=s, description=f"stage {i}") for i, s in enumerate(sites)
        ]
        self.route = widgets.FloatSlider(
            value=1.0, min=1.0, max=3.0, step=0.1, description="route factor", continuous_update=False,
            **slider_size(21),
        )  # fmt: skip
        self.schedule = widgets.ToggleButtons(
            options=LATENCY_MAP_SCHEDULES, value="1f1b", description="schedule"
        )
        self.m_slider = widgets.IntSlider(
            value=microbatches, min=1, max=64, description="m", continuous_update=False, **slider_size(64)
        )
        self.tf_box = widgets.FloatText(value=t_f * 1e3, description="t_f (ms)")
        self.tb_box = widgets.FloatText(value=t_b * 1e3, description="t_b (ms)")
        self.mib_box = widgets.FloatText(
            value=nbytes / 2**20, description="MiB per message", style={"description_width": "initial"}
        )
        self.gbps_slider = widgets.FloatLogSlider(  # 1, 1.26, ... 1000 Gb/s: 31 values
            value=bandwidth_Gbps, base=10, min=0, max=3, step=0.1, description="Gb/s per link",
            continuous_update=False, **slider_size(31),
        )  # fmt: skip
        self.output = widgets.Output()
        self.timeline: Timeline | None = None
        self.text = ""
        self._last_chart: dict | None = None  # the last chart drawn: it stays while a setting is refused
        self._figure = Figure(figsize=(10, 3.2), dpi=80)
        controls = [
            self.route,
            self.schedule,
            self.m_slider,
            self.tf_box,
            self.tb_box,
            self.mib_box,
            self.gbps_slider,
        ]
        super().__init__(
            [widgets.HBox(self.stages[:2]), widgets.HBox(self.stages[2:]), *controls, self.output]
        )
        for box in (*self.stages, *controls):
            box.observe(lambda _change: self.redraw(), names="value")
        self.redraw()

    def redraw(self) -> None:
        try:
            chosen = [b.value for b in self.stages]
            tf, tb, mib = self.tf_box.value / 1e3, self.tb_box.value / 1e3, self.mib_box.value
            require(math.isfinite(tf) and math.isfinite(tb), "t_f and t_b must be numbers")
            require(math.isfinite(mib) and mib >= 0, f"MiB per message must be a number >= 0, got {mib}")
            nbytes, bandwidth = int(mib * 2**20), self.gbps_slider.value * Gbit
            tl = simulate_placement(
                chosen, self.m_slider.value, tf, tb, self.schedule.value, self.route.value, bandwidth, nbytes
            )
        except CourseError as err:  # the reason, beside the last chart drawn (never an empty output)
            self.timeline, self.text = None, f"cannot simulate this placement: {err}"
            said = self.text + ("\nthe chart is still the last placement's:" if self._last_chart else "")
            kept = () if self._last_chart is None else (self._last_chart,)
            self.output.outputs = ({"output_type": "stream", "name": "stdout", "text": said + "\n"}, *kept)
            return
        latencies = [link.latency_s for link in placement_links(chosen, self.route.value, bandwidth)]
        ideal = (self.m_slider.value + len(chosen) - 1) * (tf + tb)
        self.timeline = tl
        self.text = (
            f"step {tl.makespan * 1e3:.1f} ms (free links: {ideal * 1e3:.1f} ms); worst idle per device "
            f"{max(tl.idle(d) for d in range(tl.n_devices)) * 1e3:.1f} ms, latency flush bound "
            f"{flush_bound(len(chosen), tf, tb, latencies) * 1e3:.1f} ms; peak in flight per device "
            f"{[tl.peak_inflight(d) for d in range(tl.n_devices)]} (simulated)"
        )
        table = _rows_html(link_rows(chosen, self.route.value, bandwidth, nbytes))
        html = {"text/html": table, "text/plain": "links"}
        self._last_chart = {"output_type": "display_data", "metadata": {},
                            "data": {"image/png": self._png(tl), "text/plain": "<Figure>"}}  # fmt: skip
        self.output.outputs = (  # one assignment: the old content goes, exactly one chart comes
            {"output_type": "display_data", "data": html, "metadata": {}},
            {"output_type": "stream", "name": "stdout", "text": self.text + "\n"},
            self._last_chart,
        )

    def _png(self, tl: Timeline) -> str:
        """The Gantt chart as base64 PNG, drawn on the one Figure this widget keeps (never pyplot)."""
        fig = self._figure
        fig.clear()
        fig.set_size_inches(10, 1.6 + 0.4 * tl.n_devices)
        plot_timeline(tl, ax=fig.add_axes((0.1, 0.2, 0.6, 0.6)))  # room for the legend on the right
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png")
        return base64.b64encode(buffer.getvalue()).decode()


def latency_map(
    sites: Sequence[str] = ("Ashburn VA", "Dublin", "Frankfurt", "Singapore"), microbatches: int = 8,
    t_f: float = 0.01, t_b: float = 0.02, nbytes: int = 0, bandwidth_Gbps: float = 100.0,
) -> LatencyMap:  # fmt: skip
    """Build the widget (see LatencyMap); `nbytes` is one boundary message (64 MiB for a 70B-class
    width at 4096 tokens), `bandwidth_Gbps` every link's bandwidth."""
    return LatencyMap(sites, microbatches, t_f, t_b, nbytes, bandwidth_Gbps)
