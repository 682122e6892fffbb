"""The graded courses (tests/support/autograde.py): each made once per worker, `graded` for
test_assignments.py and `graded_tricks` for test_assignments_tricks.py; tests/conftest.py's ONE_GROUP and
LONGEST_FIRST start both first, on two workers."""

from __future__ import annotations

import pytest
from support.autograde import graded_course


@pytest.fixture(scope="session")
def graded(tmp_path_factory):
    """Every assignment generated, submitted (solution, untouched, hard-coded; one through the exchange)
    and autograded; the course dir, scores by (assignment, student), lateness and the graded answers each
    assignment's checks compared with."""
    with graded_course(tmp_path_factory, "submissions") as result:
        yield result


@pytest.fixture(scope="session")
def graded_tricks(tmp_path_factory):
    """Every trick and the class run autograded in a course of their own; the course dir and scores by
    (assignment, kind) and (a03_bubble, class-<kind>)."""
    with graded_course(tmp_path_factory, "tricks") as result:
        yield result
