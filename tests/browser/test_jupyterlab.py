"""The course as a student sees it: lessons run in JupyterLab in headless Chromium.

Widgets that work in a Python test can still fail in the browser (a front-end extension that is not
loaded, a widget model never rendered, a figure that never arrives), so these tests click through
JupyterLab itself: "Run All Cells", then drag the dashboard's sliders and pick another schedule, and
check that the chart and the printed bubble figure follow. Screenshots go to artifacts/browser/.

Try it:  .venv/bin/pytest -q tests/browser        (needs /usr/bin/chromium: tests/browser/ensure_browser.sh)
"""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path

import pytest
from lab_page import (
    WIDGET_TIMEOUT_MS,
    DashboardView,
    assert_no_traceback,
    menu,
    open_and_run_all,
    output_texts,
    wait_for_kernel,
    wait_until_all_ran,
    write_notebook,
)
from lab_server import ARTIFACTS, LabServer

from course_lib.charts.gantt import gantt_figsize
from course_lib.widgets.stand_in import STAND_IN, WIDGET_VIEW

pytestmark = [pytest.mark.timeout(240), pytest.mark.processes]  # a JupyterLab server and a browser

LESSON = "04_1f1b.ipynb"  # its dashboard: training_dashboard("1f1b", p=4, m=8, run=<its 1F1B run>)
DASHBOARD_NOTEBOOK = "browser_dashboard.ipynb"  # stand-in, only where the lesson is missing
TRAINING_NOTEBOOK = "browser_training.ipynb"
ENDLESS_STEPS = 100_000  # a run that ends only when stopped
STOP_TIMEOUT_MS = 20_000  # "stop" ends a run before its next action: well under a second, unloaded
DPI = 80  # PipelineDashboard draws its Figure at this dpi
SAVED_LESSON = "02_naive_pipeline.ipynb"  # the quickest lesson with a dashboard and a progress bar
WIDGET_ERROR = "Error displaying widget"  # what JupyterLab draws for a widget view with no model


def write_dashboard_notebook(root: Path) -> str:
    """A one-dashboard notebook, as a lesson would show it (lessons 02-04 call the same function)."""
    cells = [
        "%matplotlib inline\nfrom course_lib import lesson\nlesson.setup()",
        "from course_lib.widgets.dashboard import pipeline_dashboard\n"
        'dash = pipeline_dashboard("1f1b", p=4, m=8)\n'
        "dash",
    ]
    return write_notebook(root, DASHBOARD_NOTEBOOK, cells)


def write_training_notebook(root: Path) -> str:
    """The lessons' training dashboard with a run that ends only when stopped, started from a cell."""
    cells = [
        "%matplotlib inline\nfrom course_lib import lesson\nlesson.setup()",
        "from course_lib.widgets.train_dashboard import TrainSettings, training_dashboard\n"
        f"settings = TrainSettings(n_layers=8, steps={ENDLESS_STEPS}, seq_len=16, device='cpu')\n"
        'dash = training_dashboard("zb-h1", p=4, m=8, link="transatlantic", settings=settings)\n'
        "dash",
        "dash.train()  # from a cell: Kernel > Interrupt ends it",
    ]
    return write_notebook(root, TRAINING_NOTEBOOK, cells)


















BUBBLE = re.compile(r"bubble: ([\d.]+)% of device-time idle \(simulated\); formula \S+ = ([\d.]+)%")


def bubbles(summary: str) -> tuple[float, float]:
    """(simulated bubble, formula's bubble) as printed under the chart, rounded to 0.1% as shown."""
    match = BUBBLE.search(summary)
    assert match, f"no simulated bubble figure in: {summary!r}"
    return float(match[1]), float(match[2])


def formula(p: int, m: int) -> float:
    """(p-1)/(m+p-1) in percent, rounded as the dashboard prints it."""
    return round(100 * (p - 1) / (m + p - 1), 1)


def expected_height(p: int) -> int:
    return round(gantt_figsize(p)[1] * DPI)


# ---- the tests ---------------------------------------------------------------------------------------
def test_dashboard_sliders_and_schedule_redraw_chart_and_bubble(page, lab: LabServer):
    """Lesson 04 (1F1B) run in the browser; its dashboard then follows the p, m sliders and schedule."""
    name = LESSON if (lab.root / LESSON).is_file() else write_dashboard_notebook(lab.root)
    open_and_run_all(page, lab, name)
    assert_no_traceback(page)
    dash = DashboardView(page)
    dash.image.wait_for(timeout=WIDGET_TIMEOUT_MS)

    summary, chart = dash.summary.inner_text(), dash.chart()
    assert (dash.readout("p (devices)"), dash.readout("m (micro-batches)"), dash.schedule()) == (4, 8, "1f1b")
    assert bubbles(summary) == (formula(4, 8), formula(4, 8)), summary  # 3/11 = 27.3%
    assert abs(chart[2] - expected_height(4)) <= 1, chart  # one Gantt row per device
    dash.root.screenshot(path=ARTIFACTS / "dashboard_1_start_1f1b_p4_m8.png")

    # (control, new value, p and m afterwards, screenshot). With equal stage costs and free links the
    # simulated 1F1B bubble is exactly (p-1)/(m+p-1); the naive schedule (one micro-batch through the
    # whole pipeline at a time) leaves every device idle (p-1)/p of the step, whatever m is, and the
    # dashboard must print that schedule's own formula beside it.
    steps = [
        ("p (devices)", 8, (8, 8), "dashboard_2_p8.png"),  # 7/15 = 46.7%
        ("m (micro-batches)", 16, (8, 16), "dashboard_3_m16.png"),  # 7/23 = 30.4%
        ("schedule", "naive", (8, 16), "dashboard_4_naive.png"),  # 7/8 = 87.5%
    ]
    for control, value, (p, m), shot in steps:
        if control == "schedule":
            dash.dropdown("schedule").select_option(value)
        else:
            dash.drag_slider(control, value)
        new_summary, new_chart = dash.wait_for_change(summary, chart)
        bubble, printed_formula = bubbles(new_summary)
        own = round(100 * (p - 1) / p, 1) if value == "naive" else formula(p, m)
        assert bubble == own and printed_formula == own, (control, value, new_summary)
        assert new_chart[0] != chart[0], f"the chart did not change after setting {control} to {value}"
        assert abs(new_chart[2] - expected_height(p)) <= 1, new_chart
        dash.root.screenshot(path=ARTIFACTS / shot)
        summary, chart = new_summary, new_chart
    assert_no_traceback(page)


def test_welcome_notebook_trains_and_plots_the_loss(page, lab: LabServer):
    open_and_run_all(page, lab, "00_welcome.ipynb")
    assert_no_traceback(page)
    texts = "\n".join(output_texts(page))
    match = re.search(r"held-out loss (\d+\.\d+) -> (\d+\.\d+)", texts)
    assert match, "the training cell printed no held-out loss"
    start, end = map(float, match.groups())
    assert end < start, f"held-out loss did not fall: {start} -> {end}"
    assert "same gradient: True" in texts
    plot = page.locator(".jp-OutputArea-output img").last  # the loss curve (a PNG from %matplotlib inline)
    plot.scroll_into_view_if_needed()
    width = plot.evaluate("async img => { await img.decode(); return img.naturalWidth; }")
    assert width > 300, f"the loss plot is {width} px wide"
    cell = page.locator(".jp-CodeCell", has=plot)
    assert "ax.plot(" in cell.locator(".jp-InputArea-editor").inner_text()
    cell.screenshot(path=ARTIFACTS / "welcome_loss_plot.png")
    page.screenshot(path=ARTIFACTS / "welcome_page.png")


def test_training_dashboard_stops_on_interrupt_and_on_its_stop_button_then_works_on(page, lab: LabServer):
    """Issue 18: a run started from a cell ends on Kernel > Interrupt, one started by "train for real"
    (which the kernel runs while it handles other clicks) ends on "stop"; each with one line, no
    traceback; then the sliders still redraw and the button trains again."""
    name = write_training_notebook(lab.root)
    open_and_run_all(page, lab, name, timeout_ms=None)  # its last cell trains until interrupted
    dash = DashboardView(page)
    progress = rf"training zb-h1, p=4, m=8: [1-9]\d* of {ENDLESS_STEPS} steps done"
    stopped = rf"stopped after \d+ of {ENDLESS_STEPS} steps"
    dash.wait_for_output(progress)
    menu(page, "Kernel", "Interrupt Kernel")
    assert re.fullmatch(stopped, dash.wait_for_output(stopped, STOP_TIMEOUT_MS).strip())
    wait_until_all_ran(page)  # the cell ended (on its one line, not a KeyboardInterrupt)
    assert_no_traceback(page)

    for attempt in (1, 2):  # the button; then again, to show that a stopped dashboard trains again
        assert dash.button("stop").is_disabled()
        dash.button("train for real").click()
        dash.wait_for_output(progress)
        dash.root.screenshot(path=ARTIFACTS / f"training_{attempt}_running.png")
        dash.button("stop").click()
        assert re.fullmatch(stopped, dash.wait_for_output(stopped, STOP_TIMEOUT_MS).strip())
        assert dash.button("train for real").is_enabled()
        dash.root.screenshot(path=ARTIFACTS / f"training_{attempt}_stopped.png")
    assert_no_traceback(page)

    summary, chart = dash.summary.inner_text(), dash.chart()
    dash.drag_slider("p (devices)", 3)
    new_summary, new_chart = dash.wait_for_change(summary, chart)
    assert new_chart[0] != chart[0] and abs(new_chart[2] - expected_height(3)) <= 1, new_chart
    assert new_summary.startswith("bubble:"), new_summary


def test_a_saved_lesson_reopens_with_its_dashboards_stand_in_not_a_widget_error(page, lab: LabServer):
    """Issue 38: run a lesson, save it (the live dashboard on the page), shut its kernel down and reopen
    it, as a student coming back the next day: where the dashboard was, its "run this cell" line; no
    "Error displaying widget: model not found", no progress bar from the last run."""
    path = lab.root / SAVED_LESSON
    committed = path.stat().st_mtime_ns
    open_and_run_all(page, lab, SAVED_LESSON)
    assert_no_traceback(page)
    DashboardView(page).image.wait_for(timeout=WIDGET_TIMEOUT_MS)  # live, in the page
    menu(page, "File", "Save Notebook")
    saved = None
    for _ in range(200):  # the server writes the file in place (its "atomic" writing keeps a backup), so a
        # read may meet it changed but not whole yet: wait for a whole notebook
        if path.stat().st_mtime_ns != committed:
            with contextlib.suppress(json.JSONDecodeError):
                saved = json.loads(path.read_text())
                break
        page.wait_for_timeout(100)
    assert saved is not None, "the lesson was not saved within 20 s"
    assert all(c.get("execution_count") for c in saved["cells"] if c["cell_type"] == "code"), "not saved"
    assert WIDGET_VIEW not in path.read_text() and "widgets" not in saved["metadata"]

    for session in lab.api("sessions"):  # the kernel that made the widgets is gone
        if session["path"] == SAVED_LESSON:
            lab.api(f"sessions/{session['id']}", method="DELETE")
    page.goto(lab.url(f"lab/tree/{SAVED_LESSON}?reset"))
    page.locator(".jp-Notebook .jp-Cell").first.wait_for()
    wait_for_kernel(page, lab, SAVED_LESSON)  # a new kernel: the widget manager has restored from it
    page.wait_for_timeout(3_000)  # it draws a missing model's error once restored
    texts = output_texts(page)
    assert not [t for t in texts if WIDGET_ERROR in t or "Loading widget" in t], texts
    assert any(STAND_IN.fullmatch(t.strip()) for t in texts), texts
    assert not [t for t in texts if re.search(r"\d+/\d+ \[", t)], "a progress bar from the saved run"
    page.screenshot(path=ARTIFACTS / "saved_lesson_reopened.png")
