"""Issue 30 in the browser: every run a student starts stops the course's one way, and a slider drag
redraws once.

- A run started by "train for real" in two dashboards (the local engine's, and lesson 08's, whose
  hook starts one process per device): "stop" ends it with one line (processes: "all N rank processes
  ended"); the time from the click to that line is printed and kept in artifacts/browser/stop_times.txt.
- A training cell (as lesson 00's): Kernel > Interrupt ends it with one line, no traceback.
- A refused setting keeps the chart (the same PNG stays, beside the reason).
- One drag of lesson 04b's devices slider and of lesson 05's budget slider: one redraw each (counted
  in the kernel, as new PNGs of the widget's chart).

Try it:  PYTHONPATH=$PWD .venv/bin/python -m pytest -q tests/browser/test_stop_and_redraw.py
"""

from __future__ import annotations

import re
import time

import pytest
from lab_page import (
    WIDGET_TIMEOUT_MS,
    DashboardView,
    assert_no_traceback,
    menu,
    open_and_run_all,
    output_texts,
    wait_until_all_ran,
    write_notebook,
)
from lab_server import ARTIFACTS, LabServer

pytestmark = [pytest.mark.timeout(300), pytest.mark.processes]  # a JupyterLab server and a browser

ENDLESS = 100_000  # steps: a run that ends only when stopped
STOP_TIMEOUT_MS = 20_000  # generous for a busy machine; the measured time is printed and kept
SETUP = "%matplotlib inline\nfrom course_lib import lesson\nlesson.setup()"


def counted(build: str) -> str:
    """A cell that shows the widget `build` makes, with a line under it counting its chart's redraws."""
    return (
        "import ipywidgets as widgets\n"
        f"box = {build}\n"
        "redraws = widgets.HTML('redraws: 0')\n"
        "def count(change, n=[0]):\n"
        "    n[0] += 1\n"
        "    redraws.value = f'redraws: {n[0]}'\n"
        "box.image.observe(count, names='value')\n"
        "widgets.VBox([box, redraws])"
    )


def stopped_within(page, dash: DashboardView, pattern: str) -> tuple[str, float]:
    """Click "stop" and wait for the line matching `pattern`: (the line, seconds from the click)."""
    clicked = time.monotonic()
    dash.button("stop").click()
    line = dash.wait_for_output(pattern, STOP_TIMEOUT_MS).strip()
    return line, time.monotonic() - clicked


def keep(what: str, seconds: float) -> None:
    print(f"{what}: {seconds:.2f} s from the click to the one line")
    with open(ARTIFACTS / "stop_times.txt", "a") as file:
        file.write(f"{what}: {seconds:.2f} s\n")


def test_stop_ends_button_started_runs_in_two_dashboards_and_interrupt_ends_a_training_cell(
    page, lab: LabServer
):
    cells = [
        SETUP,
        "from course_lib.widgets.train_dashboard import TrainSettings, training_dashboard\n"
        f"settings = TrainSettings(n_layers=8, steps={ENDLESS}, seq_len=16, device='cpu')\n"
        "training_dashboard('1f1b', p=4, m=8, settings=settings)",
        "import functools\n"
        "from course_lib.widgets.dashboard import pipeline_dashboard\n"
        "from course_lib.lessons.scale_out import train_distributed_for\n"
        f"hook = functools.partial(train_distributed_for, n_layers=8, steps={ENDLESS}, seq_len=16)\n"
        "pipeline_dashboard('1f1b', p=2, m=4, on_train=hook, max_p=8, max_m=16)  # lesson 08's, longer",
        "from dataclasses import replace\n"
        "from course_lib.shelf.reference import TrainConfig, train\n"
        f"cfg = TrainConfig(n_layers=8, steps={ENDLESS}, seq_len=16, batch_size=4, microbatches=2)\n"
        "train(replace(cfg, steps=1), progress=False)  # what train imports on first use is in by now\n"
        "print('training until interrupted')\n"
        "result = train(cfg, progress=False)",
    ]
    name = write_notebook(lab.root, "browser_stopping.ipynb", cells)
    open_and_run_all(page, lab, name, timeout_ms=None)  # its last cell trains until interrupted
    printed = page.locator(".jp-OutputArea-output", has_text="training until interrupted")  # not the source
    printed.first.wait_for(timeout=120_000)
    page.wait_for_timeout(2000)  # inside the training loop by now
    menu(page, "Kernel", "Interrupt Kernel")
    wait_until_all_ran(page)
    texts = output_texts(page)
    interrupted = [t for t in texts if "stopped by Kernel > Interrupt" in t]
    assert len(interrupted) == 1 and "Traceback" not in interrupted[0] and 'File "' not in interrupted[0]
    assert interrupted[0].strip().count("\n") == 0, interrupted[0]  # one line
    said = page.locator(".jp-OutputArea-output", has_text="Kernel > Interrupt")
    cell = page.locator(".jp-CodeCell", has=said)
    cell.last.screenshot(path=ARTIFACTS / "stop_1_cell_interrupted.png")

    views = page.locator(".widget-vbox", has=page.locator("label", has_text="p (devices)"))
    for index, (what, done) in enumerate(
        (("local engine", ""), ("lesson 08's processes", "; all 2 rank processes ended"))
    ):
        dash = DashboardView(page)
        dash.root = views.nth(index)
        hint = dash.root.locator(".widget-html", has_text="stop ends a run started by train for real")
        assert hint.first.is_visible()  # the line next to the buttons says how to stop
        dash.button("train for real").click()
        dash.wait_for_output(rf"training 1f1b, p=\d, m=\d: [1-9]\d* of {ENDLESS} steps done", 120_000)
        dash.root.screenshot(path=ARTIFACTS / f"stop_{index + 2}_{index}_running.png")
        line, seconds = stopped_within(page, dash, rf"stopped after \d+ of {ENDLESS} steps")
        assert re.fullmatch(rf"stopped after \d+ of {ENDLESS} steps{re.escape(done)}", line), line
        keep(f"stop, {what}", seconds)
        assert dash.button("train for real").is_enabled()
        dash.root.screenshot(path=ARTIFACTS / f"stop_{index + 2}_{index}_stopped.png")
    assert_no_traceback(page)


def test_a_refused_setting_keeps_the_chart_beside_the_reason(page, lab: LabServer):
    cells = [SETUP, "from course_lib.widgets.dashboard import pipeline_dashboard\n"
                    "pipeline_dashboard('interleaved-1f1b', p=4, m=8)"]  # fmt: skip
    open_and_run_all(page, lab, write_notebook(lab.root, "browser_refused.ipynb", cells))
    dash = DashboardView(page)
    dash.image.wait_for(timeout=WIDGET_TIMEOUT_MS)
    chart, summary = dash.chart(), dash.summary.inner_text()
    dash.drag_slider("m (micro-batches)", 9)  # interleaving needs m a multiple of p here
    page.wait_for_function(
        "el => el.textContent.includes('cannot simulate this combination')",
        arg=dash.summary.element_handle(), timeout=WIDGET_TIMEOUT_MS,
    )  # fmt: skip
    assert dash.chart() == chart and chart[1] > 300  # the same picture, still drawn (no broken image)
    assert "still the last setting that could be simulated" in dash.summary.inner_text() != summary
    dash.root.screenshot(path=ARTIFACTS / "refused_keeps_chart.png")


@pytest.mark.parametrize(
    "lesson, build, slider, value",
    [
        ("04b", "tp_what_if()", "devices", 3),  # a SelectionSlider: index 3 is 16 devices
        ("05", "budget_cuts(prof, step_of, p=4, m=8, budget_factor=1.1)", "budget x avg", 1.3),
    ],
)
def test_one_drag_of_a_lesson_slider_redraws_once(page, lab: LabServer, lesson, build, slider, value):
    profile = (
        "from course_lib.balance import profile_layers\n"
        "from course_lib.shelf.model import ModelConfig, build_model\n"
        "from course_lib.balance import stage_totals\n"
        "from course_lib.shelf.first_schedules import build_schedule\n"
        "from course_lib.shelf.simulator import StageCosts, simulate\n"
        "from course_lib.widgets.budget_cuts import budget_cuts\n"
        "model = build_model(ModelConfig(n_layers=80, vocab_size=2048), seed=0)\n"
        "prof = profile_layers(model, 2, 32, repeats=1)\n"
        "def step_of(part, p):\n"
        "    t = stage_totals(prof.time_s, part)\n"
        "    costs = StageCosts.fused(f=[x / 3 for x in t], b=[2 * x / 3 for x in t])\n"
        "    return simulate(build_schedule('1f1b', p, 8), costs)"
    )  # fmt: skip
    prelude = profile if lesson == "05" else "from course_lib.widgets.tp_what_if import tp_what_if"
    cells = [SETUP, prelude, counted(build)]
    open_and_run_all(page, lab, write_notebook(lab.root, f"browser_drag_{lesson}.ipynb", cells))
    assert_no_traceback(page)
    root = page.locator(".widget-hslider", has=page.locator("label", has_text=slider)).first
    handle, track = root.locator(".noUi-handle"), root.locator(".noUi-target").bounding_box()
    lo, hi = (float(handle.get_attribute(a)) for a in ("aria-valuemin", "aria-valuemax"))
    grip = handle.bounding_box()
    x0, y = grip["x"] + grip["width"] / 2, grip["y"] + grip["height"] / 2
    page.mouse.move(x0, y)
    page.mouse.down()
    page.mouse.move(track["x"] + track["width"] * (value - lo) / (hi - lo), y, steps=12)  # a slow drag
    page.mouse.up()
    counter = page.get_by_text(re.compile(r"^redraws: \d+$"))
    counter.filter(has_text=re.compile(r"[1-9]")).wait_for(timeout=WIDGET_TIMEOUT_MS)
    page.wait_for_timeout(3000)  # time for any later redraw to arrive
    assert counter.inner_text() == "redraws: 1"
    page.screenshot(path=ARTIFACTS / f"drag_{lesson}_one_redraw.png")
