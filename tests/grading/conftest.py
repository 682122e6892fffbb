"""The graded course (tests/support/autograde.py): made once per worker, for test_assignments.py and
test_assignments_tricks.py, which tests/conftest.py's ONE_GROUP keeps on one worker."""

from __future__ import annotations

import pytest
from support.autograde import graded_course


@pytest.fixture(scope="session")
def graded(tmp_path_factory):
    """Every assignment generated, submitted and autograded, and the tricks; the course dir, scores (by
    (assignment, student), the tricks' student being their kind), lateness and the graded answers each
    assignment's checks compared with."""
    with graded_course(tmp_path_factory) as result:
        yield result
