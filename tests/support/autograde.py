"""Every assignment autograded the way an instructor runs nbgrader, in two courses of its own:

- for tests/grading/test_assignments.py (``part="submissions"``): generate each student version, submit
  the solution, the untouched version and a hard-coded copy, send one assignment (FLOW) the whole way
  round nbgrader's exchange (release, fetch, submit, late, collect), autograde every submission in the
  sandbox and write the feedback;
- for tests/grading/test_assignments_tricks.py (``part="tricks"``): the same set-up, with the clever
  students' tricks (tests/support/tricks.py) and one class run of malformed and slow submissions.

The expensive part of the grading tests (a sandbox or three per submission), so each runs once per test
session (tests/grading/conftest.py's `graded` and `graded_tricks`); being two, they run on two workers
at once."""

from __future__ import annotations

import copy
import json
import resource
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from support.assignments import (
    ASSIGNMENTS,
    COURSE,
    HARD_CODED,
    grade_info,
    hard_coded_notebook,
    sandbox_or_skip,
)
from support.course_copy import course_copy
from support.feedback import recorded_answers
from support.tricks import CLASS_RUN_S, CLASS_STUDENTS, submit_class_run, submit_tricks, trick_submissions

# the course dir, the scores and max scores by (assignment, student), seconds late by FLOW's student,
# and the graded answers each assignment's checks compared with
Graded = tuple[Path, dict[tuple[str, str], tuple[float, float]], dict[str, float], dict[str, set[float]]]

FLOW = "a03_bubble"  # the assignment that goes through the exchange, with every kind of student
TRICKS = trick_submissions(ASSIGNMENTS)  # graded here too: one course, one nbgrader set-up, one feedback run
BROKEN_GPIPE = "def my_gpipe(p, m):\n    return [Action(d, Kind.F, 0) for d in range(p)][p]  # IndexError\n"


def _submit_through_exchange(config, home: Path, student: str, edit=None) -> None:
    """What a student does: fetch the released assignment, (maybe) edit it, submit it."""
    from nbgrader.auth import Authenticator
    from nbgrader.coursedir import CourseDirectory
    from nbgrader.exchange.default import ExchangeFetchAssignment, ExchangeSubmit

    config = config.copy()
    config.CourseDirectory.student_id = student
    config.CourseDirectory.assignment_id = FLOW
    config.Exchange.assignment_dir = str(home)
    for step in (ExchangeFetchAssignment, ExchangeSubmit):
        if step is ExchangeSubmit and edit:
            edit(home / FLOW)
        coursedir = CourseDirectory(config=config)
        step(coursedir=coursedir, authenticator=Authenticator(config=config), config=config).start()


def _solve(folder: Path) -> None:
    """Replace the student version with the solution (the source notebook, as a student would finish it)."""
    (notebook,) = folder.glob("*.ipynb")
    shutil.copy(COURSE / "source" / FLOW / notebook.name, notebook)


def _solve_with_a_bug(folder: Path) -> None:
    _solve(folder)
    (notebook,) = folder.glob("*.ipynb")
    nb = json.loads(notebook.read_text())
    for cell in nb["cells"]:
        if grade_info(cell).get("grade_id") == "a1_my_gpipe":
            cell["source"] = BROKEN_GPIPE
    notebook.write_text(json.dumps(nb))


def _exchange_flow(api, config, tmp: Path, course: Path) -> list[str]:
    """Release A1, let four students fetch and submit, make one late, collect."""
    from nbgrader.api import Gradebook

    assert api.release_assignment(FLOW)["success"]
    students = {"untouched": None, "solution": _solve, "buggy": _solve_with_a_bug, "late": _solve}
    for student, edit in students.items():
        home = tmp / "students" / student
        home.mkdir(parents=True)
        _submit_through_exchange(config, home, student, edit)
    due = datetime.now(UTC).replace(tzinfo=None) + timedelta(days=1)
    with Gradebook(config.CourseDirectory.db_url) as gb:
        gb.update_or_create_assignment(FLOW, duedate=due)
    result = api.collect(FLOW)
    assert result["success"], result["log"] + result.get("error", "")
    stamp = course / "submitted" / "late" / FLOW / "timestamp.txt"
    stamp.write_text(str(due + timedelta(hours=3)))  # as if handed in three hours after the due date
    return list(students)


def _cpu_seconds() -> float:
    """CPU time of this process and of its finished children (the kernels nbgrader started)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _submit_all(api, config, tmp: Path, course: Path, part: str) -> dict[str, list[str]]:
    """Generate every assignment and hand in `part`'s submissions; the students of each, by assignment
    (the tricks' student ids, their kinds, are in TRICKS and CLASS_STUDENTS instead)."""
    students: dict[str, list[str]] = {}
    for name in ASSIGNMENTS:
        result = api.generate_assignment(name, force=True)
        assert result["success"], result["log"] + result.get("error", "")
        students[name] = []
        if part != "submissions":
            continue
        if name != FLOW:  # FLOW's solution and untouched versions come through the exchange below
            students[name] = ["solution", "untouched"]
            for student, origin in (("solution", "source"), ("untouched", "release")):
                shutil.copytree(course / origin / name, course / "submitted" / student / name)
        if name in HARD_CODED:
            students[name].append("hardcoded")
            hard_coded_notebook(course / "release" / name, course / "submitted" / "hardcoded" / name)
    if part == "submissions":
        students[FLOW] += _exchange_flow(api, config, tmp, course)
    else:
        submit_tricks(course, TRICKS)
        submit_class_run(course, FLOW)
    return students


def _class_api(api):
    """nbgrader's API with the course's config, but CLASS_RUN_S of wall clock per submission."""
    from nbgrader.apps import NbGraderAPI

    config = copy.deepcopy(api.config)  # a shallow copy would share (and change) the course's sections
    config.SandboxedExecute.submission_s = CLASS_RUN_S
    return NbGraderAPI(config=config)


def _autograde_all(api, students: dict[str, list[str]], part: str) -> dict[str, set[float]]:
    """Autograde each assignment's students (their graded answers recorded) or its tricks (not recorded:
    a trick's values are not an assignment's answers), then write the assignment's feedback, all at once."""
    seconds, answers = {}, {}
    for name, names in students.items():
        tricks = [kind for n, kind in TRICKS if n == name] if part == "tricks" else []
        for student in [*names, *tricks]:
            start, cpu = time.perf_counter(), _cpu_seconds()
            mine = student in names  # a trick's values are not the assignment's answers
            with recorded_answers(answers.setdefault(name, set())) if mine else nullcontext():
                result = api.autograde(name, student, force=True, create=True)
            seconds[(name, student)] = (time.perf_counter() - start, _cpu_seconds() - cpu)
            assert result["success"], result["log"] + result.get("error", "")
        if name == FLOW and part == "tricks":  # one nbgrader run for a class with malformed and slow work
            start = time.perf_counter()
            result = _class_api(api).autograde(name, "class-*", force=True, create=True)
            seconds[(name, "class run")] = (time.perf_counter() - start, 0.0)
            assert result["success"], result["log"] + result.get("error", "")
        result = api.generate_feedback(name)
        assert result["success"], result["log"] + result.get("error", "")
    print(
        f"\nautograde seconds per submission, {part} (wall, CPU of the grader and its reaped children; a"
        " sandbox's own is not counted):",
        {k: f"{w:.1f}, {c:.1f}" for k, (w, c) in seconds.items()},
    )
    return answers


@contextmanager
def graded_course(tmp_path_factory: pytest.TempPathFactory, part: str) -> Iterator[Graded]:
    """Generate every assignment, submit and autograde `part`'s submissions ("submissions": the honest
    ones and FLOW's exchange; "tricks": the tricks and the class run); yields the course dir, scores
    (by (assignment, student); a trick's student is its kind), lateness and the graded answers each
    assignment's checks compared with (the last two empty for the tricks)."""
    assert part in ("submissions", "tricks"), part
    sandbox_or_skip()  # autograde runs the students' code in it
    tmp = tmp_path_factory.mktemp(f"nbgrader-{part}")
    with course_copy(tmp) as (course, config, api):
        from nbgrader.api import Gradebook

        students = _submit_all(api, config, tmp, course, part)
        answers = _autograde_all(api, students, part)
        everyone = [(n, s) for n, names in students.items() for s in names]
        if part == "tricks":
            everyone += TRICKS + [(FLOW, s) for s in CLASS_STUDENTS]
        with Gradebook(config.CourseDirectory.db_url) as gb:
            found = {(n, s): gb.find_submission(n, s) for n, s in everyone}
            scores = {key: (sub.score, sub.max_score) for key, sub in found.items()}
            late = {s: gb.find_submission(FLOW, s).total_seconds_late for s in students[FLOW]}
        print(f"scores, {part}:", scores)
    # the environment and the working directory are put back before any test runs: the graded course
    # lives for the whole session, and other files' tests run on the same worker after it
    yield course, scores, late, (answers if part == "submissions" else {})
