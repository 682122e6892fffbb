"""Run a student's function with the library's own answer to the task switched off.

An assignment that says "write 1F1B yourself" cannot stop a student from calling the library's
``one_f_one_b``: it is the course's tool, imported by the lessons. The grader can, though: while the
student's function runs, the library function answers with an AssertionError that says why, whatever
name the student imported it under (the function object's code is swapped, so every reference to it
sees the swap), and it is restored at once afterwards.

    from course_lib.shelf import first_schedules as builders
    with without(builders.one_f_one_b, why="write 1F1B yourself"):
        schedule = my_1f1b(4, 8)        # a call to one_f_one_b in there fails with `why`
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from course_lib.shelf.errors import require


def _refusal(name: str, why: str) -> Callable:
    """A function with no closure (so its code fits any plain function) that raises `why`."""
    message = f"{name} is switched off while your code is graded: {why}"
    namespace: dict = {}
    exec(f"def refused(*args, **kwargs):\n    raise AssertionError({message!r})", namespace)  # noqa: S102
    return namespace["refused"]


@contextlib.contextmanager
def without(*functions: Callable, why: str) -> Iterator[None]:
    """While the block runs, each of `functions` raises AssertionError(why) instead of answering."""
    for fn in functions:
        require(
            getattr(fn, "__closure__", "not a function") is None,
            f"{fn!r} cannot be switched off: only plain module-level functions can",
        )
    saved = [fn.__code__ for fn in functions]
    try:
        for fn in functions:
            fn.__code__ = _refusal(fn.__name__, why).__code__
        yield
    finally:
        for fn, code in zip(functions, saved, strict=True):
            fn.__code__ = code
