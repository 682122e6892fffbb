"""Library pieces added for lessons 02-04: the dashboard's "train for real" button and torch's own orders."""

from __future__ import annotations

import pytest
import torch

from course_lib.costs import costs_from
from course_lib.errors import CourseError
from course_lib.schedules.builders import build_schedule
from course_lib.schedules.validate import check
from course_lib.timeline import MEASURED_COMPUTE, SIMULATED
from course_lib.widgets.train_dashboard import TrainSettings, training_dashboard

TINY = TrainSettings(n_layers=2, steps=2, seq_len=8, device="cpu")


def test_train_button_trains_the_chosen_schedule_and_keeps_the_simulated_chart():
    torch.manual_seed(0)
    dash = training_dashboard("gpipe", p=2, m=4, settings=TINY)
    simulated_png = dash.image.value
    assert simulated_png and dash.timeline.source == SIMULATED
    dash.p_slider.value = 3
    dash.train_button.click()
    run = dash.last_run
    assert run is not None and len(run.losses) == 2
    assert run.measured.source == MEASURED_COMPUTE and run.simulated.source == SIMULATED
    assert run.measured.n_devices == 3 and run.result.schedule == "gpipe"
    assert run.result.peak_inflight == [4, 4, 4]  # GPipe: every stage holds all m micro-batches
    assert "gpipe, p=3, m=4" in dash.train_text and MEASURED_COMPUTE in dash.train_text
    assert dash.timeline.source == SIMULATED  # the chart above still shows what the sliders say
    assert not dash.train_button.disabled


def test_train_button_explains_a_setting_the_engine_refuses():
    # 1 block + embedding + head = 3 layers: 3 stages fit, 4 cannot (the simulation alone would allow it)
    dash = training_dashboard("1f1b", p=4, m=2, settings=TrainSettings(n_layers=1, steps=1, device="cpu"))
    dash.train_button.click()
    assert dash.last_run is None
    assert dash.train_text.startswith("cannot train this combination:")
    assert "4 stages" in dash.train_text and "3 layers" in dash.train_text


def test_costs_from_a_run_set_the_sliders_time_scale():
    dash = training_dashboard("1f1b", p=2, m=2, settings=TINY)
    dash.train_button.click()
    again = training_dashboard("1f1b", p=2, m=2, run=dash.last_run, settings=TINY)
    costs, measured = again.costs, costs_from([dash.last_run.measured], "mean", equal_stages=True)
    # a full backward measures i + w together; the sliders split it evenly (T_I = T_W)
    assert costs.f == measured.f > 0 and costs.i == costs.w == measured.i / 2 > 0
    assert again.boundary_bytes == max(dash.last_run.measured.boundary_bytes) > 0
    # the simulated step is (m + p - 1) * (f + i + w) with equal stages and free links
    assert again.timeline.makespan == pytest.approx(3 * (costs.f + costs.i + costs.w))


def test_bad_settings_are_refused_up_front():
    with pytest.raises(CourseError, match="steps must be >= 1, got 0"):
        training_dashboard(settings=TrainSettings(steps=0))


def test_torch_gpipe_order_is_ours_and_torch_1f1b_last_rank_is_shifted():
    from course_lib.schedules.torch_orders import torch_order

    try:
        gpipe = torch_order("ScheduleGPipe", 4, 6)
        theirs = torch_order("Schedule1F1B", 4, 6)
    except CourseError as err:
        pytest.skip(str(err))
    assert gpipe.orders == build_schedule("gpipe", 4, 6).orders and check(gpipe) == []
    ours = build_schedule("1f1b", 4, 6)
    assert theirs.orders[:3] == ours.orders[:3]
    if theirs.orders[3] == ours.orders[3]:
        pytest.skip(f"torch {torch.__version__} fixed Schedule1F1B's last rank")
    assert " ".join(map(str, theirs.orders[3])) == "3F1 3B0 3F2 3B1 3F3 3B2 3F4 3B3 3F5 3B4 3F6 3B5"
    assert check(theirs)[0].startswith("device 3 runs 3F6, but micro-batch 6 does not exist")


def test_torch_order_names_what_it_cannot_build():
    from course_lib.schedules.torch_orders import torch_order

    with pytest.raises(CourseError, match="no schedule class 'ScheduleNope'"):
        torch_order("ScheduleNope", 2, 2)
    with pytest.raises(CourseError, match="refuses p=4, m=3"):
        torch_order("Schedule1F1B", 4, 3)
