"""The instructor's package beside the student's library: course_lib holds no grading machinery and never
imports course_grading (what `make lab` runs works without it), and the grading edition of the library is
found by names, cuts what it names and nothing else, and still imports."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest
from support.paths import REPO_ROOT

from course_grading.edition import edition, left_out_here, stubbed
from course_grading.names import module_of
from course_grading.switched_off import SWITCHED_OFF, everything

LIBRARY = REPO_ROOT / "course_lib"


def test_course_lib_never_imports_the_grading_package():
    found = []
    for path in LIBRARY.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            found += [f"{path.relative_to(REPO_ROOT)}: {n}" for n in names if n.startswith("course_grading")]
    assert found == []
    machinery = {"sandbox.py", "worker.py", "execute.py", "switched_off.py", "plain.py", "feedback.py"}
    assert not [p for p in LIBRARY.rglob("*.py") if p.name in machinery]


@pytest.mark.processes
def test_the_student_side_runs_without_the_grading_package():
    """Every course_lib module (the kit `make lab` runs, the checks released assignments import, the
    lessons' self-checks) imports with course_grading nowhere to be found."""
    code = (
        "import importlib, pkgutil, sys\n"
        "sys.modules['course_grading'] = None  # importing it now raises\n"
        "import course_lib\n"
        "for m in pkgutil.walk_packages(course_lib.__path__, 'course_lib.'):\n"
        "    if not m.name.endswith('__main__'):\n"
        "        importlib.import_module(m.name)\n"
        "from course_lib.grading import kit\n"
        "print(sorted(n for n in sys.modules if n.startswith('course_grading')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "['course_grading']"  # only the blocked placeholder


def test_every_name_the_table_leaves_out_is_defined_somewhere():
    """A name that no longer matches anything would leave an answer in the edition: the table is kept
    in step with the library (the notebook's own locked-cell tools are cut from the cells instead)."""
    notebook_tools = {"measured_tp_allreduces", "counted_pp_messages", "predicted_step_s"}
    for assignment in SWITCHED_OFF:
        missing = [n for n, where in left_out_here(everything(assignment)).items() if not where]
        assert set(missing) <= notebook_tools, (assignment, missing)


def test_a_stub_keeps_the_signature_and_decorators_and_refuses_with_why():
    source = (
        "import functools\n\nclass Shape:\n    @functools.cache\n    def flops(self, n: int = 2):\n"
        "        return 6 * n\n\n    def keep(self):\n        return 1\n\ndef other():\n    return 3\n"
    )
    cut = stubbed(source, {"Shape.flops": "count them yourself", "other": "no"})
    space: dict = {}
    exec(cut, space)  # noqa: S102
    assert space["Shape"]().keep() == 1 and "6 * n" not in cut and "return 3" not in cut
    with pytest.raises(RuntimeError, match="Shape.flops is not available while grading: count them yourself"):
        space["Shape"]().flops()


@pytest.mark.processes
def test_the_edition_of_an_assignment_imports_and_its_answers_refuse():
    """a06's edition freezes the preset links' latencies (computed at import by a left-out function)."""
    library = edition(everything("a06_two_continents"))
    code = (
        "import course_lib.network as n\n"
        "print(n.PRESETS['nvlink4'].link.latency_s > 0)\n"
        "try:\n    n.fiber_latency_s(100)\nexcept RuntimeError as err:\n    print(err)\n"
    )
    env = {"PYTHONPATH": f"{library.parent}:{REPO_ROOT}", "PATH": "/usr/bin:/bin"}
    (library.parent / "data").exists() or (library.parent / "data").symlink_to(REPO_ROOT / "data")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd="/",
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == [
        "True", "fiber_latency_s is not available while grading: work it out from the distance and the speed "
        "of light",
    ]  # fmt: skip


def test_the_plain_data_types_are_found_by_name():
    assert module_of("Schedule").startswith("course_lib.") and module_of("WanPlan").startswith("course_lib.")


def test_an_unreadable_notebook_is_kept_and_graded_as_the_release_with_the_reason(tmp_path):
    """nbgrader's pre-convert hook (course_grading.intake): a cut-off upload and a FIFO are each kept as
    <name>.ipynb.unreadable and replaced by the release with a first cell saying why; a readable
    notebook is left as it is, byte for byte."""
    import os

    import nbformat

    from course_grading.intake import KEPT, stand_in_for_unreadable

    release = tmp_path / "release" / "a1"
    release.mkdir(parents=True)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    nbformat.write(nb, str(release / "hw.ipynb"))
    paths = {}
    for student in ("cut", "fine", "fifo"):
        folder = tmp_path / "submitted" / student / "a1"
        folder.mkdir(parents=True)
        paths[student] = folder / "hw.ipynb"
    paths["cut"].write_text((release / "hw.ipynb").read_text()[:40])
    paths["fine"].write_text((release / "hw.ipynb").read_text())
    os.mkfifo(paths["fifo"])
    stand_in_for_unreadable(assignment="a*", student="*", notebooks=[str(p) for p in paths.values()])

    assert paths["fine"].read_text() == (release / "hw.ipynb").read_text()
    for student, why in (("cut", "NotJSONError"), ("fifo", "not a regular file")):
        graded = nbformat.read(str(paths[student]), as_version=4)
        assert graded.cells[0].cell_type == "markdown" and why in graded.cells[0].source
        assert "could not be read" in graded.cells[0].source and graded.cells[1].source == "x = 1"
        assert paths[student].with_name("hw.ipynb" + KEPT).exists()
    assert len(paths["cut"].with_name("hw.ipynb" + KEPT).read_text()) == 40
