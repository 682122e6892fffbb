"""The nbgrader assignments, end to end, the way an instructor runs them (in a temp copy of the course dir).

Every assignment under notebooks/assignments/source/: generate the student version (no solution, no
hidden test, no expected value), autograde the solution (full points), the untouched student version
(zero) and a "hard-coded" submission that copies the visible answers as constants (at most
30%: the hidden tests try other sizes). A1 also goes the whole way round with nbgrader's exchange:
release, fetch, submit (a student who never ran a cell, one whose code raises, one who is late), collect,
autograde, feedback (the teaching messages, not the hidden tests), export (CSV).
Hermetic: HOME, the Jupyter dirs, the exchange and the gradebook live in a temp dir.
"""

from __future__ import annotations

import ast
import csv
import json
import os
import re
import sys
from pathlib import Path

import pytest
from support.assignments import (
    ASSIGNMENTS,
    COURSE,
    HARD_CODED,
    cells,
    errors,
    grade_info,
    solution_secrets,
)  # fmt: skip
from support.autograde import FLOW
from support.course_copy import hermetic_env
from support.feedback import (
    near_answers,
    outputs_text,
    own_lines,
    visible_text,
    what_the_student_had,
)  # fmt: skip

nbgrader = pytest.importorskip("nbgrader", reason="nbgrader is in the dev extra: pip install -e '.[dev]'")

pytestmark = [
    pytest.mark.processes,  # nbgrader runs the notebooks in kernels
    # the graded course (tests/grading/conftest.py, made by the first test that asks): every assignment's
    # honest submissions, each in a sandbox or three that import torch. Room for a slow machine: beside the
    # suite it took 430 s on one machine's 2 cores, and 793-988 s on a slower one's (598 s alone)
    pytest.mark.timeout(2400),
    pytest.mark.filterwarnings("ignore:Object of type .* not in session"),  # nbgrader's own
]


def test_every_assignment_has_points_hidden_tests_and_the_course_setup():
    assert len(ASSIGNMENTS) >= 4
    for name in ASSIGNMENTS:
        (notebook,) = (COURSE / "source" / name).glob("*.ipynb")
        graded_cells = [c for c in cells(notebook) if grade_info(c).get("grade")]
        assert graded_cells and all(grade_info(c)["points"] > 0 for c in graded_cells), name
        assert any("### BEGIN HIDDEN TESTS" in "".join(c["source"]) for c in graded_cells), name
        first = "".join(cells(notebook)[1]["source"])
        assert first == "%matplotlib inline\nfrom course_lib import lesson\nlesson.setup()", name


def released_text(course: Path, name: str) -> str:
    """Everything a student sees of an assignment: every cell's source and every output."""
    (released,) = (course / "release" / name).glob("*.ipynb")
    parts = []
    for cell in cells(released):
        parts.append("".join(cell["source"]))
        for out in cell.get("outputs", []):
            parts.append(json.dumps(out))
    return "\n".join(parts)


def test_student_versions_hold_no_solution_no_hidden_test_no_expected_value(graded):
    course, _, _, _ = graded
    for name in ASSIGNMENTS:
        text = released_text(course, name)
        assert "BEGIN SOLUTION" not in text and "HIDDEN TESTS" not in text, name
        assert "raise NotImplementedError()" in text, name
        lines = {line.strip() for line in text.splitlines()}
        leaked = [line for line in solution_secrets(name) if line in lines]
        assert not leaked, f"{name}: solution or hidden-test lines in the student version: {leaked[:3]}"
        (released,) = (course / "release" / name).glob("*.ipynb")
        for cell in cells(released):
            if grade_info(cell).get("grade"):  # visible checks: the value comes from a check, not the cell
                source = "".join(cell["source"])
                assert not literal_expected(source), (name, literal_expected(source))


def literal_expected(source: str) -> list[str]:
    """grading.number / numbers calls whose expected value is written out (3 / 11, [4, 3, 2, 1])."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in NUMERIC:
            expected = node.args[2:3] + [k.value for k in node.keywords if k.arg == "expected"]
            found += [ast.unparse(node) for e in expected if all(isinstance(n, LITERAL) for n in ast.walk(e))]
    return found


NUMERIC = ("number", "numbers")
LITERAL = (ast.Constant, ast.BinOp, ast.UnaryOp, ast.List, ast.Tuple)
LITERAL += (ast.operator, ast.unaryop, ast.expr_context)  # the nodes inside such an expression


def test_lessons_print_no_solution():
    """What the executed lessons show (their outputs) holds no line of any assignment's solution."""
    shown = set()
    for lesson in sorted((COURSE.parent).glob("*.ipynb")):
        for cell in cells(lesson):
            for out in cell.get("outputs", []):
                text = out.get("text") or out.get("data", {}).get("text/plain") or ""
                shown |= {
                    line.strip() for line in ("".join(text) if isinstance(text, list) else text).splitlines()
                }
    for name in ASSIGNMENTS:
        leaked = [line for line in solution_secrets(name, hidden=False) if line in shown]
        assert not leaked, f"a lesson prints {name}'s solution: {leaked[:3]}"


def test_solutions_full_points_untouched_zero_hard_coded_at_most_30_percent(graded):
    _, scores, _, _ = graded
    for name in ASSIGNMENTS:
        score, max_score = scores[(name, "solution")]
        assert max_score >= 5 and score == max_score, (name, score, max_score)
        score, max_score = scores[(name, "untouched")]
        assert score == 0 and max_score > 0, (name, score, max_score)
        if name in HARD_CODED:
            score, max_score = scores[(name, "hardcoded")]
            assert score <= 0.3 * max_score, (name, score, max_score)


def test_exchange_flow_grades_every_kind_of_student(graded):
    course, scores, late, _ = graded
    assert scores[(FLOW, "untouched")][0] == 0  # never ran a cell
    assert scores[(FLOW, "solution")][0] == scores[(FLOW, "solution")][1]
    assert scores[(FLOW, "late")][0] == scores[(FLOW, "late")][1]  # flagged late, not penalised (the default)
    buggy, max_score = scores[(FLOW, "buggy")]
    assert 0 < buggy < max_score  # only the GPipe test fails
    assert late["late"] > 3600 and late["solution"] == 0
    (feedback,) = (course / "feedback" / "buggy" / FLOW).glob("*.html")
    assert "my_gpipe(4, 8) raised IndexError" in feedback.read_text()


def test_feedback_shows_teaching_messages_not_hidden_tests_and_wraps(graded):
    course, _, _, _ = graded
    for name in ASSIGNMENTS:
        for student in ("untouched", "hardcoded"):
            folder = course / "feedback" / student / name
            if not folder.exists():
                continue
            (page,) = folder.glob("*.html")
            text = visible_text(page.read_text())
            assert "HIDDEN TESTS" not in text, (name, student)
            lines = {line.strip() for line in text.splitlines()}
            hidden = [line for line in solution_secrets(name, solution=False) if line in lines]
            assert not hidden, f"{name}: hidden test lines in {student}'s feedback: {hidden[:3]}"
            shown = outputs_text(page.read_text())
            assert "AssertionError: " in shown and ("Hint:" in shown or "not written yet" in shown)
            assert max(len(line) for line in shown.splitlines()) <= 110, (name, student)


def test_feedback_holds_no_hidden_test_and_no_number_near_a_graded_answer(graded):
    """Every feedback page (the solution, an untouched and a wrong submission, on every assignment):
    no hidden-test line, and no number the grader added that lies within 10% of a value the checks
    compared with. A number the student already had (in the student version, printed by their own cells
    or by the instructor's cells that are not tests) is not counted: it tells them nothing new."""
    course, _, _, answers = graded
    pages = 0
    for name in ASSIGNMENTS:
        assert answers[name], f"{name}: no graded answer recorded"
        for folder in sorted((course / "feedback").glob(f"*/{name}")):
            student = folder.parent.name
            (page,) = folder.glob("*.html")
            text = visible_text(page.read_text())
            lines = {line.strip() for line in text.splitlines()} - own_lines(course, name, student)
            hidden = [line for line in solution_secrets(name, solution=False) if line in lines]
            assert "HIDDEN TESTS" not in text and not hidden, (name, student, hidden[:3])
            near = near_answers(text, what_the_student_had(course, name, student), answers[name])
            assert not near, f"{name}, {student}: the feedback shows {near[:5]}, within 10% of graded answers"
            pages += 1
    assert pages >= 3 * len(ASSIGNMENTS)


def test_hidden_tests_leave_no_grader_frame_and_a_students_error_names_their_cell(graded):
    course = graded[0]
    for student in ("untouched", "buggy"):
        (page,) = (course / "feedback" / student / FLOW).glob("*.html")
        text = page.read_text()
        assert "course_grading/" not in text and "course_assignments/__init__.py" not in text  # no frame
        assert "### BEGIN HIDDEN TESTS" not in text
    (page,) = (course / "feedback" / "buggy" / FLOW).glob("*.html")
    text = " ".join(page.read_text().split())
    assert "IndexError" in text and "your cell" in text  # the student's own line, named


def test_export_writes_a_csv_of_grades(graded):
    course, scores, _, _ = graded
    import subprocess

    # nbgrader's own command, as the guide gives it, run in the course directory
    bin_dir = Path(sys.executable).parent  # where nbgrader and alembic are (the guide puts it on PATH)
    env = os.environ | hermetic_env(course.parent) | {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    subprocess.run([bin_dir / "nbgrader", "export", "--to", "grades.csv"], cwd=course, check=True, env=env)
    with (course / "grades.csv").open() as f:
        rows = list(csv.DictReader(f))
    by_key = {(r["assignment"], r["student_id"]): float(r["score"]) for r in rows}
    assert by_key[(FLOW, "solution")] == scores[(FLOW, "solution")][0]
    assert by_key[(FLOW, "untouched")] == 0


def test_untouched_student_version_fails_only_at_exercises_with_teaching_messages(graded):
    course, _, _, _ = graded
    for name in ASSIGNMENTS:
        (notebook,) = (course / "autograded" / "untouched" / name).glob("*.ipynb")
        nb_cells = [c for c in cells(notebook) if c["cell_type"] == "code"]
        first_exercise = next(i for i, c in enumerate(nb_cells) if grade_info(c).get("solution"))
        for cell in nb_cells[:first_exercise]:
            assert not errors(cell), f"{name}: error before the first exercise: {errors(cell)}"
        for cell in nb_cells:
            info = grade_info(cell)
            if info.get("solution"):
                for err in errors(cell):  # an unanswered exercise stops at its stub, nothing else
                    assert err["ename"] == "NotImplementedError", (name, err["ename"], err["evalue"])
            if info.get("grade"):
                (err,) = errors(cell)
                assert err["ename"] == "AssertionError", (name, info["grade_id"], err["ename"], err["evalue"])
                message = err["evalue"]
                assert len(message) > 30 and ("Hint:" in message or "not written yet" in message), message


NEW = ("a01_tp_vs_pp", "a07_zero_bubble")


def test_new_assignments_name_no_library_shortcut(graded):
    """A6 and A7's student versions neither import nor name the library's answers: its ZB-H1, the TP/PP
    accounting, the registry (which hands out 'zb-h1' by name)."""
    course, _, _, _ = graded
    for name in NEW:
        text = released_text(course, name)
        for shortcut in (r"schedules\.zero_bubble", r"\bzb_h1\b", r"\bzb-h1\b", r"\baccounting\b",
                         r"\btp_allreduces\(", r"\bpp_sends\(", r"expected="):  # fmt: skip
            assert not re.search(shortcut, text), (name, shortcut)
    a7 = released_text(course, "a07_zero_bubble")
    assert "build_schedule" not in a7 and "SCHEDULES" not in a7


def test_new_assignments_failed_checks_teach_without_the_answer(graded):
    course, _, _, _ = graded
    for name in NEW:
        for student in ("untouched", "hardcoded"):
            (notebook,) = (course / "autograded" / student / name).glob("*.ipynb")
            for cell in cells(notebook):
                if not grade_info(cell).get("grade") or not errors(cell):
                    continue  # a hard-coded answer may pass a visible-only check
                (error,) = errors(cell)
                assert error["ename"] == "AssertionError", (name, student, error["ename"], error["evalue"])
                message = error["evalue"]
                assert len(message) > 40 and ("Hint:" in message or "not written yet" in message), message
    # a copied answer is told what is wrong on the hidden size, in words
    (a6,) = (course / "autograded" / "hardcoded" / "a01_tp_vs_pp").glob("*.ipynb")
    messages = {
        grade_info(c)["grade_id"]: c["outputs"][-1]["evalue"] for c in cells(a6) if grade_info(c).get("grade")
    }
    tp_message = messages["a6_test_tp_count"]  # the visible case passes, a hidden one fails: no sizes shown
    assert tp_message.startswith("a hidden case (other sizes than the one shown) fails: tp_allreduces")
    assert "your answer is zero, but the right value is positive" in tp_message
    assert not re.search(r"\d", tp_message.split(" Hint: ")[0])  # no argument, no value
    assert "smaller m" in messages["a6_test_crossover"] or "larger m" in messages["a6_test_crossover"]


# taken when pytest collects this file, before the session's graded course is made
ENVIRONMENT_BEFORE, DIRECTORY_BEFORE = dict(os.environ), Path.cwd()


def test_the_graded_course_puts_the_environment_and_directory_back(graded):
    # it lives for the whole session: the tests that run after it on this worker (the instructor
    # guide's, which runs nbgrader as another user) must not inherit its HOME, IPython dir or directory
    assert Path.cwd() == DIRECTORY_BEFORE
    keys = ("HOME", "IPYTHONDIR", "PATH", "JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR")
    assert {k: os.environ.get(k) for k in keys} == {k: ENVIRONMENT_BEFORE.get(k) for k in keys}
