"""torch.distributed.pipelining's schedule orders beside ours, or None where this torch lacks them."""

from __future__ import annotations

import pytest

from course_lib.schedules.torch_orders import torch_order
from course_lib.shelf.errors import CourseError
from course_lib.shelf.first_schedules import build_schedule


def theirs_or_none(schedule: str, p: int, m: int, v: int = 1):
    """torch_order, or None where torch refuses the sizes (a changed private API skips the test)."""
    try:
        return torch_order(schedule, p, m, v)
    except CourseError as err:
        if "changed the private pipelining API" in str(err):
            pytest.skip(str(err))
        if "refuses" in str(err):
            return None
        raise


def ours_or_none(name: str, p: int, m: int, v: int = 1):
    try:
        return build_schedule(name, p, m, v)
    except CourseError:
        return None


def same(theirs, ours) -> bool:
    """Same orders, stages, placement and kind of backward (None: both refused the sizes)."""
    if theirs is None or ours is None:
        return theirs is ours
    fields = ("orders", "n_stages", "n_microbatches", "stage_to_device", "split_backward")
    return all(getattr(theirs, f) == getattr(ours, f) for f in fields)
