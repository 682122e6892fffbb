"""The clever students' submissions (tests/support/autograde.py grades them with nbgrader, for
tests/grading/test_assignments_tricks.py;
bench/bench_grading.py times them): each trick once got 5-10/10 when a submission shared one kernel
with its tests and ran in the course directory, and the robustness cases put an exit or a flood of
output into the solution."""

from __future__ import annotations

import json
from pathlib import Path

from course_grading.switched_off import SWITCHED_OFF
from support.assignments import COURSE, grade_info

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
import course_assignments as _g, course_assignments.guard as _guard
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
    "a04_one_f_one_b": "import types\nfrom course_lib.shelf import first_schedules as _b\n"
    "_copy = types.FunctionType(_b.one_f_one_b.__code__, _b.one_f_one_b.__globals__)\n"
    "my_1f1b = lambda p, m: _copy(p, m)",
}
# Issue 41's round: a student who reads the grader
UNLOCK_AND_PATCH = PATCH_CHECKS + """
import course_grading.worker as _w  # the worker's error reporter, if it ran the tests
_w._error = lambda err: {"ename": "AssertionError", "evalue": "", "traceback": ""}
"""
LIBRARY_CALL = {  # the graded function calls the library's answer (the grader once switched it off in here)
    "a04_one_f_one_b": "from course_lib.shelf.first_schedules import build_schedule\n"
    "def my_1f1b(p, m):\n    return build_schedule('1f1b', p, m)\n",
    "a07_zero_bubble": "from course_lib.schedules.zero_bubble import zb_h1\n"
    "def my_zb_h1(p, m):\n    return zb_h1(p, m)\n",
    # a04c: the rank's order read off the library's 1F1B (its builders are left out of the edition)
    "a04c_write_the_pipeline": """from course_lib.shelf.first_schedules import build_schedule


def one_f_one_b(rank):
    held, pending = {}, []

    def arrive(src):
        buffer = torch.empty(rank.shape, dtype=rank.dtype, device=rank.device)
        dist.recv(buffer, src=src)
        return buffer

    for action in build_schedule("1f1b", rank.p, rank.m).orders[rank.stage]:
        i = action.microbatch
        if action.kind.name == "F":
            y = rank.forward(i, rank.tokens(i) if rank.is_first else arrive(rank.prev))
            held[i] = rank.loss_fn(y, rank.targets(i)) / rank.m if rank.is_last else y
            if not rank.is_last:
                pending.append(dist.isend(y.detach(), dst=rank.next))
        else:
            dx = rank.backward(i, held.pop(i), None if rank.is_last else arrive(rank.next))
            if not rank.is_first:
                pending.append(dist.isend(dx, dst=rank.prev))
    for work in pending:
        work.wait()
""",
}
ANSWER_TABLE = {  # a cell fills a table of the library's answers while it runs; the functions read it
    "a03_bubble": "from course_lib.schedules.closed_forms import gpipe_bubble\n"
    "_T = {(p, m): gpipe_bubble(p, m) for p in range(1, 17) for m in range(1, 65)}\n"
    "_O = {(p, m): gpipe_bubble(p, m, convention='megatron') for p in range(1, 17) for m in range(1, 65)}\n"
    "idle_fraction = lambda p, m: _T[(p, m)]\nbubble_over_ideal = lambda p, m: _O[(p, m)]\n",
}
SLEEP = "import time\ntime.sleep(600)  # longer than the submission's wall clock\n"
FLOOD = "for _ in range(400_000):\n    print('x' * 99)  # 40 MB\n"
EXITS = {  # the solution's line -> what replaces it
    "exit": ("    return (p - 1) / (m + p - 1)", "    import os\n    os._exit(0)"),  # in idle_fraction
    "sys_exit": ("    return (p - 1) / m", "    import sys\n    sys.exit(1)"),  # in bubble_over_ideal
}
ROBUSTNESS = ("exit", "sys_exit", "flood")  # the solution with one of these in it: graded, not a trick


def notebook_of(folder: Path) -> tuple[Path, dict]:
    """The one notebook in ``folder``: its path and its JSON."""
    (path,) = folder.glob("*.ipynb")
    return path, json.loads(path.read_text())


def _code_cell(source: str) -> dict:
    return {"cell_type": "code", "metadata": {}, "source": source, "outputs": [], "execution_count": None}


def trick(course: Path, name: str, kind: str) -> dict:
    """The student version of `name` (or the solution, for the robustness cases) with `kind` applied."""
    base = "source" if kind in (*ROBUSTNESS, "slow") else "release"
    _, nb = notebook_of(course / base / name)
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
    elif kind == "library_call":
        answers[0]["source"] = LIBRARY_CALL[name]
    elif kind == "answer_table":
        answers[0]["source"] = ANSWER_TABLE[name]
    elif kind == "unlocked":  # every test cell unlocked in the metadata editor, the checks patched
        for cell in nb["cells"]:
            if grade_info(cell).get("grade"):
                cell["metadata"]["nbgrader"]["locked"] = False
        answers[0]["source"] = UNLOCK_AND_PATCH
    elif kind == "pasted_test":  # a test cell copied and pasted: its metadata is "nbgrader": {}
        test = next(c for c in nb["cells"] if grade_info(c).get("grade"))
        pasted = json.loads(json.dumps(test))
        pasted["metadata"]["nbgrader"] = {}
        nb["cells"].insert(nb["cells"].index(test) + 1, pasted)
    elif kind == "slow":  # the solution, but its first cell sleeps past the wall clock
        answers[0]["source"] = SLEEP + "".join(answers[0]["source"])
    elif kind in EXITS:  # the solution, but one of its functions ends its process or calls sys.exit
        line, exits = EXITS[kind]
        source = "".join(answers[0]["source"])
        assert line in source, f"{name}: the solution's line {line!r} is not there to replace"
        answers[0]["source"] = source.replace(line, exits)
    return nb


# What tests/grading/test_assignments_tricks.py checks (graded in tests/support/autograde.py's course): to
# keep the time bounded (each submission starts a sandbox that imports torch), one trick (exec the source
# solution) against every assignment and every trick against A1; A2 also gets the library copy made
# before its builder is switched off; and the robustness cases on A1's solution. The student id is the kind.
A1_TRICKS = ("transformer", "patch_checks", "frame_reader", "gradebook", "library_copy")


def trick_submissions(assignments: list[str]) -> list[tuple[str, str]]:
    """(assignment, kind) of every trick and robustness case graded."""
    found = [(name, "exec_source") for name in assignments] + [("a03_bubble", kind) for kind in A1_TRICKS]
    found += [(name, "library_call") for name in LIBRARY_CALL] + [(n, "answer_table") for n in ANSWER_TABLE]
    return found + [("a04_one_f_one_b", "library_copy"), *[("a03_bubble", kind) for kind in ROBUSTNESS]]


# graded together in one class run of A1 (student ids "class-<kind>"), each submission with a wall clock of
# CLASS_RUN_S (tests/support/autograde.py): the malformed and the slow among the others
CLASS_RUN = ("unreadable", "unlocked", "pasted_test", "slow")  # honest work is graded at full time above
CLASS_RUN_S = 10.0
CLASS_STUDENTS = tuple(f"class-{kind}" for kind in CLASS_RUN)


def submit_class_run(course: Path, name: str) -> None:
    """Write A1's class-run submissions to submitted/class-<kind>/<name>/ (student ids CLASS_STUDENTS)."""
    submit_tricks(course, [(name, kind) for kind in CLASS_RUN], prefix="class-")


def submit_tricks(course: Path, submissions: list[tuple[str, str]], prefix: str = "") -> None:
    """Write each (assignment, kind) to submitted/<prefix><kind>/<assignment>/, as nbgrader collects it."""
    for name, kind in submissions:
        folder = course / "submitted" / f"{prefix}{kind}" / name
        folder.mkdir(parents=True)
        path, _ = notebook_of(course / "release" / name)
        if kind == "unreadable":  # an upload cut off after 1,000 bytes: not JSON
            (folder / path.name).write_text(path.read_text()[:1000])
            continue
        (folder / path.name).write_text(json.dumps(trick(course, name, kind)))
