"""The planner widget: controls re-plan, the table ranks, the chart follows the chosen layout."""

from __future__ import annotations

import html

import ipywidgets as widgets
import pytest

from course_lib.planner import plan
from course_lib.widgets.planner import PlannerWidget, planner_widget


def _first_row(box: PlannerWidget) -> str:
    return box.table_text.splitlines()[1]


def test_widgets_are_attributes_and_the_table_is_the_libraries_plan():
    box = planner_widget("megatron-145b", "a100-selene", gpus=64, global_batch=64)
    assert isinstance(box, widgets.VBox)
    controls = [box.model_dropdown, box.gpus_dropdown, box.batch_dropdown, box.choice_dropdown]
    assert [c.description for c in controls] == ["model", "GPUs", "global batch", "chart of row"]
    best = plan("megatron-145b", "a100-selene", 64, 64).best
    assert f"t={best.t} p={best.p} d={best.d} b={best.b} {best.schedule} v={best.v}" in _first_row(box)
    assert box.image.value[:4] == b"\x89PNG"
    # the chart's title and colour key sit under it as HTML: what it shows, that it is simulated; an
    # interleaved layout of p=16, v=5 has too many actions to draw one by one: its busy stretches
    key = html.unescape(box.chart_key.value)
    assert f"row 0: t={best.t} p={best.p}" in key and "(simulated)" in key and "source: simulated" in key
    assert best.schedule == "interleaved-1f1b" and best.v == 5 and "busy: forwards and backwards" in key


def test_a_dense_layout_is_drawn_as_busy_stretches_and_its_bubble_stands_beside_the_tables():
    """Issue 38: lesson 09's chart drew 16 rows of 320 hairline boxes and said 10.1% beside the table's
    2.2%. Now: bars a reader can see, and both bubbles with the one between them that links the two."""
    import re

    from course_lib.charts.occupancy import LEGIBLE_ACTIONS, busy_stretches, dense

    box = planner_widget("megatron-145b", "a100-selene", gpus=512, global_batch=512)
    row, tl = box.chosen, box.chosen.timeline
    assert (row.p, row.v, tl.n_microbatches) == (16, 5, 32) and len(tl.spans) == 16 * 320 and dense(tl)
    stretches = busy_stretches(tl)
    assert max(len(r) for r in stretches) <= LEGIBLE_ACTIONS / 2  # bars, not hairlines
    busy = sum(b - a for r in stretches for a, b in r)
    assert busy >= sum(s.duration for s in tl.spans)  # joining only covers gaps, never drops work
    drawn, over_all, table = (float(x) / 100 for x in re.findall(r"([\d.]+)%", box.bubbles)[:3])
    assert drawn == pytest.approx(tl.bubble_fraction, abs=6e-4)
    assert table == pytest.approx(row.bubble_share, abs=6e-4)
    assert table <= over_all < drawn  # all 128 micro-batches: fill and drain weigh less than in the 32 drawn
    assert "share of the whole step" in box.bubbles and box.bubbles in html.unescape(box.chart_key.value)
    box.choice_dropdown.value = 1  # 1F1B at p=16: 64 actions a device, drawn one by one
    assert box.chosen.schedule == "1f1b" and not dense(box.chosen.timeline)
    assert "forward" in html.unescape(box.chart_key.value) and "busy:" not in box.chart_key.value


def test_changing_gpus_batch_and_model_replans():
    box = planner_widget("megatron-145b", "a100-selene", gpus=64, global_batch=64)
    before = _first_row(box)
    box.gpus_dropdown.value = 128
    assert box.result.gpus == 128 and _first_row(box) != before
    box.batch_dropdown.value = 256
    assert box.result.global_batch == 256
    box.model_dropdown.value = "megatron-18b"
    assert box.result.shape.name == "megatron-18b"
    best = plan("megatron-18b", "a100-selene", 128, 256).best
    assert f"d={best.d}" in _first_row(box)


def test_choosing_another_row_redraws_its_chart_from_the_planners_own_timeline(monkeypatch):
    import course_lib.widgets.planner as module

    box = planner_widget("megatron-145b", "a100-selene", gpus=64, global_batch=64)
    first = box.image.value
    # rows the simulator re-ranked (the fastest three) keep its timeline: drawing one simulates nothing
    monkeypatch.setattr(module, "pipeline_timeline", lambda *args: pytest.fail("simulated twice"))
    box.choice_dropdown.value = 1
    assert box.chosen is box.result.layouts[1] and box.chosen.timeline is not None
    assert box.image.value[:4] == b"\x89PNG" and box.image.value != first


def test_a_request_nothing_fits_shows_the_reason():
    box = planner_widget("megatron-145b", "a100-selene", gpus=64, global_batch=64)
    before = box.image.value
    box.model_dropdown.value = "megatron-1t"  # 1T parameters do not fit 64 GPUs
    assert box.table_text.startswith("no plan: no layout of megatron-1t fits 64 GPUs' memory")
    # the last chart stays, and the reason says whose chart it is
    assert box.image.value == before != b""
    assert "still the last plan's: megatron-145b, 64 GPUs, batch 64: row 0" in box.table.value
    assert "word-break:normal" in box.table.value  # the reason wraps between words, never inside one


def test_one_change_draws_one_chart_and_memory_is_in_gib():
    box = planner_widget("megatron-145b", "a100-selene", gpus=64, global_batch=64)
    drawn = []
    box.image.observe(lambda change: drawn.append(change["new"]), names="value")
    box.gpus_dropdown.value = 128  # re-plans; the choice list changes with it: still one chart
    assert len(drawn) == 1
    head = box.table_text.splitlines()[0]
    assert "memory GiB" in head and " GB" not in head and head.split()[0] == "row"
    best = box.result.layouts[0]
    assert f"{best.memory_per_gpu_bytes / 2**30:.1f}" in _first_row(box)
