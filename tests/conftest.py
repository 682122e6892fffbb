"""Shared test fixtures: small, seeded models and data so the suite stays fast on 2 CPU cores."""

from __future__ import annotations

import pytest
import torch

from course_lib.data import load_corpus

torch.set_num_threads(1)  # 2-core CI: one thread per test process is faster and deterministic


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
