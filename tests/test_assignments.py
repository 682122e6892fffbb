"""The nbgrader assignments, end to end, the way an instructor runs them (in a temp copy of the course dir).

generate_assignment -> the student versions hold no solution and no hidden test; autograde of the
solution (source) versions -> full points; autograde of the untouched student versions -> zero points,
every failed test with a teaching message, and nothing failing before the first exercise.
Hermetic: HOME and the Jupyter dirs point into a temp dir, and the gradebook lives there too.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest

nbgrader = pytest.importorskip("nbgrader", reason="nbgrader is in the dev extra: pip install -e '.[dev]'")

pytestmark = [
    pytest.mark.processes,  # nbgrader runs the notebooks in kernels
    pytest.mark.filterwarnings("ignore:Object of type .* not in session"),  # nbgrader's own
]

COURSE = Path(__file__).resolve().parent.parent / "notebooks" / "assignments"
ASSIGNMENTS = sorted(p.parent.name for p in (COURSE / "source").glob("*/*.ipynb"))
REGION = re.compile(r"### BEGIN (SOLUTION|HIDDEN TESTS)\n(.*?)### END \1", re.S)


def cells(path: Path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


def grade_info(cell: dict) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def errors(cell: dict) -> list[dict]:
    return [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Generate, 'submit' the solution and the untouched student version, autograde both."""
    tmp = tmp_path_factory.mktemp("nbgrader")
    course = tmp / "course"
    shutil.copytree(
        COURSE, course, ignore=shutil.ignore_patterns("release", "submitted", "autograded", "*.db")
    )
    env = {
        "HOME": tmp / "home",
        "JUPYTER_CONFIG_DIR": tmp / "jupyter-config",
        "JUPYTER_DATA_DIR": tmp / "jupyter-data",
        "JUPYTER_RUNTIME_DIR": tmp / "jupyter-runtime",
        "IPYTHONDIR": tmp / "ipython",
    }
    saved = {k: os.environ.get(k) for k in [*env, "PATH"]}
    for key, value in env.items():
        value.mkdir()
        os.environ[key] = str(value)
    # nbgrader runs its database migrations with the `alembic` command found on PATH
    os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")
    cwd = Path.cwd()
    os.chdir(course)
    try:
        from nbgrader.api import Gradebook
        from nbgrader.apps import NbGraderAPI
        from traitlets.config import Config

        config = Config()
        config.CourseDirectory.root = str(course)
        config.CourseDirectory.db_url = f"sqlite:///{course / 'gradebook.db'}"
        config.Execute.timeout = 600
        api = NbGraderAPI(config=config)
        for name in ASSIGNMENTS:
            result = api.generate_assignment(name, force=True)
            assert result["success"], result["log"] + result.get("error", "")
            for student, origin in (("solution", "source"), ("untouched", "release")):
                dest = course / "submitted" / student / name
                shutil.copytree(course / origin / name, dest)
            for student in ("solution", "untouched"):
                result = api.autograde(name, student, force=True, create=True)
                assert result["success"], result["log"] + result.get("error", "")
        scores = {}
        with Gradebook(config.CourseDirectory.db_url) as gb:
            for name in ASSIGNMENTS:
                for student in ("solution", "untouched"):
                    sub = gb.find_submission(name, student)
                    scores[(name, student)] = (sub.score, sub.max_score)
        yield course, scores
    finally:
        os.chdir(cwd)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def test_four_assignments_with_points_and_hidden_tests():
    assert len(ASSIGNMENTS) >= 4
    for name in ASSIGNMENTS:
        (notebook,) = (COURSE / "source" / name).glob("*.ipynb")
        graded_cells = [c for c in cells(notebook) if grade_info(c).get("grade")]
        assert graded_cells and all(grade_info(c)["points"] > 0 for c in graded_cells), name
        assert any("### BEGIN HIDDEN TESTS" in "".join(c["source"]) for c in graded_cells), name
        first = "".join(cells(notebook)[1]["source"])
        assert first == "%matplotlib inline\nfrom course_lib import lesson\nlesson.setup()", name


def test_student_versions_contain_no_solution_and_no_hidden_test(graded):
    course, _ = graded
    for name in ASSIGNMENTS:
        (source,) = (course / "source" / name).glob("*.ipynb")
        source_text = "\n".join("".join(c["source"]) for c in cells(source))
        outside = {line.strip() for line in REGION.sub("", source_text).splitlines()}
        secrets = []
        for _, body in REGION.findall(source_text):
            # lines also written outside the regions (a closing bracket, `rel_tol=0)`) give nothing away
            secrets += [line.strip() for line in body.splitlines() if line.strip() not in outside]
        assert secrets, f"{name}: no solution regions found"
        (released,) = (course / "release" / name).glob("*.ipynb")
        text = "\n".join("".join(c["source"]) for c in cells(released))
        assert "BEGIN SOLUTION" not in text and "HIDDEN TESTS" not in text
        student_lines = {line.strip() for line in text.splitlines()}
        leaked = [line for line in secrets if line and line in student_lines]
        assert not leaked, f"{name}: solution or hidden-test lines in the student version: {leaked[:3]}"
        assert "raise NotImplementedError()" in text


def test_autograde_solution_full_points_untouched_zero(graded):
    _, scores = graded
    for name in ASSIGNMENTS:
        score, max_score = scores[(name, "solution")]
        assert max_score >= 5 and score == max_score, (name, score, max_score)
        score, max_score = scores[(name, "untouched")]
        assert score == 0 and max_score > 0, (name, score, max_score)


def test_untouched_student_version_fails_only_at_exercises_with_teaching_messages(graded):
    course, _ = graded
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


def run_test_cell(assignment: str, grade_id: str, student_code: str) -> str:
    """Run a source notebook's imports, then `student_code`, then test cell `grade_id` (hidden tests
    included), in-process; return the AssertionError's message ('' if the test passed)."""
    (notebook,) = (COURSE / "source" / assignment).glob("*.ipynb")
    nb_cells = cells(notebook)
    namespace: dict = {}
    for cell in nb_cells:
        source = "".join(cell["source"])
        if cell["cell_type"] == "code" and grade_info(cell).get("grade_id", "").endswith("_imports"):
            exec(source, namespace)
    exec(student_code, namespace)
    (test_cell,) = [c for c in nb_cells if grade_info(c).get("grade_id") == grade_id]
    try:
        exec("".join(test_cell["source"]), namespace)
    except AssertionError as err:
        return str(err)
    return ""


def test_wrong_gpipe_is_told_which_action_waits_for_which_on_which_device():
    backwards_first = """
def my_gpipe(p, m):
    orders = [[Action(d, Kind.B, mb) for mb in range(m)] + [Action(d, Kind.F, mb) for mb in range(m)]
              for d in range(p)]
    return Schedule("mine", p, m, orders, list(range(p)))
"""
    message = run_test_cell("a1_bubble", "a1_test_gpipe_valid", backwards_first)
    assert "deadlock: device 0 is stuck at 0B0" in message
    assert (
        "it needs 0F0 (stage 0's forward of micro-batch 0), which this same device runs only later" in message
    )
    reversed_backwards = """
def my_gpipe(p, m):
    orders = [[Action(d, Kind.F, mb) for mb in range(m)] + [Action(d, Kind.B, m - 1 - mb) for mb in range(m)]
              for d in range(p)]
    return Schedule("mine", p, m, orders, list(range(p)))
"""
    message = run_test_cell(
        "a1_bubble", "a1_test_gpipe_valid", reversed_backwards
    )  # valid, but not GPipe's order
    assert "position" in message and "gpipe runs" in message and "Hint:" in message


def test_wrong_numbers_get_magnitude_and_hint():
    message = run_test_cell(
        "a1_bubble", "a1_test_idle_fraction", "def idle_fraction(p, m):\n    return (p - 1) / m"
    )
    assert "idle_fraction(4, 8): you gave 0.375, which is too high by 38%" in message
    assert "between 0.1 and 1" in message and "Hint:" in message
    assert (
        run_test_cell(
            "a1_bubble", "a1_test_idle_fraction", "idle_fraction = lambda p, m: (p - 1) / (m + p - 1)"
        )
        == ""
    )


def test_1f1b_that_holds_too_much_is_told_where():
    gpipe_in_disguise = """
def my_1f1b(p, m):
    orders = [[Action(d, Kind.F, mb) for mb in range(m)] + [Action(d, Kind.B, mb) for mb in range(m)]
              for d in range(p)]
    return Schedule("mine", p, m, orders, list(range(p)))
"""
    assert run_test_cell("a2_one_f_one_b", "a2_test_valid", gpipe_in_disguise) == ""  # valid...
    message = run_test_cell("a2_one_f_one_b", "a2_test_memory", gpipe_in_disguise)  # ...but holds m
    assert "stage 0 holds 8 micro-batches' activations at once" in message and "at most 4" in message
