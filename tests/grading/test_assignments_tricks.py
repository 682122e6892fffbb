"""A clever student against the real `nbgrader autograde` (course_grading/execute.py's sandbox).

Each trick (tests/support/tricks.py) got 5-10/10 when a submission shared one kernel with its tests
and ran in the course directory. Here each must score at most 3/10 (which tricks, on which assignments:
tests/support/tricks.py's trick_submissions; they are autograded in a course of their own, beside
test_assignments.py's, by tests/support/autograde.py). A student function that exits or floods its
output fails only its own tests.
"""

from __future__ import annotations

import json

import pytest
from support.assignments import ASSIGNMENTS, cells, solution_secrets
from support.tricks import CLASS_RUN_S, CLASS_STUDENTS, ROBUSTNESS, trick_submissions

from course_grading.intake import KEPT, NOTE

nbgrader = pytest.importorskip("nbgrader", reason="nbgrader is in the dev extra: pip install -e '.[dev]'")
pytestmark = [
    pytest.mark.processes,
    # the tricks' graded course (tests/grading/conftest.py): beside the suite, 250 s on one machine's 2 cores
    # and 466-584 s on a slower one's; room for a slower one still
    pytest.mark.timeout(2400),
    pytest.mark.filterwarnings("ignore:Object of type .* not in session"),  # nbgrader's own
]

SUBMISSIONS = trick_submissions(ASSIGNMENTS)


@pytest.fixture(scope="module")
def tricked(graded_tricks):
    """The tricks' course, graded once (tests/grading/conftest.py): its directory and the tricks' scores."""
    course, scores, _, _ = graded_tricks
    print("\ntricks' scores:", {key: scores[key] for key in SUBMISSIONS})
    return course, scores


@pytest.mark.parametrize(("name", "kind"), [s for s in SUBMISSIONS if s[1] not in ROBUSTNESS])
def test_a_trick_scores_at_most_3_of_10(tricked, name, kind):
    _, scores = tricked
    score, max_score = scores[(name, kind)]
    assert max_score == 10 and score <= 3, (name, kind, score)


def test_the_gradebook_was_neither_read_nor_written(tricked):
    course, scores = tricked
    (page,) = (course / "feedback" / "gradebook" / "a03_bubble").glob("*.html")
    text = page.read_text()
    assert "no gradebook: FileNotFoundError" in text
    lines = {line.strip() for line in text.splitlines()}
    assert not [line for line in solution_secrets("a03_bubble") if line in lines]


def test_a_function_that_exits_fails_its_own_tests_only(tricked):
    course, scores = tricked
    score, _ = scores[("a03_bubble", "exit")]
    assert score == 10 - 2 - 2  # idle_fraction's test, and smallest_m's, which calls it
    (notebook,) = (course / "autograded" / "exit" / "a03_bubble").glob("*.ipynb")
    messages = [o.get("evalue", "") for c in cells(notebook) for o in c.get("outputs", [])]
    assert any("idle_fraction(4, 8) raised SystemExit" in m and "os._exit" in m for m in messages)


def test_a_function_that_calls_sys_exit_fails_its_own_test_with_why(tricked):
    course, scores = tricked
    assert scores[("a03_bubble", "sys_exit")][0] == 10 - 1  # bubble_over_ideal's test only
    (page,) = (course / "feedback" / "sys_exit" / "a03_bubble").glob("*.html")
    text = " ".join(page.read_text().split())  # the feedback wraps its lines
    why = "bubble_over_ideal(4, 8) raised SystemExit: sys.exit(1) ends the program: a graded function must"
    assert why in text


def test_a_flood_of_output_is_capped_in_the_feedback(tricked):
    course, scores = tricked
    assert scores[("a03_bubble", "flood")][0] == 10  # the solution still gets its points
    (page,) = (course / "feedback" / "flood" / "a03_bubble").glob("*.html")
    assert page.stat().st_size < 1_000_000 and "more characters of output not shown" in page.read_text()


# Issue 41's round: what the student controls (metadata, the process, the modules in it) decides nothing
NEW_TRICKS = [s for s in SUBMISSIONS if s[1] in ("library_call", "answer_table")]


@pytest.mark.parametrize(("name", "kind"), NEW_TRICKS)
def test_a_library_answer_cannot_be_reached_from_the_students_process(tricked, name, kind):
    """The answer is not in the grading edition the student's code imports: calling it, or filling a
    table with it while a cell runs, gets nothing (the rest of the notebook is the untouched release)."""
    course, scores = tricked
    assert scores[(name, kind)] == (0, 10)
    (notebook,) = (course / "autograded" / kind / name).glob("*.ipynb")
    text = json.dumps(cells(notebook))
    # a call says why; a table's cell failed where the function was graded, so the function is not there
    said = "not available while grading" if kind == "library_call" else "is not defined"
    assert said in text


def test_a_class_run_with_a_malformed_and_a_slow_submission_completes(tricked):
    """One `nbgrader autograde` over the class (CLASS_RUN): the unlocked test cells and the patched checks
    score 0, a pasted copy of a test cell ("nbgrader": {}) neither stops the run nor scores, the slow
    submission is cut at its wall clock with a line saying so, and a notebook that is not JSON scores 0
    with the reason at its top, the student's file kept beside it."""
    course, scores = tricked
    got = {student: scores[("a03_bubble", student)][0] for student in CLASS_STUDENTS}
    assert got == {"class-unreadable": 0, "class-unlocked": 0, "class-pasted_test": 0, "class-slow": 0}
    graded = {p.parent.parent.name for p in (course / "autograded").glob("class-*/a03_bubble/*.ipynb")}
    assert graded == set(CLASS_STUDENTS)
    (notebook,) = (course / "autograded" / "class-slow" / "a03_bubble").glob("*.ipynb")
    said = json.dumps(cells(notebook))
    assert f"used up its {CLASS_RUN_S:g} s of grading time" in said
    (pasted,) = (course / "autograded" / "class-pasted_test" / "a03_bubble").glob("*.ipynb")
    assert NOTE.strip() in json.dumps(cells(pasted))
    submitted = course / "submitted" / "class-unreadable" / "a03_bubble"
    (kept,) = submitted.glob(f"*.ipynb{KEPT}")  # the student's own bytes, for the instructor
    assert len(kept.read_bytes()) == 1000
    (page,) = (course / "feedback" / "class-unreadable" / "a03_bubble").glob("*.html")
    text = " ".join(page.read_text().split())
    assert "could not be read, so none of your work in it was graded" in text and "NotJSONError" in text


def test_hidden_tests_leave_no_output_and_no_grader_frame_in_the_feedback(tricked):
    course, _ = tricked
    (page,) = (course / "feedback" / "class-unlocked" / "a03_bubble").glob("*.html")
    text = page.read_text()
    assert "course_grading/" not in text and "course_assignments/__init__.py" not in text  # no frame
    assert "### BEGIN HIDDEN TESTS" not in text
