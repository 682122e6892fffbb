"""The dashboard: controls drive the simulation, bad sizes give a message, hooks for later lessons."""

from __future__ import annotations

import re
import threading
import time

import ipywidgets as widgets
import pytest

from course_lib.network import PRESETS
from course_lib.shelf.costs import Link
from course_lib.shelf.errors import CourseError
from course_lib.shelf.simulator import StageCosts
from course_lib.shelf.timeline import MEASURED, Timeline
from course_lib.widgets.controls import DESCRIPTION_PX, READOUT_PX
from course_lib.widgets.dashboard import PipelineDashboard, pipeline_dashboard


def _bubble_line(dash: PipelineDashboard) -> str:
    return dash.summary_text.splitlines()[0]


def test_widgets_are_attributes_with_descriptions():
    dash = pipeline_dashboard("1f1b", p=4, m=8)
    assert isinstance(dash, widgets.VBox)
    controls = [dash.schedule_dropdown, dash.p_slider, dash.m_slider, dash.v_slider, dash.link_dropdown]
    assert [c.description for c in controls] == [
        "schedule",
        "p (devices)",
        "m (micro-batches)",
        "v (stages per device)",
        "link",
    ]
    assert {"naive", "gpipe", "1f1b", "interleaved-1f1b", "zb-h1"} <= set(dash.schedule_dropdown.options)
    assert dash.v_slider.disabled  # 1f1b has one stage per device
    assert dash.image.value[:4] == b"\x89PNG"


def test_changing_p_m_schedule_changes_the_printed_bubble():
    dash = pipeline_dashboard("1f1b", p=4, m=8)
    assert _bubble_line(dash).startswith("bubble: 27.3% of device-time idle (simulated)")
    assert "peak micro-batches in flight per device: 4, 3, 2, 1" in dash.summary_text
    dash.p_slider.value = 8
    assert _bubble_line(dash).startswith("bubble: 46.7%")  # 7/15
    dash.m_slider.value = 32
    assert _bubble_line(dash).startswith("bubble: 17.9%")  # 7/39
    dash.schedule_dropdown.value = "gpipe"
    assert _bubble_line(dash).startswith("bubble: 17.9%")  # same bubble ...
    assert "in flight per device: 32, 32" in dash.summary_text  # ... but GPipe holds all m
    dash.schedule_dropdown.value = "zb-h1"
    assert _bubble_line(dash).startswith("bubble: 6.8%")  # 7/(3*32+7): a third of the idle time
    dash.schedule_dropdown.value = "interleaved-1f1b"
    assert not dash.v_slider.disabled
    assert _bubble_line(dash).startswith("bubble: 9.9%")  # 7/(2*32+7)
    assert "formula (p-1)/(v*m+p-1) = 9.9%" in _bubble_line(dash)


def test_a_slow_link_shows_up():
    """Fails before the dashboard read network.PRESETS: it offered four fallback links of its own."""
    dash = pipeline_dashboard("gpipe", p=4, m=8)
    assert list(dash.link_dropdown.options) == ["free", *PRESETS]
    free = dash.timeline.makespan
    dash.link_dropdown.value = "transatlantic"
    assert dash.links["transatlantic"] == PRESETS["transatlantic"].link  # one set of numbers
    assert dash.timeline.makespan > free + 2 * 3 * PRESETS["transatlantic"].link.latency_s
    assert "link: transatlantic" in dash.summary_text
    assert "formula (p-1)/(m+p-1) does not apply here" in _bubble_line(dash)  # links are not free


def test_invalid_combination_is_a_message_not_a_traceback():
    dash = pipeline_dashboard("interleaved-1f1b", p=4, m=8)
    last_good = dash.image.value
    dash.m_slider.value = 9
    assert dash.summary_text.startswith("cannot simulate this combination")
    assert "m=8 or m=10" in dash.summary_text
    # the last good chart stays (no empty image), named as the setting it shows, beside the reason
    assert dash.image.value == last_good != b"" and dash.timeline is None
    assert "still the last setting" in dash.summary.value and "p=4, m=8" in dash.summary.value
    dash.m_slider.value = 10  # and it recovers
    assert _bubble_line(dash).startswith("bubble:")


def test_extra_controls_and_train_hook():
    seen = []
    extra = widgets.Checkbox(description="my option")

    def on_train(config, control):
        seen.append(config)
        return Timeline(MEASURED, 1, list(dash.timeline.spans[:0]), schedule_name="measured run")

    dash = pipeline_dashboard("1f1b", p=2, m=4, extra_controls=[extra], on_train=on_train)
    row = dash.children[1].children
    assert extra in row and dash.train_button in row and dash.stop_button in row and dash.panel.hint in row
    assert dash.train_button.description == "train for real" and dash.stop_button.disabled
    assert "stop" in dash.panel.hint.value and "Kernel &gt; Interrupt" in dash.panel.hint.value
    dash.train_button.click()  # on a thread of its own (RunPanel)
    assert dash.wait(timeout=30)
    assert seen[0].schedule == "1f1b" and (seen[0].p, seen[0].m, seen[0].v) == (2, 4, 1)
    assert "(measured)" in _bubble_line(dash)
    assert dash.train_text == "trained 1f1b, p=2, m=4 for real: the chart shows that run"


def test_train_hook_errors_become_one_line():
    def broken(config, control):
        raise RuntimeError("no GPU here")

    dash = pipeline_dashboard("1f1b", p=2, m=2, on_train=broken)
    assert dash.train() is None
    assert dash.train_text == "the run failed: RuntimeError: no GPU here"
    line = {"output_type": "stream", "name": "stdout", "text": dash.train_text + "\n"}
    assert dash.output.outputs == (line,)
    assert dash.image.value != b"" and dash.summary_text.startswith("bubble:")  # the chart stays


def test_the_stop_button_ends_a_hooked_run_with_one_line_and_says_how_far_it_got():
    started = threading.Event()

    def endless(config, control):  # as an engine does: asks control(steps_done) many times a second
        control.steps = 1000
        for step in range(1000):
            started.set()
            if control(step):
                raise KeyboardInterrupt("all 2 rank processes ended")  # the launcher's words
            time.sleep(0.01)

    dash = pipeline_dashboard("1f1b", p=2, m=2, on_train=endless)
    dash.train_button.click()
    assert started.wait(10) and dash.running and not dash.stop_button.disabled
    dash.stop_button.click()
    assert dash.wait(timeout=10)
    assert re.fullmatch(r"stopped after \d+ of 1000 steps; all 2 rank processes ended", dash.train_text)
    assert not dash.train_button.disabled and dash.stop_button.disabled


def test_custom_links():
    dash = pipeline_dashboard("gpipe", p=3, m=2, links={"slow": Link(latency_s=1.0)}, link="slow")
    assert dash.timeline.makespan == pytest.approx((2 + 3 - 1) * 0.06 + 2 * (3 - 1) * 1.0)


def test_the_printed_formula_belongs_to_the_schedule_shown():
    dash = pipeline_dashboard("naive", p=4, m=8)
    assert _bubble_line(dash) == "bubble: 75.0% of device-time idle (simulated); formula (p-1)/p = 75.0%"
    dash.schedule_dropdown.value = "zb-h1"  # F = I = W: idle (p-1)T against 3mT of work per device
    assert _bubble_line(dash).endswith("formula (p-1)(F+I-W) / [m(F+I+W) + (p-1)(F+I-W)] = 11.1%")
    dash.m_slider.value = 2  # m < p: outside the Table 2 form's range
    assert _bubble_line(dash).endswith(
        "does not apply here; it holds for W <= min(F, I), and m >= p unless W = 0; "
        "equal stage costs, free links"
    )
    dash = pipeline_dashboard("1f1b", p=2, m=4, costs=StageCosts([0.01, 0.03], [0.02, 0.02], [0.0, 0.0]))
    assert "formula (p-1)/(m+p-1) does not apply here" in _bubble_line(dash)  # unequal stages


def _px_per_value(slider: widgets.IntSlider) -> float:
    """Pixels of track between neighbouring values, from the slider's own layout."""
    width, description = (
        int(x.removesuffix("px")) for x in (slider.layout.width, slider.style.description_width)
    )
    return (width - description - READOUT_PX) / (slider.max - slider.min + 1)


def test_every_slider_leaves_room_to_pick_each_value_with_a_mouse():
    """Fails before sliders had a layout width: lesson 04's m slider was 63 px for 32 values."""
    dash = pipeline_dashboard("1f1b", p=4, m=8, max_p=16, max_m=64)
    for slider in (dash.p_slider, dash.m_slider, dash.v_slider):
        assert slider.style.description_width == f"{DESCRIPTION_PX}px"
        assert _px_per_value(slider) >= 8, slider.description


def test_the_model_is_held_fixed_as_p_grows_unless_unticked():
    """Fails before: each device kept the starting p's share, so p = 8 simulated twice the model."""
    dash = pipeline_dashboard("naive", p=4, m=2, costs=StageCosts.fused(f=0.01, b=0.02))
    one_model = 2 * 4 * 0.03  # naive: m micro-batches, each through the whole model, one stage at a time
    assert dash.timeline.makespan == pytest.approx(one_model)
    dash.p_slider.value = 8
    assert dash.config().costs.f == pytest.approx(0.005)  # a device now holds 1/8 of the model
    assert dash.timeline.makespan == pytest.approx(one_model)  # the same model: the same naive step
    dash.fixed_model_checkbox.value = False
    assert dash.timeline.makespan == pytest.approx(2 * one_model)  # 8 quarters: twice the model


def test_a_setting_seen_before_comes_from_the_cache():
    dash = pipeline_dashboard("1f1b", p=4, m=8)
    first, png = dash.timeline, dash.image.value
    dash.m_slider.value = 16
    dash.m_slider.value = 8
    assert dash.timeline is first and dash.image.value == png


def test_byte_labels_keep_number_and_unit_together():
    dash = pipeline_dashboard("1f1b", p=4, m=8)
    held = next(line for line in dash.summary_text.splitlines() if line.startswith("peak boundary"))
    assert "\u00a0MiB" in held and " MiB" not in held
    assert "word-break:normal" in dash.summary.value


def test_the_chart_title_and_colour_key_sit_under_the_chart_as_html():
    dash = pipeline_dashboard("zb-h1", p=4, m=8)
    assert "chart: zb-h1: p=4, m=8, source: simulated" in dash.summary.value
    assert all(label in dash.summary.value for label in ("F: forward", "I: backward", "W: backward", "idle"))
    assert "B: backward" not in dash.summary.value  # only the kinds the chart shows
    assert dash.summary_text.startswith("bubble:")  # the figures come first, as before


@pytest.mark.processes
def test_stop_ends_a_distributed_run_and_every_process_it_started():
    """Lesson 08's hook: "stop" ends the ranks' processes (the launcher's should_stop) and says so."""
    import functools
    import multiprocessing

    from course_lib.lessons.scale_out import train_distributed_for

    hook = functools.partial(train_distributed_for, n_layers=2, steps=100_000, seq_len=8)
    dash = pipeline_dashboard("1f1b", p=2, m=2, on_train=hook)
    dash.train_button.click()
    deadline = time.monotonic() + 120
    try:  # stop while the ranks start (the launcher asks should_stop as soon as they are spawned)
        while not re.search(r"0 of 100000 steps done, [1-9]", dash.train_text):
            assert time.monotonic() < deadline and dash.running, dash.train_text
            time.sleep(0.05)
    finally:
        dash.stop_button.click()
    assert dash.wait(timeout=30)
    assert re.fullmatch(r"stopped after \d+ of 100000 steps; all 2 rank processes ended", dash.train_text)
    assert multiprocessing.active_children() == []  # no rank left behind


def test_a_saved_notebook_names_the_widget_before_its_cell_runs():
    from course_lib.widgets.planner import planner_widget

    bundle = pipeline_dashboard("1f1b", p=2, m=2)._repr_mimebundle_()
    assert bundle["text/plain"] == "[the pipeline dashboard: run this cell to use it]"  # not VBox(...)
    assert repr(planner_widget(gpus=64, global_batch=64)) == "[the planner: run this cell to use it]"


def test_train_without_a_hook_says_how_to_get_one():
    from course_lib.shelf.errors import CourseError

    with pytest.raises(CourseError, match="on_train"):
        pipeline_dashboard("1f1b", p=2, m=2).train()


def test_a_stopped_runs_line_shows_only_once_the_panel_takes_the_next_run():
    """The race a browser test found: "stopped after N steps" was said while the train button was still
    disabled (and the run still held), so a click right after reading it did nothing."""
    from course_lib.widgets.run_panel import RunControl, RunPanel

    panel, seen = RunPanel(), []
    say = panel.say
    panel.say = lambda text, fig=None: (seen.append((text, panel.train_button.disabled, panel.running)),
                                        say(text, fig))  # fmt: skip

    def stopped(control: RunControl):
        control(3)
        raise KeyboardInterrupt("all 2 rank processes ended")

    def refused(control: RunControl):
        raise CourseError("m must be at least 1")

    for job, line in ((stopped, "stopped after 3 steps; all 2 rank processes ended"),
                      (refused, "cannot train this combination: m must be at least 1")):  # fmt: skip
        assert panel.run("training", job, shown=lambda value: None) is None
        assert seen[-1] == (line, False, False)  # the button on, the run released, then the line
