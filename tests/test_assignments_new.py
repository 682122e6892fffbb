"""Assignments 6 (TP against PP) and 7 (zero bubble), end to end with nbgrader's API, in a temp course dir.

For each: generate the student version (no solution, no hidden test, nothing that hands out the answer),
then autograde three submissions: the solution (full marks), the untouched student version (zero) and a
"hard-coded" one that returns the answers the visible checks accept and nothing else (at most 30%: the hidden
tests use other sizes, links and costs). Hermetic: HOME, the Jupyter dirs and the gradebook live in tmp.
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
NEW = ("a6_tp_vs_pp", "a7_zero_bubble")
SET_UP = ("_imports", "_tools", "_scenario")  # cells run before a student's code in run_test_cell
SETUP = "%matplotlib inline\nfrom course_lib import lesson\nlesson.setup()"  # every notebook's first cell
STUDENTS = ("solution", "untouched", "hardcoded")
REGION = re.compile(r"### BEGIN (SOLUTION|HIDDEN TESTS)\n(.*?)### END \1", re.S)


def _zb_orders_text() -> str:
    """ZB-H1's orders at the sizes the visible cells use, written out as a copying student would."""
    from course_lib.schedules.zero_bubble import zb_h1

    return repr(
        {(p, m): [[str(a) for a in order] for order in zb_h1(p, m).orders] for p, m in ((3, 6), (4, 4))}
    )


# Answers that satisfy every visible check and know nothing else: what copying the visible numbers gives.
HARDCODED = {
    "a6_counts": """
def tp_allreduces_per_step(n_layers, t, m, training=True):
    return {(3, 2, 3, True): 36, (3, 2, 1, False): 6, (5, 4, 2, True): 40}.get((n_layers, t, m, training), 0)

def pp_messages_per_step(p, m, training=True):
    return {(3, 5, True): 20, (3, 1, False): 2}.get((p, m, training), 0)
""",
    "a6_crossover": """
def first_m_pp_wins(link, devices):
    return 28
""",
    "a6_decide": """
def decide(link, devices, m):
    seen = {"NVLink 4": ("TP", "bubble"), "InfiniBand NDR": ("PP", "bandwidth"),
            "transatlantic": ("PP", "latency")}
    return seen.get(link.name, ("TP", "bubble"))
""",
    "a7_my_zb_h1": """
SEEN = {ZB_ORDERS}

def my_zb_h1(p, m):
    orders = [[Action.parse(a) for a in order] for order in SEEN.get((p, m), SEEN[(3, 6)])]
    return Schedule("copied", len(orders), max(a.microbatch for a in orders[0]) + 1, orders,
                    list(range(len(orders))), split_backward=True)
""",
    "a7_predict": """
def predicted_bubble(p, m, f, i, w):
    return 1 / 6
""",
}


def cells(path: Path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


def grade_info(cell: dict) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def notebook_text(path: Path) -> str:
    return "\n".join("".join(c["source"]) for c in cells(path))


def hardcode(released: Path, dest: Path) -> None:
    """The released notebook with every answer cell replaced by its HARDCODED version."""
    nb = json.loads(released.read_text())
    for cell in nb["cells"]:
        grade_id = grade_info(cell).get("grade_id", "")
        if grade_id in HARDCODED:
            cell["source"] = HARDCODED[grade_id].replace("{ZB_ORDERS}", _zb_orders_text()).strip() + "\n"
    dest.parent.mkdir(parents=True)
    dest.write_text(json.dumps(nb, indent=1) + "\n")


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Generate a6 and a7, submit the three versions of each, autograde them all; yield (course, scores)."""
    tmp = tmp_path_factory.mktemp("nbgrader-new")
    course = tmp / "course"
    nbgrader_output = shutil.ignore_patterns("release", "submitted", "autograded", "feedback", "*.db")

    def only_the_new_assignments(folder: str, names: list[str]) -> list[str]:
        other = [n for n in names if Path(folder).name == "source" and n not in NEW]
        return [*nbgrader_output(folder, names), *other]

    shutil.copytree(COURSE, course, ignore=only_the_new_assignments)
    env = {
        k: tmp / k.lower() for k in ("HOME", "JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR")
    }
    env["IPYTHONDIR"] = tmp / "ipython"
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
        for name in NEW:
            result = api.generate_assignment(name, force=True)
            assert result["success"], result["log"] + result.get("error", "")
            (released,) = (course / "release" / name).glob("*.ipynb")
            shutil.copytree(course / "source" / name, course / "submitted" / "solution" / name)
            shutil.copytree(course / "release" / name, course / "submitted" / "untouched" / name)
            hardcode(released, course / "submitted" / "hardcoded" / name / released.name)
            for student in STUDENTS:
                result = api.autograde(name, student, force=True, create=True)
                assert result["success"], result["log"] + result.get("error", "")
        with Gradebook(config.CourseDirectory.db_url) as gb:
            submissions = {
                (name, student): gb.find_submission(name, student) for name in NEW for student in STUDENTS
            }
            scores = {key: (sub.score, sub.max_score) for key, sub in submissions.items()}
        yield course, scores
    finally:
        os.chdir(cwd)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def test_new_assignments_are_worth_ten_points_with_hidden_tests():
    for name in NEW:
        (notebook,) = (COURSE / "source" / name).glob("*.ipynb")
        graded_cells = [c for c in cells(notebook) if grade_info(c).get("grade")]
        assert sum(grade_info(c)["points"] for c in graded_cells) == 10, name
        assert all("### BEGIN HIDDEN TESTS" in "".join(c["source"]) for c in graded_cells), name
        assert "".join(cells(notebook)[1]["source"]) == SETUP, name


def test_student_versions_hold_no_solution_no_hidden_test_no_shortcut(graded):
    course, _ = graded
    for name in NEW:
        (source,) = (course / "source" / name).glob("*.ipynb")
        source_text = notebook_text(source)
        outside = {line.strip() for line in REGION.sub("", source_text).splitlines()}
        secrets = [
            line.strip()
            for _, body in REGION.findall(source_text)
            for line in body.splitlines()
            if line.strip() and line.strip() not in outside
        ]
        (released,) = (course / "release" / name).glob("*.ipynb")
        text = notebook_text(released)
        assert "BEGIN SOLUTION" not in text and "HIDDEN TESTS" not in text and "NotImplementedError()" in text
        student_lines = {line.strip() for line in text.splitlines()}
        assert not [line for line in secrets if line in student_lines], name
        # the library's answers are neither imported nor named: its ZB-H1, the TP/PP accounting, the registry
        for shortcut in (
            r"schedules\.zero_bubble",
            r"\bzb_h1\b",
            r"\bzb-h1\b",
            r"\baccounting\b",
            r"\btp_allreduces\(",
            r"\bpp_sends\(",
            r"expected=",
        ):
            assert not re.search(shortcut, text), (name, shortcut)
    a7 = notebook_text(next((course / "release" / "a7_zero_bubble").glob("*.ipynb")))
    assert "build_schedule" not in a7 and "SCHEDULES" not in a7  # both hand out "zb-h1" by name


def test_solution_full_marks_untouched_zero_hardcoded_at_most_30_percent(graded):
    _, scores = graded
    for name in NEW:
        assert scores[(name, "solution")] == (10, 10), (name, scores[(name, "solution")])
        assert scores[(name, "untouched")] == (0, 10), (name, scores[(name, "untouched")])
        score, max_score = scores[(name, "hardcoded")]
        assert score <= 0.3 * max_score, (name, score)


def test_failed_checks_teach_without_the_answer(graded):
    course, _ = graded
    for name in NEW:
        for student in ("untouched", "hardcoded"):
            (notebook,) = (course / "autograded" / student / name).glob("*.ipynb")
            for cell in cells(notebook):
                if not grade_info(cell).get("grade"):
                    continue
                (error,) = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
                assert error["ename"] == "AssertionError", (name, student, error["ename"], error["evalue"])
                message = error["evalue"]
                assert len(message) > 40 and ("Hint:" in message or "not written yet" in message), message
    # a copied answer is told what is wrong on the hidden size, in words
    (a6,) = (course / "autograded" / "hardcoded" / "a6_tp_vs_pp").glob("*.ipynb")
    messages = {
        grade_info(c)["grade_id"]: c["outputs"][-1]["evalue"] for c in cells(a6) if grade_info(c).get("grade")
    }
    tp_message = messages["a6_test_tp_count"]
    assert "tp_allreduces_per_step(80, 8, 8, training=True): you gave 0" in tp_message
    assert "between 1000 and 10000" in tp_message and "2560" not in tp_message  # its size, not its value
    assert (
        "the crossover lies at a smaller m" in messages["a6_test_crossover"]
        or "larger m" in messages["a6_test_crossover"]
    )


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
from course_lib.schedules.builders import build_schedule
def my_zb_h1(p, m):
    return build_schedule("zb-h1", p, m)
"""
    assert "not take the course library's ZB-H1" in run_test_cell(
        "a7_zero_bubble", "a7_test_valid", borrowed_zb
    )
    imported_zb = "from course_lib.schedules.zero_bubble import zb_h1 as my_zb_h1"
    assert "not take the course library's ZB-H1" in run_test_cell(
        "a7_zero_bubble", "a7_test_valid", imported_zb
    )
    borrowed_formula = """
from course_lib.schedules.closed_forms import Case, ZB_H1_BUBBLE
def my_zb_h1(p, m):
    from course_lib.schedules.zero_bubble import zb_h1
    return zb_h1(p, m)
def predicted_bubble(p, m, f, i, w):
    return ZB_H1_BUBBLE.value(Case(p, m, f=f, i=i, w=w))
"""
    assert "RuntimeError" in run_test_cell("a7_zero_bubble", "a7_test_predict", borrowed_formula)
    simulated = """
from course_lib.schedules.zero_bubble import zb_h1 as my_zb_h1
def predicted_bubble(p, m, f, i, w):
    return simulate(my_zb_h1(p, m), StageCosts(f=f, i=i, w=w)).bubble_fraction
"""
    assert "RuntimeError" in run_test_cell("a7_zero_bubble", "a7_test_predict", simulated)
    measured = "tp_allreduces_per_step = measured_tp_allreduces"
    message = run_test_cell("a6_tp_vs_pp", "a6_test_tp_count", measured)
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
    assert run_test_cell("a7_zero_bubble", "a7_test_valid", ONE_F_ONE_B_SPLIT) == ""
    message = run_test_cell("a7_zero_bubble", "a7_test_zero_bubble", ONE_F_ONE_B_SPLIT)
    assert (
        "most idle time of a device in my_zb_h1(3, 6), T_F = T_I = T_W = 1 is 4, but it must be at most 2"
        in message
    )
    at_once = "order += [Action(d, Kind.I, k), Action(d, Kind.W, k)]  # W at once"
    at_the_end = "order += [Action(d, Kind.I, k)] + [Action(d, Kind.W, w) for w in range(m) if k == m - 1]"
    late_ws = ONE_F_ONE_B_SPLIT.replace(at_once, at_the_end)
    message = run_test_cell("a7_zero_bubble", "a7_test_zero_bubble", late_ws)
    assert "stage 0 holds 6 micro-batches' activations at once" in message and "at most 3" in message
