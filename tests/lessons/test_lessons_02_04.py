"""Library pieces added for lessons 02-04: the dashboard's "train for real" button and torch's own orders."""

from __future__ import annotations

import _thread
import re
import threading
import time

import pytest
import torch

from course_lib.shelf.costs import costs_from
from course_lib.shelf.errors import CourseError
from course_lib.shelf.first_schedules import build_schedule
from course_lib.shelf.local_engine import LocalPipelineTrainer, TrainingStopped
from course_lib.shelf.reference import TrainConfig
from course_lib.shelf.timeline import MEASURED_COMPUTE, SIMULATED
from course_lib.shelf.validate import check
from course_lib.widgets.train_dashboard import TrainSettings, training_dashboard

TINY = TrainSettings(n_layers=2, steps=2, seq_len=8, device="cpu")
ENDLESS = TrainSettings(n_layers=2, steps=100_000, seq_len=8, device="cpu")  # ends only when stopped
STOPPED = re.compile(r"stopped after (\d+) of 100000 steps")


def test_train_button_trains_the_chosen_schedule_and_keeps_the_simulated_chart():
    torch.manual_seed(0)
    dash = training_dashboard("gpipe", p=2, m=4, settings=TINY)
    simulated_png = dash.image.value
    assert simulated_png and dash.timeline.source == SIMULATED
    dash.p_slider.value = 3
    dash.train_button.click()  # trains on a thread of its own (so that "stop" can be clicked meanwhile)
    assert dash.wait(timeout=120)
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
    assert dash.train() is None
    assert dash.last_run is None
    assert dash.train_text.startswith("cannot train this combination:")
    assert "4 stages" in dash.train_text and "3 layers" in dash.train_text


def test_costs_from_a_run_set_the_sliders_time_scale():
    dash = training_dashboard("1f1b", p=2, m=2, settings=TINY)
    dash.train()
    again = training_dashboard("1f1b", p=2, m=2, run=dash.last_run, settings=TINY)
    costs, measured = again.costs, costs_from([dash.last_run.measured], "mean", equal_stages=True)
    # a full backward measures i + w together; the sliders split it evenly (T_I = T_W)
    assert costs.f == measured.f > 0 and costs.i == costs.w == measured.i / 2 > 0
    assert again.boundary_bytes == max(dash.last_run.measured.boundary_bytes) > 0
    # the simulated step is (m + p - 1) * (f + i + w) with equal stages and free links
    assert again.timeline.makespan == pytest.approx(3 * (costs.f + costs.i + costs.w))


def test_after_a_run_the_dashboard_and_the_run_show_one_simulated_bubble():
    """Fails before: after training 1f1b, p=8, m=16 on the transatlantic link, the chart above said 92.4%
    and the run's own simulated chart 85.7% (the sliders kept another p's costs)."""
    dash = training_dashboard("1f1b", p=4, m=4, link="transatlantic", settings=TINY)
    dash.p_slider.value = 3
    run = dash.train()
    assert dash.timeline.source == SIMULATED
    assert dash.timeline.bubble_fraction == pytest.approx(run.simulated.bubble_fraction)
    assert dash.timeline.makespan == pytest.approx(run.simulated.makespan)
    assert f"{run.simulated.bubble_fraction:.1%}" in dash.summary_text.splitlines()[0]


def wait_until(condition, what: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"no {what} within {timeout_s} s"
        time.sleep(0.02)


@pytest.fixture
def endless_dashboard():
    """A training dashboard whose runs end only when stopped; whatever a test leaves running is stopped."""
    dash = training_dashboard("zb-h1", p=2, m=4, settings=ENDLESS)
    try:
        yield dash
    finally:
        dash.stop()
        dash.wait(timeout=20)


def test_stop_button_ends_a_running_training_in_one_line_and_the_dashboard_works_on(endless_dashboard):
    dash = endless_dashboard
    dash.train_button.click()
    wait_until(lambda: "1 of 100000 steps done" in dash.train_text, "progress")  # mid-run
    assert dash.train_button.disabled and not dash.stop_button.disabled
    with pytest.raises(CourseError, match="a run is already going"):
        dash.train()  # one run at a time, also from code
    dash.stop_button.click()  # as the kernel would: on another thread than the training's
    assert dash.wait(timeout=20), "the run did not stop"
    done = int(STOPPED.fullmatch(dash.train_text)[1])
    assert 1 <= done < 100_000 and dash.last_run is None
    line = {"output_type": "stream", "name": "stdout", "text": dash.train_text + "\n"}
    assert dash.output.outputs == (line,)  # that one line under the chart, no traceback
    assert not dash.train_button.disabled and dash.stop_button.disabled
    # the dashboard works on: the sliders redraw, and a new run trains to its end
    dash.p_slider.value = 3
    assert dash.timeline.n_devices == 3 and dash.summary_text.startswith("bubble:")
    dash.settings = TINY
    dash.train_button.click()
    assert dash.wait(timeout=120)
    assert len(dash.last_run.losses) == 2 and dash.train_text.startswith("trained zb-h1, p=3, m=4")
    kinds = [out["output_type"] for out in dash.output.outputs]
    assert kinds == ["stream", "display_data"] and "image/png" in dash.output.outputs[1]["data"]


def test_an_interrupt_of_a_run_started_from_a_cell_is_one_line_not_a_traceback(endless_dashboard):
    dash, interrupted = endless_dashboard, threading.Event()

    def interrupt_once_it_trains():  # what Kernel > Interrupt does to a cell: SIGINT to the main thread
        try:
            wait_until(lambda: "1 of 100000" in dash.train_text, "progress")
            interrupted.set()
            _thread.interrupt_main()
        finally:
            if not interrupted.is_set():
                dash.stop()  # no progress: end the run anyway (the test fails below), never hang

    helper = threading.Thread(target=interrupt_once_it_trains, daemon=True)
    helper.start()
    assert dash.train() is None  # returns instead of raising KeyboardInterrupt
    helper.join()
    assert interrupted.is_set() and STOPPED.fullmatch(dash.train_text) and not dash.running
    assert dash.train_button.disabled is False and dash.stop_button.disabled is True


def test_the_engine_asks_stop_before_every_action_and_can_train_again():
    cfg = TrainConfig(n_layers=2, seq_len=8, batch_size=4, microbatches=2, steps=3, eval_batches=1)
    trainer = LocalPipelineTrainer(cfg, "1f1b", 2)
    asked: list[int] = []

    def never(done: int) -> bool:
        asked.append(done)
        return False

    trainer.train(progress=False, stop=never)
    per_step = len(trainer.order)
    assert asked == [0] * per_step + [1] * per_step + [2] * per_step  # the steps done so far, each time
    with pytest.raises(TrainingStopped) as stopped:
        trainer.train(progress=False, stop=lambda done: done == 1)
    assert isinstance(stopped.value, KeyboardInterrupt)  # whatever ends a run on Ctrl-C ends it on this
    assert len(trainer.train(steps=1, progress=False).losses) == 1  # stopped mid-run, still usable


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


def test_the_pipeline_picture_names_workers_arrows_and_gantt_boxes():
    import matplotlib.pyplot as plt

    from course_lib.widgets.pipeline_picture import pipeline_picture

    fig = pipeline_picture(p=4)
    workers, gantt = fig.axes
    texts = " ".join(t.get_text() for t in workers.texts)
    assert all(f"device {d}" in texts for d in range(4))
    assert "layers 0-20" in texts and "layers 62-81" in texts
    assert "activations" in texts and "gradient" in texts
    notes = " ".join(t.get_text() for t in gantt.texts)
    assert "runs F" in notes and "backward" in notes and "idle" in notes
    assert "bubble 75.0%" in gantt.get_title()  # one micro-batch through 4 stages: (p-1)/p idle
    plt.close(fig)


def test_lesson_04s_warm_up_text_printout_and_exercise_agree():
    # issue 24: the text says p-1-d forwards, the printout beside it and exercise 04.4 must count the same
    from support.committed import output_text, source

    from course_lib.lessons.answers import EXERCISES

    assert "**p − 1 − d forwards**" in source("04_1f1b", "4f5f6eb9")
    printed = dict(re.findall(r"device (\d): warm-up of (\d) forwards", output_text("04_1f1b", "8122ff4d")))
    assert {int(d): int(n) for d, n in printed.items()} == {d: 4 - 1 - d for d in range(4)}
    assert EXERCISES["04.4"].expected() == int(printed["1"])
