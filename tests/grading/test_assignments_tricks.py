"""A clever student against the real `nbgrader autograde` (course_grading/execute.py's sandbox).

Each trick (tests/support/tricks.py) got 5-10/10 when a submission shared one kernel with its tests
and ran in the course directory. Here each must score at most 3/10 (which tricks, on which assignments:
tests/support/tricks.py's trick_submissions; they are autograded with test_assignments.py's submissions,
in one course, by tests/support/autograde.py). A student function that exits or floods its output fails
only its own tests.
"""

from __future__ import annotations

import pytest
from support.assignments import ASSIGNMENTS, cells, solution_secrets
from support.tricks import ROBUSTNESS, trick_submissions

nbgrader = pytest.importorskip("nbgrader", reason="nbgrader is in the dev extra: pip install -e '.[dev]'")
pytestmark = [
    pytest.mark.processes,
    pytest.mark.timeout(900),
    pytest.mark.filterwarnings("ignore:Object of type .* not in session"),  # nbgrader's own
]

SUBMISSIONS = trick_submissions(ASSIGNMENTS)


@pytest.fixture(scope="module")
def tricked(graded):
    """The course graded once for this file and test_assignments.py (tests/grading/conftest.py): its
    directory and the tricks' scores."""
    course, scores, _, _ = graded
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
