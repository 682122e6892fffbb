"""Assignments 6 (TP against PP) and 7 (zero bubble): their shape, and single wrong answers run through their
test cells in this process (fast). test_assignments.py grades them with nbgrader like every assignment
(solution, untouched, hard-coded), and checks their student versions hold no shortcut.
"""

from __future__ import annotations

import pytest
from support.assignments import COURSE, cells, grade_info

nbgrader = pytest.importorskip("nbgrader", reason="nbgrader is in the dev extra: pip install -e '.[dev]'")

pytestmark = [
    pytest.mark.processes,  # nbgrader runs the notebooks in kernels
    pytest.mark.filterwarnings("ignore:Object of type .* not in session"),  # nbgrader's own
]

NEW = ("a01_tp_vs_pp", "a07_zero_bubble")
SET_UP = ("_imports", "_tools", "_scenario")  # cells run before a student's code in run_test_cell
SETUP = "%matplotlib inline\nfrom course_lib import lesson\nlesson.setup()"  # every notebook's first cell


def test_new_assignments_are_worth_ten_points_with_hidden_tests():
    for name in NEW:
        (notebook,) = (COURSE / "source" / name).glob("*.ipynb")
        graded_cells = [c for c in cells(notebook) if grade_info(c).get("grade")]
        assert sum(grade_info(c)["points"] for c in graded_cells) == 10, name
        assert all("### BEGIN HIDDEN TESTS" in "".join(c["source"]) for c in graded_cells), name
        assert "".join(cells(notebook)[1]["source"]) == SETUP, name


def run_test_cell(assignment: str, grade_id: str, student_code: str) -> str:
    """Run a source notebook's set-up cells, then `student_code`, then its test cells up to `grade_id` (hidden
    tests included; earlier ones define helpers the later ones use), in this process; return the message
    of `grade_id`'s AssertionError ('' if that test passed)."""
    (notebook,) = (COURSE / "source" / assignment).glob("*.ipynb")
    namespace: dict = {}
    for cell in cells(notebook):
        if cell["cell_type"] == "code" and grade_info(cell)["grade_id"].endswith(SET_UP):
            exec("".join(cell["source"]).replace("print(", "(lambda *a, **k: None)("), namespace)
    exec(student_code, namespace)
    for cell in cells(notebook):
        if not grade_info(cell).get("grade"):
            continue
        try:
            exec("".join(cell["source"]), namespace)
        except AssertionError as err:
            if grade_info(cell)["grade_id"] == grade_id:
                return str(err)
        if grade_info(cell)["grade_id"] == grade_id:
            return ""
    raise KeyError(grade_id)


def test_answers_taken_from_the_library_fail_the_hidden_tests():
    """The hidden tests switch the library's answers off while the student's function runs."""
    borrowed_zb = """
from course_lib.shelf.first_schedules import build_schedule
def my_zb_h1(p, m):
    return build_schedule("zb-h1", p, m)
"""
    assert "not take the course library's ZB-H1" in run_test_cell(
        "a07_zero_bubble", "a7_test_valid", borrowed_zb
    )
    imported_zb = "from course_lib.schedules.zero_bubble import zb_h1 as my_zb_h1"
    assert "not take the course library's ZB-H1" in run_test_cell(
        "a07_zero_bubble", "a7_test_valid", imported_zb
    )
    borrowed_formula = """
from course_lib.schedules.closed_forms import Case, ZB_H1_BUBBLE
def my_zb_h1(p, m):
    from course_lib.schedules.zero_bubble import zb_h1
    return zb_h1(p, m)
def predicted_bubble(p, m, f, i, w):
    return ZB_H1_BUBBLE.value(Case(p, m, f=f, i=i, w=w))
"""
    assert "RuntimeError" in run_test_cell("a07_zero_bubble", "a7_test_predict", borrowed_formula)
    simulated = """
from course_lib.schedules.zero_bubble import zb_h1 as my_zb_h1
def predicted_bubble(p, m, f, i, w):
    return simulate(my_zb_h1(p, m), StageCosts(f=f, i=i, w=w)).bubble_fraction
"""
    assert "RuntimeError" in run_test_cell("a07_zero_bubble", "a7_test_predict", simulated)
    measured = "tp_allreduces_per_step = measured_tp_allreduces"
    message = run_test_cell("a01_tp_vs_pp", "a6_test_tp_count", measured)
    assert "may not call the course's counting tools" in message


ONE_F_ONE_B_SPLIT = """
def my_zb_h1(p, m):
    orders = []
    for d in range(p):
        warmup = min(p - 1 - d, m)
        order = [Action(d, Kind.F, mb) for mb in range(warmup)]
        for k in range(m):
            if warmup + k < m:
                order.append(Action(d, Kind.F, warmup + k))
            order += [Action(d, Kind.I, k), Action(d, Kind.W, k)]  # W at once
        orders.append(order)
    return Schedule("mine", p, m, orders, list(range(p)), split_backward=True)
"""


def test_zb_attempts_are_told_what_they_cost():
    """1F1B with W at once is valid but idles like 1F1B; every W at the end idles less but holds m."""
    assert run_test_cell("a07_zero_bubble", "a7_test_valid", ONE_F_ONE_B_SPLIT) == ""
    message = run_test_cell("a07_zero_bubble", "a7_test_zero_bubble", ONE_F_ONE_B_SPLIT)
    assert (
        "most idle time of a device in my_zb_h1(3, 6), T_F = T_I = T_W = 1 is 4, but it must be at most 2"
        in message
    )
    at_once = "order += [Action(d, Kind.I, k), Action(d, Kind.W, k)]  # W at once"
    at_the_end = "order += [Action(d, Kind.I, k)] + [Action(d, Kind.W, w) for w in range(m) if k == m - 1]"
    late_ws = ONE_F_ONE_B_SPLIT.replace(at_once, at_the_end)
    message = run_test_cell("a07_zero_bubble", "a7_test_zero_bubble", late_ws)
    assert "stage 0 holds 6 micro-batches' activations at once" in message and "at most 3" in message
