"""Shared test fixtures: small, seeded models and data so the suite stays fast on 2 CPU cores."""

from __future__ import annotations

import os
import re
import shutil
import signal
import tempfile
from multiprocessing.util import Finalize
from pathlib import Path

import pytest
import torch

import course_lib.engines  # noqa: F401  (as the lessons and the CLI: the split backward registers itself)
import course_lib.schedules  # noqa: F401  (registers every schedule by name in the shelf's registry)
from course_lib.shelf.model import load_corpus

torch.set_num_threads(1)  # 2-core CI: one thread per test process is faster and deterministic

# `make unit` runs the suite three at a time (pytest-xdist), except these files, which it runs alone
# afterwards (-m serial): what they check would be disturbed by another test beside them
SERIAL = {
    "lessons/test_wan_measured.py": "measures steps against the formula: another test's load is noise in it",
    "grading/test_grading_sandbox.py": "its fork bomb takes every process the sandbox's user may have",
    "course/test_two_hosts.py": "a shaped link's measured step against one simulated from an earlier run",
    "grading/test_own_rank_grading.py": "up to 4 ranks on 2 cores, each waiting at most its stall limit",
    "lessons/test_own_rank.py": "up to 4 ranks on 2 cores, each waiting at most its stall limit",
}
# Under `--dist loadfile` a worker takes one file, or one notebook, at a time (so a file's module
# fixtures are made once, and a notebook's cells run in order on one kernel); each of these groups (a
# folder, or files) is taken as one, as their tests share session fixtures: the browser tests'
# JupyterLab and Chromium
ONE_GROUP: dict[str, tuple[str, ...]] = {
    "tests/browser/": ("tests/browser/",),
}
# The order the workers take the groups in, so that none runs on alone at the end: the files that
# take longest on one worker first (make test's --durations summed per file, a fresh clone on 2 cores
# under a load of 5-8), then the other files that start processes, the notebooks (each a kernel
# running a lesson), and last the many short tests that start none (make test passes
# --no-loadscope-reorder, else pytest-xdist would take the files with the most tests first). A name
# that is no longer there only loses its place.
LONGEST_FIRST = (
    # the two graded courses (tests/grading/conftest.py: every submission, and every trick, autograded
    # once in a sandbox or three each): about 4 min each on a loaded worker
    "tests/grading/test_assignments.py",
    "tests/grading/test_assignments_tricks.py",
    "tests/browser/",  # 5 min
    "tests/course/test_make_lab.py",  # 2.5 min (runs lesson 00 in the kit)
    "tests/course/test_readme_commands.py",
    "tests/grading/test_assignment_guide.py",  # 2 min
)


def _group(nodeid: str) -> str:
    """The file (or ONE_GROUP) a test belongs to; ``nodeid`` is relative to the repository."""
    path = nodeid.split("::")[0]
    taken = (name for name, paths in ONE_GROUP.items() for p in paths
             if path == p or (p.endswith("/") and path.startswith(p)))  # fmt: skip
    return next(taken, path)


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist's, called only where it is installed
def pytest_xdist_make_scheduler(config, log):
    """--dist loadfile, but a ONE_GROUP is one unit (xdist's own loadgroup reads its marker
    through an attribute pytest 9 no longer has, and would spread a group over both workers)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class FilesAndFolders(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _group(nodeid)

    return FilesAndFolders(config, log)


def _rank(group: str, items: list[pytest.Item]) -> tuple[int, int]:
    if group in LONGEST_FIRST:
        return LONGEST_FIRST.index(group), 0
    if any(item.get_closest_marker("processes") for item in items):
        return len(LONGEST_FIRST), 0
    return len(LONGEST_FIRST), 1 if items[0].path.suffix == ".ipynb" else 2


@pytest.hookimpl(tryfirst=True)  # before -m selects by marker
def pytest_collection_modifyitems(config, items):
    tests = Path(__file__).parent
    if missing := [rel for rel in SERIAL if not (tests / rel).exists()]:  # renamed: it would not be alone
        raise pytest.UsageError(f"tests/conftest.py's SERIAL names files that are not there: {missing}")
    groups: dict[str, list[pytest.Item]] = {}
    for item in items:
        if item.path.is_relative_to(tests) and item.path.relative_to(tests).as_posix() in SERIAL:
            item.add_marker(pytest.mark.serial)
        groups.setdefault(_group(item.nodeid), []).append(item)
    rank = {group: _rank(group, members) for group, members in groups.items()}
    # a stable sort: within a group (a file, a notebook) the tests keep pytest's order
    items.sort(key=lambda item: rank[_group(item.nodeid)])


# One temp folder for everything the suite starts (kernels, ranks, torchrun, JupyterLab), made by the first
# pytest process (xdist's controller, whose workers inherit it) and removed when that process ends. A
# process a test kills with SIGKILL (nbval ends each notebook's kernel so) runs no clean-up of its own: its
# pymp-* folder or a lesson's temp files would otherwise stay in /tmp after every run. What is left is
# listed at the end, so a leftover of the library's own still shows (tests/test_stopping.py and
# tests/cli/test_cli_leftovers.py hold the library to leaving nothing).
SUITE_TMP = "COURSE_TESTS_TMPDIR"


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get(SUITE_TMP):
        return  # an xdist worker: its controller made it
    folder = tempfile.mkdtemp(prefix="cl-tests-")  # short: a forkserver's socket path must fit 103 bytes
    os.chmod(folder, 0o1777)  # as /tmp: the guide's test runs nbgrader as another user
    os.environ[SUITE_TMP] = os.environ["TMPDIR"] = folder
    tempfile.tempdir = None  # read TMPDIR again
    config.stash[_MADE_TMP] = folder


_MADE_TMP = pytest.StashKey[str]()


def pytest_unconfigure(config: pytest.Config) -> None:
    folder = config.stash.get(_MADE_TMP, None)
    if folder is None:
        return
    left = sorted(n for n in os.listdir(folder) if not n.startswith("pytest-of-"))
    if left:
        kinds = sorted({re.split(r"[-_.]", n)[0] for n in left})
        print(f"\nthe suite's temp folder held {len(left)} entries at the end ({', '.join(kinds)}); removed")
    # removed after multiprocessing's own clean-up at exit, which removes this process's pymp-* folder
    # (made in the folder) and would print a traceback if the folder were gone already
    Finalize(None, shutil.rmtree, args=(folder,), kwargs={"ignore_errors": True}, exitpriority=-200)


@pytest.fixture(scope="session")
def corpus():
    return load_corpus()


@pytest.fixture(autouse=True, scope="session")
def _temp_dir_per_session(tmp_path_factory):
    """Failed distributed runs keep a log of their ranks' tracebacks in the temp folder; tests that fail
    runs on purpose write theirs under pytest's own temp folder, not /tmp, so a test run leaves nothing."""
    import tempfile

    before = tempfile.tempdir
    tempfile.tempdir = str(tmp_path_factory.mktemp("tmp"))
    yield
    tempfile.tempdir = before


@pytest.fixture(autouse=True)
def _default_ctrl_c():
    """Every test starts with Python's own Ctrl-C handler. A library run in-process may leave SIGINT
    ignored (jupyter_core's launcher ignores it around the commands it runs); then ``interrupt_main``
    does nothing and a child process inherits the ignored signal, and tests of stopping would hang."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
