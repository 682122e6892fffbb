"""Plots: every figure states its source, Gantt boxes match the Timeline, curves match the formula."""

from __future__ import annotations

from dataclasses import replace

import matplotlib
import pytest
from matplotlib.collections import PathCollection
from matplotlib.figure import Figure

matplotlib.use("Agg")

from course_lib.charts.bubble_and_memory import plot_bubble_vs_m, plot_memory  # noqa: E402
from course_lib.charts.gantt import plot_timeline, save_timeline_png, time_scale  # noqa: E402
from course_lib.schedules.closed_forms import gpipe_bubble  # noqa: E402
from course_lib.shelf.costs import (
    Link,  # noqa: E402
    StageCosts,  # noqa: E402
)
from course_lib.shelf.first_schedules import build_schedule  # noqa: E402
from course_lib.shelf.schedule import Kind  # noqa: E402
from course_lib.shelf.simulator import simulate  # noqa: E402
from course_lib.shelf.timeline import MEASURED, Timeline  # noqa: E402


def _axes():
    return Figure(figsize=(10, 4)).add_subplot()


def _boxes(ax) -> dict[str, list[tuple[float, float]]]:
    """The chart's boxes: colour -> (left edge, row) of each box in that colour's path."""
    from matplotlib.colors import to_hex

    (boxes,) = [c for c in ax.collections if isinstance(c, PathCollection)]
    found: dict[str, list[tuple[float, float]]] = {}
    for path, face in zip(boxes.get_paths(), boxes.get_facecolors(), strict=True):
        corners = path.vertices.reshape(-1, 5, 2)  # MOVETO, 3 LINETO, CLOSEPOLY per box
        found[to_hex(face)] = [(float(x), float(y0 + y2) / 2) for (x, y0), _, (_, y2), _, _ in corners]
    return found


def test_gantt_title_states_source_and_bubble():
    tl = simulate(build_schedule("1f1b", 4, 8))
    ax = plot_timeline(tl, ax=_axes())
    title = ax.get_title()
    assert "source: simulated" in title and "bubble 27.3%" in title and "1f1b: p=4, m=8" in title
    # a custom title keeps the source line
    measured = Timeline(MEASURED, tl.n_devices, tl.spans, schedule_name="real run")
    title = plot_timeline(measured, ax=_axes(), title="my run").get_title()
    assert title.startswith("my run\n") and "source: measured ·" in title


def test_gantt_draws_one_box_per_span_device_0_on_top():
    tl = simulate(build_schedule("gpipe", 3, 4))
    ax = plot_timeline(tl, ax=_axes())
    boxes = sorted(box for per_colour in _boxes(ax).values() for box in per_colour)
    assert boxes == sorted((s.start, s.device) for s in tl.spans) and len(boxes) == 24
    bottom, top = ax.get_ylim()
    assert bottom > top  # inverted: device 0 is the top row
    assert [t.get_text() for t in ax.get_yticklabels()] == ["device 0", "device 1", "device 2"]
    assert ax.get_xlabel() == "time (s)"


def test_labels_only_where_they_fit():
    few = plot_timeline(simulate(build_schedule("1f1b", 2, 3)), ax=_axes())
    assert sorted(t.get_text() for t in few.texts) == sorted("001122" * 2)
    many = plot_timeline(simulate(build_schedule("1f1b", 8, 64)), ax=_axes())
    assert len(many.texts) == 0  # 1/213 of the width per forward: no digit fits


def test_transfers_drawn_on_request_and_time_units():
    tl = simulate(build_schedule("gpipe", 3, 2), StageCosts(1e-3, 1e-3, 1e-3), links=Link(latency_s=2e-4))
    ax = plot_timeline(tl, ax=_axes(), show_transfers=True)
    assert ax.get_xlabel() == "time (ms)"
    lines = ax.collections[-1]
    assert len(lines.get_segments()) == len(tl.transfers) == 8
    assert time_scale(5e-6) == (1e6, "µs") and time_scale(3.0) == (1.0, "s")


def test_save_png_writes_a_png(tmp_path):  # its speed (target 120 ms) is bench/bench_simulator.py's
    tl = simulate(build_schedule("1f1b", 8, 64))
    path = save_timeline_png(tl, str(tmp_path / "g.png"))
    with open(path, "rb") as fh:
        assert fh.read(8) == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("convention", ["gpipe", "megatron"])
def test_bubble_curve_points_sit_on_the_formula(convention):
    ax = plot_bubble_vs_m(ps=(2, 4), ms=list(range(1, 13)), ax=_axes(), convention=convention)
    points = [line for line in ax.lines if line.get_label().startswith("simulated")]
    assert [line.get_label() for line in points] == ["simulated, p=2", "simulated, p=4"]
    for p, line in zip((2, 4), points, strict=True):
        for m, y in zip(line.get_xdata(), line.get_ydata(), strict=True):
            assert y == pytest.approx(gpipe_bubble(p, m, 1, convention))
    title = ax.get_title()
    assert "source: simulated" in title
    assert ("(p-1)/(m+p-1)" if convention == "gpipe" else "(p-1)/m") in title.split("\n")[1]
    assert gpipe_bubble(4, 12) == pytest.approx(3 / 15) and gpipe_bubble(4, 12, convention="megatron") == 0.25


def test_bubble_curve_interleaved_skips_invalid_m():
    ax = plot_bubble_vs_m(ps=(4,), ms=[4, 8, 9], schedule="interleaved-1f1b", virtual=2, ax=_axes())
    (points,) = [line for line in ax.lines if line.get_label().startswith("simulated")]
    assert list(points.get_xdata()) == [4, 8]  # m=9 with p=4 is not a valid interleaved size
    for m, y in zip(points.get_xdata(), points.get_ydata(), strict=True):
        assert y == pytest.approx(gpipe_bubble(4, m, 2))


def test_memory_bars_match_peaks():
    tl = simulate(build_schedule("1f1b", 4, 8), boundary_bytes=2**20)
    ax = plot_memory(tl, ax=_axes())
    assert [bar.get_height() for bar in ax.patches] == [4, 3, 2, 1]
    assert [t.get_text() for t in ax.texts] == ["4.0 MiB", "3.0 MiB", "2.0 MiB", "1.0 MiB"]
    assert "source: simulated" in ax.get_title() and "lower bound" in ax.get_title()
    assert "p=4, m=8" in ax.get_title()  # the Timeline knows its micro-batches
    given = plot_memory(simulate(build_schedule("1f1b", 4, 8), stash_bytes=[2**20] * 4), ax=_axes())
    assert "lower bound" not in given.get_title()  # stash sizes given: no caveat
    # from a run, the held micro-batches and bytes are counted, not timed: the label says so
    run = replace(tl, source="measured compute + simulated links")
    assert "source: counted in a run" in plot_memory(run, ax=_axes()).get_title()


@pytest.mark.parametrize("name, v", [("interleaved-1f1b", 2), ("looped-bfs", 3), ("interleaved-zb", 2)])
def test_a_devices_chunks_are_told_apart_by_shade(name, v):
    """Fails before chunk shading: every box of a kind had one colour, whichever stage it belonged to."""

    from course_lib.charts.gantt import COLORS, chunks_of, shade

    tl = simulate(build_schedule(name, 2, 4, v))
    chunk = chunks_of(tl)
    assert chunk == {(d, s): s // 2 for s in range(2 * v) for d in (s % 2,)}  # loop placement: chunk s // p
    ax = plot_timeline(tl, ax=_axes())
    expected: dict[str, list[tuple[float, float]]] = {}
    for span in tl.spans:
        face = shade(COLORS[span.action.kind], chunk[span.device, span.action.stage], v)
        expected.setdefault(face, []).append((span.start, span.device))
    assert {face: sorted(boxes) for face, boxes in _boxes(ax).items()} == {
        face: sorted(boxes) for face, boxes in expected.items()
    }
    assert len({shade(COLORS[Kind.F], c, v) for c in range(v)}) == v  # v distinct shades
    assert shade(COLORS[Kind.F], 0, v) == COLORS[Kind.F].lower()  # a device's first stage keeps the colour
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert [x for x in labels if x.startswith("chunk")] == [f"chunk {c}: a device's stage {c + 1} of {v}"
                                                             for c in range(v)]  # fmt: skip


def test_one_stage_per_device_keeps_plain_colours_and_no_chunk_legend():

    from course_lib.charts.gantt import COLORS

    tl = simulate(build_schedule("zb-h2", 3, 5))
    ax = plot_timeline(tl, ax=_axes())
    plain = {COLORS[k].lower() for k in (Kind.F, Kind.I, Kind.W)}
    assert set(_boxes(ax)) == plain
    assert not any(t.get_text().startswith("chunk") for t in ax.get_legend().get_texts())


def test_png_ticks_and_key_land_where_matplotlibs_do():
    """save_timeline_png draws its ticks and key as plain artists (``draw_key``...): the same words
    as plot_timeline's ticks, axis label and legend, within a pixel of where matplotlib puts those."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from course_lib.charts.gantt import _draw_chart, draw_key, draw_x_axis

    tl = simulate(build_schedule("zb-v", 4, 8, 2))

    def axes():
        return Figure(figsize=(10, 4), dpi=100).add_axes((0.1, 0.12, 0.62, 0.72))

    real = plot_timeline(tl, ax=axes())
    plain = axes()
    key = _draw_chart(tl, plain, False, None, 0, None)
    draw_x_axis(plain)
    draw_key(plain, key.rows, key.entries, 8.0)
    FigureCanvasAgg(plain.figure).draw()
    renderer = FigureCanvasAgg(real.figure).get_renderer()
    real.figure.draw(renderer)
    in_view = [t for t in real.get_xticklabels() if 0 <= t.get_position()[0] <= real.get_xlim()[1]]
    expected = in_view + [real.xaxis.label] + real.get_yticklabels() + real.get_legend().get_texts()
    assert [t.get_text() for t in plain.texts] == [t.get_text() for t in expected]
    for ours, theirs in zip(plain.texts, expected, strict=True):
        a, b = ours.get_window_extent(renderer), theirs.get_window_extent(renderer)
        assert abs(a.x0 - b.x0) < 1.5 and abs(a.y0 - b.y0) < 1.5, ours.get_text()
