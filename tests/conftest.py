"""Shared test fixtures: small, seeded models and data so the suite stays fast on 2 CPU cores."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import torch

from course_lib.data import load_corpus

torch.set_num_threads(1)  # 2-core CI: one thread per test process is faster and deterministic

# `make unit` runs the processes group two at a time (pytest-xdist), except these files, which it runs
# alone afterwards (-m serial): what they check would be disturbed by another test beside them
SERIAL = {
    "lessons/test_wan_measured.py": "measures steps against the formula: another test's load is noise in it",
    "grading/test_grading_sandbox.py": "its fork bomb takes every process the sandbox's user may have",
    "course/test_two_hosts.py": "a shaped link's measured step against one simulated from an earlier run",
}


@pytest.hookimpl(tryfirst=True)  # before -m selects by marker
def pytest_collection_modifyitems(config, items):
    tests = Path(__file__).parent
    if missing := [rel for rel in SERIAL if not (tests / rel).exists()]:  # renamed: it would not be alone
        raise pytest.UsageError(f"tests/conftest.py's SERIAL names files that are not there: {missing}")
    for item in items:
        if item.path.is_relative_to(tests) and item.path.relative_to(tests).as_posix() in SERIAL:
            item.add_marker(pytest.mark.serial)


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
