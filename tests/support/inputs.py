"""What the input tests (tests/test_input_bounds.py, tests/test_input_outputs.py) share: a tiny
run's settings and the check that a call is refused with given words."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from course_lib.engines import memory_fit
from course_lib.shelf.errors import CourseError

GiB = 2**30
TINY = dict(n_layers=2, d_model=16, n_heads=2, seq_len=16, batch_size=4, microbatches=2, steps=1)


def machine_of_8_gib(monkeypatch: pytest.MonkeyPatch) -> None:
    """The memory the machine has is fixed at 8 GiB, so the bounds do not depend on the machine the
    suite runs on (each input test file makes this an autouse fixture)."""
    monkeypatch.setattr(memory_fit, "memory_bytes", lambda: 8 * GiB)


def refused(call: Callable[[], object], words: list[str]) -> None:
    """``call`` raises a CourseError whose message holds every one of ``words``."""
    with pytest.raises(CourseError) as err:
        call()
    for w in words:
        assert w in str(err.value), str(err.value)
