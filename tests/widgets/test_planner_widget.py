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
    # the chart's title and colour key sit under it as HTML: what it shows, that it is simulated, and
    # the shade of each of an interleaved layout's chunks
    key = html.unescape(box.chart_key.value)
    assert f"row 0: t={best.t} p={best.p}" in key and "(simulated)" in key and "source: simulated" in key
    last_chunk = f"chunk {best.v - 1}: a device's stage {best.v} of {best.v}"
    assert best.schedule == "interleaved-1f1b" and last_chunk in key


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
