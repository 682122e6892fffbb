"""Shared test fixtures: small, seeded models and data so the suite stays fast on 2 CPU cores."""

from __future__ import annotations

import pytest
import torch

from course_lib.data import load_corpus

torch.set_num_threads(1)  # 2-core CI: one thread per test process is faster and deterministic


@pytest.fixture(scope="session")
def corpus():
    return load_corpus()
