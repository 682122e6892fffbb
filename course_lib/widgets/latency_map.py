"""Latency map: put pipeline stages in datacenters around the world and watch the step time.

In a notebook::

    from course_lib.widgets.latency_map import latency_map
    latency_map(["Ashburn VA", "Dublin", "Frankfurt", "Singapore"])    # a dropdown per stage

Without widgets (what the widget calls, and what the tests check)::

    from course_lib.widgets.latency_map import link_rows, simulate_placement
    link_rows(["Ashburn VA", "Dublin"])            # distance, latency, bandwidth of each link
    tl = simulate_placement(["Ashburn VA", "Dublin"], microbatches=8, t_f=0.01, t_b=0.02)

Latencies are fiber at 4.9 us/km over the great circle times a route factor (1.0 is the physical
floor; internet paths run about 2.1x). Compute costs are yours to give, so the timeline is simulated
and says so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from course_lib.errors import CourseError, require
from course_lib.geo import distance_km, load_sites, site
from course_lib.links import Link
from course_lib.network import Gbit, site_link
from course_lib.schedules.builders import build_schedule
from course_lib.schedules.latency_aware import extra_in_flight, flush_bound, latency_aware_1f1b
from course_lib.simulator import StageCosts, simulate
from course_lib.timeline import Timeline

SCHEDULE_CHOICES = ("1f1b", "latency-aware-1f1b")


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
    require(schedule in SCHEDULE_CHOICES, f"unknown schedule {schedule!r}; choose one of {SCHEDULE_CHOICES}")
    require(t_f > 0 and t_b > 0, f"compute times must be > 0 seconds, got t_f={t_f!r}, t_b={t_b!r}")
    links = placement_links(sites, route_factor, bandwidth_Bps)
    if schedule == "1f1b":
        sched = build_schedule("1f1b", len(sites), microbatches)
    else:
        extras = [extra_in_flight(link, t_f, t_b, nbytes) for link in links]
        sched = latency_aware_1f1b(len(sites), microbatches, extras)
    return simulate(sched, StageCosts.fused(f=t_f, b=t_b), boundary_bytes=nbytes, links=links or None)


def _rows_html(rows: list[dict[str, object]]) -> str:
    head = "<tr><th>link</th><th>from</th><th>to</th><th>km</th><th>one-way ms</th><th>Gb/s</th></tr>"
    body = "".join(
        f"<tr><td>{r['link']}</td><td>{r['from']}</td><td>{r['to']}</td><td>{r['km']:,.0f}</td>"
        f"<td>{r['latency_ms']:.2f}</td><td>{r['bandwidth_Gbps']:.0f}</td></tr>"
        for r in rows
    )
    return f"<table>{head}{body}</table>"


def latency_map(
    sites: Sequence[str] = ("Ashburn VA", "Dublin", "Frankfurt", "Singapore"), microbatches: int = 8,
    t_f: float = 0.01, t_b: float = 0.02,
):  # fmt: skip
    """The widget: a dropdown per stage, route factor, schedule and m; shows the links and the
    simulated Gantt chart. Bad input prints a message, never a traceback."""
    import ipywidgets as w
    import matplotlib.pyplot as plt
    from IPython.display import HTML, display

    from course_lib.plots import plot_timeline

    names = list(load_sites())
    stages = [w.Dropdown(options=names, value=s, description=f"stage {i}") for i, s in enumerate(sites)]
    route = w.FloatSlider(value=1.0, min=1.0, max=3.0, step=0.1, description="route factor")
    sched = w.ToggleButtons(options=SCHEDULE_CHOICES, value="1f1b", description="schedule")
    m_box = w.IntSlider(value=microbatches, min=1, max=64, description="m")
    tf_box = w.FloatText(value=t_f * 1e3, description="t_f (ms)")
    tb_box = w.FloatText(value=t_b * 1e3, description="t_b (ms)")
    out = w.Output()

    def redraw(_=None) -> None:
        out.clear_output(wait=True)
        with out:
            try:
                chosen = [b.value for b in stages]
                tf, tb = tf_box.value / 1e3, tb_box.value / 1e3
                require(math.isfinite(tf) and math.isfinite(tb), "t_f and t_b must be numbers")
                tl = simulate_placement(chosen, m_box.value, tf, tb, sched.value, route.value)
                latencies = [link.latency_s for link in placement_links(chosen, route.value)]
                bound = flush_bound(len(chosen), tf, tb, latencies)
                display(HTML(_rows_html(link_rows(chosen, route.value))))
                ideal = (m_box.value + len(chosen) - 1) * (tf + tb)
                print(
                    f"step {tl.makespan * 1e3:.1f} ms (no-latency step {ideal * 1e3:.1f} ms); "
                    f"worst idle per device {max(tl.idle(d) for d in range(tl.n_devices)) * 1e3:.1f} ms, "
                    f"flush bound {bound * 1e3:.1f} ms; "
                    f"peak in flight per device {[tl.peak_inflight(d) for d in range(tl.n_devices)]}"
                )
                fig, ax = plt.subplots(figsize=(10, 1.6 + 0.4 * len(chosen)))
                plot_timeline(tl, ax=ax)
                plt.show()
            except CourseError as err:
                print(f"cannot simulate this placement: {err}")

    for box in (*stages, route, sched, m_box, tf_box, tb_box):
        box.observe(redraw, names="value")
    redraw()
    return w.VBox([w.HBox(stages[:2]), w.HBox(stages[2:]), route, sched, m_box, tf_box, tb_box, out])
