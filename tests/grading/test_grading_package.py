"""The three packages: course_lib (the library a student reads) holds no grading code and imports neither
course_assignments (the checks released assignments import, the kit `make lab` builds) nor course_grading
(the instructor's grader); the student's side runs without the grader; old imports of the checks still
work; and the grading edition of the student's packages is found by names, cuts what it names and
nothing else, and still imports."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest
from support.paths import REPO_ROOT

from course_grading.edition import edition, left_out_here, stubbed
from course_grading.names import STUDENT_PACKAGES, module_of
from course_grading.switched_off import SWITCHED_OFF, everything
from course_lib.cli.shelf_command import shelf_files

LIBRARY = REPO_ROOT / "course_lib"
CHECKS = REPO_ROOT / "course_assignments"


def _imports(package) -> list[tuple[str, str]]:
    """(file, module) for every import in a package's files, relative ones made absolute."""
    found = []
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            found += [(str(path.relative_to(REPO_ROOT)), n) for n in names]
    return found


def test_course_lib_holds_no_grading_code_and_imports_neither_grading_package():
    assert not (LIBRARY / "grading").exists()
    outside = ("course_grading", "course_assignments")
    assert [(f, n) for f, n in _imports(LIBRARY) if n.startswith(outside)] == []
    assert [(f, n) for f, n in _imports(CHECKS) if n.startswith("course_grading")] == []
    machinery = {"sandbox.py", "worker.py", "execute.py", "switched_off.py", "plain.py", "feedback.py"}
    machinery |= {"kit.py", "edition.py", "intake.py"}
    checks = {"schedule_checks.py", "memory_checks.py", "wan_checks.py", "rank_checks.py", "guard.py"}
    assert not [p for p in LIBRARY.rglob("*.py") if p.name in machinery | checks]
    assert STUDENT_PACKAGES == (LIBRARY, CHECKS)  # what a grading edition cuts and a sandbox mounts
    # a04c's sealed reports are the grader's (course_grading/sealed_ranks.py, rank_guard.py): the library
    # keeps only generic doors (spawn's private arguments and guard hooks, a rank function's finish hook)
    assert [(f, n) for f, n in _imports(LIBRARY) if n.split(".")[0] in ("hmac", "secrets")] == []
    kinds = (ast.FunctionDef, ast.ClassDef)
    defs = [(str(p.relative_to(REPO_ROOT)), n.name) for p in LIBRARY.rglob("*.py")
            for n in ast.walk(ast.parse(p.read_text())) if isinstance(n, kinds)]  # fmt: skip
    assert [(f, name) for f, name in defs if name in ("seal", "sealed")] == []


def test_the_shelf_stays_within_its_ceiling():
    """What a student reads top to bottom (``python -m course_lib shelf``): at most 16 files and 4,500
    lines; grading machinery that would add to it lives in course_grading instead."""
    files = shelf_files()
    assert len(files) <= 16 and sum(f.lines for f in files) <= 4500, (len(files), sum(f.lines for f in files))


@pytest.mark.processes
def test_the_student_side_runs_without_the_grading_package():
    """Every course_lib and course_assignments module (the kit `make lab` runs, the checks released
    assignments import, the lessons' self-checks) imports with course_grading nowhere to be found; an
    old import of the checks (a released assignment's locked cell) is the new module, not a copy."""
    code = (
        "import importlib, pkgutil, sys\n"
        "sys.modules['course_grading'] = None  # importing it now raises\n"
        "import course_lib, course_assignments\n"
        "for pkg in (course_lib, course_assignments):\n"
        "    for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.'):\n"
        "        if not m.name.endswith('__main__'):\n"
        "            importlib.import_module(m.name)\n"
        "from course_assignments import kit\n"
        "from course_lib.grading import schedule_checks as old\n"
        "import course_lib.grading.guard as old_guard, course_lib.grading as old_package\n"
        "from course_assignments import guard, schedule_checks\n"
        "print(old is schedule_checks, old_guard is guard, old_package is course_assignments)\n"
        "print(sorted(n for n in sys.modules if n.startswith('course_grading')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    # only the blocked placeholder of course_grading
    assert done.stdout.splitlines() == ["True True True", "['course_grading']"]


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
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd="/",
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == [
        "True", "fiber_latency_s is not available while grading: work it out from the distance and the speed "
        "of light",
    ]  # fmt: skip
    copied = library.parent / "data"  # a copy: a link would outlive the clone it points into
    assert not copied.is_symlink()
    assert (copied / "corpus.txt").read_bytes() == (REPO_ROOT / "data" / "corpus.txt").read_bytes()


def test_an_edition_cuts_an_answer_a_check_computes_too():
    """a03's checks compute GPipe's idle share to say how far off a student is: the edition of the
    student's packages cuts it from course_assignments as it cuts the library's closed form."""
    library = edition({"_gpipe_idle": "derive the formula yourself"})
    checks = (library.parent / "course_assignments" / "schedule_checks.py").read_text()
    assert "_gpipe_idle is not available while grading: derive the formula yourself" in checks
    assert (library.parent / "course_lib" / "shelf" / "schedule.py").exists()
    where = left_out_here({"_gpipe_idle": "x"})["_gpipe_idle"]
    assert where == ["course_assignments/schedule_checks.py:_gpipe_idle"]


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
