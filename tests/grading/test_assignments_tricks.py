"""A clever student against the real `nbgrader autograde` (course_lib/grading/execute.py's sandbox).

Each trick below got 5-10/10 when a submission shared one kernel with its tests and ran in the course
directory. Here each must score at most 3/10. To keep the time bounded (autograde starts a sandbox and
imports torch per submission), one trick (exec the source solution) runs against every assignment and
every trick against A1; A2 also gets the library copy made before its builder is switched off. A student
function that exits or floods its output fails only its own tests.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.assignments import ASSIGNMENTS, COURSE, cells, grade_info, sandbox_or_skip, solution_secrets
from support.course_copy import course_copy

from course_lib.grading.switched_off import SWITCHED_OFF

nbgrader = pytest.importorskip("nbgrader", reason="nbgrader is in the dev extra: pip install -e '.[dev]'")
pytestmark = [
    pytest.mark.processes,
    pytest.mark.timeout(900),
    pytest.mark.filterwarnings("ignore:Object of type .* not in session"),  # nbgrader's own
]

EXEC_SOURCE = """
import json, pathlib, course_lib
_found = [pathlib.Path(course_lib.__file__).resolve().parents[1] / "notebooks/assignments/source/{name}",
          pathlib.Path("../../../source/{name}").resolve(), pathlib.Path("{course}/source/{name}")]
for _folder in _found:
    for _nb in _folder.glob("*.ipynb"):
        for _cell in json.loads(_nb.read_text())["cells"]:
            if _cell["metadata"].get("nbgrader", {{}}).get("grade_id") == "{grade_id}":
                exec("".join(_cell["source"]))
"""
TRANSFORMER = "get_ipython().input_transformers_cleanup.append(lambda lines: [])  # every later cell empty"
PATCH_CHECKS = """
import contextlib
import course_lib.grading as _g, course_lib.grading.guard as _guard
for _name in ("fail", "number", "numbers", "at_most", "answered", "schedule_valid", "schedule_equals",
              "inflight_at_most", "partition_fits", "close_to_best", "call"):
    setattr(_g, _name, lambda *args, **kwargs: None)
_guard.without = lambda *args, **kwargs: contextlib.nullcontext()
"""
FRAME_READER = """
import sys

class _Sly(float):
    def __float__(self):  # the grader's expected value, read off the caller's frame
        frame = sys._getframe(1)
        while frame and "expected" not in frame.f_locals:
            frame = frame.f_back
        return float(frame.f_locals["expected"]) if frame else 0.0
    __eq__ = lambda self, other: True
    __le__ = __ge__ = __lt__ = __gt__ = __eq__

{functions}
"""
GRADEBOOK = """
import pathlib, sqlite3
for _db in [pathlib.Path("../../../gradebook.db"), pathlib.Path("{course}/gradebook.db")]:
    try:
        print(_db.read_bytes()[:200000])  # every hidden test is in there
        _con = sqlite3.connect(str(_db))
        _con.execute("UPDATE grade SET manual_score = 10")
        _con.commit()
    except Exception as err:
        print("no gradebook:", type(err).__name__)
"""
LIBRARY_COPY = {  # a copy of the library's answer, made before the grader switches it off
    "a03_bubble": "import types\nfrom course_lib.schedules import closed_forms as _cf\n"
    "_copy = types.FunctionType(_cf.gpipe_bubble.__code__, _cf.gpipe_bubble.__globals__)\n"
    "idle_fraction = lambda p, m: _copy(p, m)\n"
    "bubble_over_ideal = lambda p, m: _copy(p, m, convention='megatron')",
    "a04_one_f_one_b": "import types\nfrom course_lib.schedules import builders as _b\n"
    "_copy = types.FunctionType(_b.one_f_one_b.__code__, _b.one_f_one_b.__globals__)\n"
    "my_1f1b = lambda p, m: _copy(p, m)",
}
FLOOD = "for _ in range(400_000):\n    print('x' * 99)  # 40 MB\n"
EXITS = {  # the solution's line -> what replaces it
    "exit": ("    return (p - 1) / (m + p - 1)", "    import os\n    os._exit(0)"),  # in idle_fraction
    "sys_exit": ("    return (p - 1) / m", "    import sys\n    sys.exit(1)"),  # in bubble_over_ideal
}
ROBUSTNESS = ("exit", "sys_exit", "flood")  # the solution with one of these in it: graded, not a trick


def _notebook(folder: Path) -> tuple[Path, dict]:
    (path,) = folder.glob("*.ipynb")
    return path, json.loads(path.read_text())


def _code_cell(source: str) -> dict:
    return {"cell_type": "code", "metadata": {}, "source": source, "outputs": [], "execution_count": None}


def trick(course: Path, name: str, kind: str) -> dict:
    """The student version of `name` (or the solution, for the robustness cases) with `kind` applied."""
    base = "source" if kind in ROBUSTNESS else "release"
    _, nb = _notebook(course / base / name)
    answers = [c for c in nb["cells"] if grade_info(c).get("solution")]
    first = nb["cells"].index(answers[0])
    if kind == "exec_source":
        for cell in answers:
            cell["source"] = EXEC_SOURCE.format(
                name=name, course=COURSE, grade_id=grade_info(cell)["grade_id"]
            )
    elif kind in ("transformer", "patch_checks", "gradebook", "flood"):
        code = {"transformer": TRANSFORMER, "patch_checks": PATCH_CHECKS, "flood": FLOOD}.get(kind, GRADEBOOK)
        nb["cells"].insert(first, _code_cell(code.format(course=COURSE)))
    elif kind == "frame_reader":
        functions = "\n".join(
            f"def {f}(*args, **kwargs):\n    return _Sly(0.5)\n" for f in SWITCHED_OFF[name]
        )
        answers[0]["source"] = FRAME_READER.format(functions=functions)
    elif kind == "library_copy":
        answers[0]["source"] = LIBRARY_COPY[name]
    elif kind in EXITS:  # the solution, but one of its functions ends its process or calls sys.exit
        line, exits = EXITS[kind]
        source = "".join(answers[0]["source"])
        assert line in source, f"{name}: the solution's line {line!r} is not there to replace"
        answers[0]["source"] = source.replace(line, exits)
    return nb


A1_TRICKS = ("transformer", "patch_checks", "frame_reader", "gradebook", "library_copy")
SUBMISSIONS = [(name, "exec_source") for name in ASSIGNMENTS] + [("a03_bubble", kind) for kind in A1_TRICKS]
SUBMISSIONS += [("a04_one_f_one_b", "library_copy"), *[("a03_bubble", kind) for kind in ROBUSTNESS]]


@pytest.fixture(scope="module")
def tricked(tmp_path_factory):
    sandbox_or_skip()
    with course_copy(tmp_path_factory.mktemp("tricks")) as (course, config, api):
        from nbgrader.api import Gradebook

        for name in sorted({n for n, _ in SUBMISSIONS}):
            assert api.generate_assignment(name, force=True)["success"]
        for name, kind in SUBMISSIONS:
            folder = course / "submitted" / kind / name
            folder.mkdir(parents=True)
            path, _ = _notebook(course / "release" / name)
            (folder / path.name).write_text(json.dumps(trick(course, name, kind)))
            result = api.autograde(name, kind, force=True, create=True)
            assert result["success"], result["log"] + result.get("error", "")
        for name in sorted({n for n, _ in SUBMISSIONS}):
            assert api.generate_feedback(name)["success"]
        with Gradebook(config.CourseDirectory.db_url) as gb:
            scores = {(n, k): (gb.find_submission(n, k).score, gb.find_submission(n, k).max_score)
                      for n, k in SUBMISSIONS}  # fmt: skip
        print("\ntricks' scores:", scores)
        yield course, scores


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
