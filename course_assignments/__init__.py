"""course_assignments: the student's side of the graded assignments, outside the library a student reads.

What a released assignment runs in front of the student, and what builds the student's copy of the course.
The instructor's grader (sandbox, hidden tests, feedback) is ``course_grading``; nothing here imports it,
and ``course_lib`` imports nothing of either (tests/grading/test_grading_package.py).

Here, in this file, the checks: a failed check raises AssertionError with a message that teaches.
nbgrader marks a test cell wrong when it raises, and shows the error. So every check here raises
``AssertionError`` (never a bare one): the message says what was expected, in which direction and
roughly how far off the answer is (bands too wide to pin the right value), and gives a hint. For
schedules it says which action breaks which dependency on which device (the validator's sentences).
Lessons use ``course_lib.exercises.check`` instead, which only prints.

    import course_assignments as grading
    grading.number("bubble at p=4, m=8", 0.3, expected=3 / 11, hint="count idle slots")   # raises
    grading.schedule_valid(my_schedule, p=4, m=8)       # raises, listing every problem in words
    value = grading.call("idle_fraction", idle_fraction, 4, 8, hint="...")  # unwritten -> message

Beside it:

- ``schedule_checks`` (a03, a04), ``memory_checks`` (a05), ``wan_checks`` (a06) and
  ``rank_checks`` (a04c): each computes the right answer from the library's primitives and says only how
  far off a student is, never the answer itself;
- ``guard.without`` switches off a library function while a student's function runs (so "write 1F1B
  yourself" cannot be answered by calling the library's);
- ``kit`` builds the student's working copy (the lessons and the released assignments only) that
  `make lab` serves.

Try it: ``grading.number("x", None, 1.0, hint="h")`` raises "x: no answer yet ... Hint: h".
"""

from __future__ import annotations

import functools
import math
import reprlib
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

from course_lib.exercises import verdict

# balance and partition (the memory checks) import torch, and are imported where used: the sandbox's
# worker (course_assignments.worker, in this package) starts without torch, and imports it only when the
# student's code (or a library function the assignment switches off) asks for it
from course_lib.shelf.errors import capped
from course_lib.shelf.schedule import Schedule
from course_lib.shelf.validate import check

HERE = str(Path(__file__).resolve().parent)
IPYTHON = "/IPython/core/"  # the shell's own frames (run_code) above a cell


def _not_ours(tb) -> list[traceback.FrameSummary]:
    """The frames of a traceback outside this package and IPython, and not marked ``__tracebackhide__``
    (the grader's stand-ins for a student's function): the notebook's cell, the student's code."""
    shown = [(f, n) for f, n in traceback.walk_tb(tb) if not f.f_locals.get("__tracebackhide__")]
    frames = traceback.StackSummary.extract(iter(shown))
    return [f for f in frames if not f.filename.startswith(HERE) and IPYTHON not in f.filename]


class CheckFailed(AssertionError):
    """A failed check: an AssertionError (what nbgrader counts as a failed test) whose traceback in a
    notebook shows the cell that called the check and the message, not this package's frames."""

    def _render_traceback_(self) -> list[str]:  # IPython draws a failed cell's traceback with this
        frames = "".join(traceback.format_list(_not_ours(self.__traceback__))).rstrip("\n")
        return ["Traceback (most recent call last):", frames, f"AssertionError: {self}"]


CheckFailed.__name__ = CheckFailed.__qualname__ = "AssertionError"  # the name a student and nbgrader see


def fail(message: str) -> None:
    """Raise the AssertionError nbgrader counts as a failed test, with `message` (capped) as its text."""
    __tracebackhide__ = True  # IPython and pytest hide this frame: the message is what matters
    raise CheckFailed(capped(message))


def _where(err: BaseException) -> str:
    """' (line 3 of your code: `return x[p]`)': where the student's function failed."""
    frames = _not_ours(err.__traceback__)  # from call() down: the student's function and what it called
    if not frames:
        return ""
    last = frames[-1]
    code = f": `{last.line.strip()[:80]}`" if last.line else ""
    return f" (line {last.lineno} of your code{code})"


def _graded(grader: Callable) -> Callable:
    """Odd input (text for a number, 10**400, a list of the wrong shape) fails the check, never crashes it."""

    @functools.wraps(grader)
    def graded(*args, **kwargs):
        __tracebackhide__ = True  # IPython and pytest hide this frame: the message is what matters
        try:
            return grader(*args, **kwargs)
        except (ArithmeticError, AttributeError, LookupError, TypeError, ValueError) as err:
            problem = f"{type(err).__name__}: {err}"  # failed below, so no second traceback is chained
        label = args[0] if args and isinstance(args[0], str) else "your answer"
        fail(f"{label} cannot be checked ({problem}); give what is asked: a number, a list, a Schedule")

    return graded


# How far off an answer is, in words and in bands wide enough that no message pins the right value
# (the narrowest, "less than half again", leaves it anywhere in a range about 47% wide). No digits:
# the grader strips numbers from a hidden case's message, and these must survive it.
BANDS = ((1.5, "by less than half again"), (3.0, "by one and a half to three times"),
         (10.0, "by three to ten times"), (math.inf, "by more than ten times"))  # fmt: skip


def how_far(answer: float, expected: float) -> str:
    """'too high, by less than half again', 'too low, by three to ten times', ...: a direction and a
    coarse size, never a value close to `expected`."""
    if expected == 0:
        return f"too {'high' if answer > 0 else 'low'} (the right value is zero)"
    sign = "positive" if expected > 0 else "negative"
    if answer == 0:
        return f"zero, but the right value is {sign}"
    if (answer > 0) != (expected > 0):
        return f"of the wrong sign (the right value is {sign})"
    ratio = answer / expected
    size = max(ratio, 1 / ratio)
    band = next(text for limit, text in BANDS if size <= limit)
    return f"too {'high' if ratio > 1 else 'low'}, {band}"


def magnitude(value: float) -> str:
    """'between 0.1 and 1', 'between 10 and 100': how big the right answer is, without giving it."""
    if value == 0:
        return "exactly 0"
    exponent = math.floor(math.log10(abs(value)))
    low, high = 10.0**exponent, 10.0 ** (exponent + 1)
    sign = "-" if value < 0 else ""
    return f"between {sign}{low:g} and {sign}{high:g}"


def _hint(hint: str) -> str:
    return f" Hint: {hint}" if hint else ""


def answered(name: str, value: object, hint: str = "") -> None:
    """Fail with 'no answer yet' while the student's variable is still None (or ...)."""
    __tracebackhide__ = True  # IPython and pytest hide this frame: the message is what matters
    if value is None or value is Ellipsis:
        fail(f"{name}: no answer yet (the value is still {value!r}).{_hint(hint)}")


def call(name: str, fn: Callable, *args, hint: str = "", **kwargs):
    """Call the student's function; turn 'not written yet' and crashes into a message."""
    __tracebackhide__ = True  # IPython and pytest hide this frame: the message is what matters
    shown = ", ".join([reprlib.repr(a) for a in args] + [f"{k}={reprlib.repr(v)}" for k, v in kwargs.items()])
    try:
        return fn(*args, **kwargs)
    except NotImplementedError:
        pass  # reported below, outside the except block, so the stub's traceback is not shown too
    except AssertionError:
        raise
    except Exception as err:  # a student's bug: name it, and the line of theirs it came from
        fail(f"{name}({shown}) raised {type(err).__name__}: {err}{_where(err)}.{_hint(hint)}")
    fail(
        f"{name} is not written yet: replace `raise NotImplementedError()` in its cell with your code, "
        f"run that cell, then this one.{_hint(hint)}"
    )


@_graded
def number(name: str, answer: object, expected: float, hint: str = "", rel_tol: float = 0.02) -> None:
    """Fail unless `answer` is within rel_tol of `expected`; say in which direction and roughly how far."""
    __tracebackhide__ = True  # IPython and pytest hide this frame: the message is what matters
    result = verdict(answer, expected, rel_tol)
    if result == "ok":
        return
    answered(name, answer if result != "missing" else None, hint)
    shown, tip = reprlib.repr(answer), _hint(hint)  # reprlib: a huge list or number shortened in the middle
    if result == "not a number":
        fail(f"{name}: expected a finite number, got {shown} ({type(answer).__name__}).{tip}")
    fail(f"{name}: your answer is {how_far(float(answer), expected)}.{tip}")  # type: ignore[arg-type]


@_graded
def at_most(name: str, value: float, limit: float, hint: str = "") -> None:
    """Fail unless `value` <= `limit` (an error that should be tiny, for example)."""
    __tracebackhide__ = True  # IPython and pytest hide this frame: the message is what matters
    answered(name, value, hint)
    if not value <= limit:
        fail(f"{name} is {value:.3g}, but it must be at most {limit:.3g}.{_hint(hint)}")


@_graded
def numbers(name: str, answer: object, expected: Sequence[float], hint: str = "", rel_tol: float = 0.02):
    """Like ``number`` for a list: the length first, then the first entry that is off."""
    __tracebackhide__ = True  # IPython and pytest hide this frame: the message is what matters
    answered(name, answer, hint)
    values = list(answer)  # type: ignore[call-overload]  # not a list: _graded says so
    if len(values) != len(expected):
        got = f"got {len(values)}: {reprlib.repr(values)}"
        fail(f"{name}: expected {len(expected)} numbers, {got}.{_hint(hint)}")
    for i, (got, want) in enumerate(zip(values, expected, strict=True)):
        number(f"{name}[{i}]", got, want, hint, rel_tol)


@_graded
def schedule_valid(
    schedule: object, p: int | None = None, m: int | None = None, name: str = "", hint: str = ""
) -> None:
    """Fail unless `schedule` is a Schedule of p devices and m micro-batches that can run: every
    action once, on the right device, and no deadlock (the validator's sentences, first few)."""
    __tracebackhide__ = True  # IPython and pytest hide this frame: the message is what matters
    label, tip = name or "your schedule", _hint(hint)
    answered(label, schedule, hint or "build a course_lib.shelf.schedule.Schedule")
    if not isinstance(schedule, Schedule):
        fail(f"{label}: expected a Schedule (course_lib.shelf.schedule), got {type(schedule).__name__}.{tip}")
    if p is not None and schedule.n_devices != p:
        fail(f"{label}: expected {p} devices (one order per device), got {schedule.n_devices} orders.{tip}")
    if m is not None and schedule.n_microbatches != m:
        fail(f"{label}: expected n_microbatches={m}, got {schedule.n_microbatches}.{tip}")
    if problems := check(schedule):  # fail caps the list: a student fixes the first few and runs again
        fail(
            f"{label} (p={schedule.n_devices}, m={schedule.n_microbatches}) cannot run.{tip} "
            f"{len(problems)} problem(s):\n  - " + "\n  - ".join(problems)  # hint first: the list gets capped
        )


@_graded
def schedule_equals(schedule: Schedule, expected: Schedule, hint: str = "") -> None:
    """Fail at the first place where a (valid) schedule's order differs from `expected`'s."""
    __tracebackhide__ = True  # IPython and pytest hide this frame: the message is what matters
    for d, (got, want) in enumerate(zip(schedule.orders, expected.orders, strict=True)):
        for i, (a, b) in enumerate(zip(got, want, strict=False)):
            if a != b:
                fail(f"device {d}, position {i}: you run {a}, {expected.name} runs {b} there.{_hint(hint)}")
        if len(got) != len(want):
            fail(f"device {d} runs {len(got)} actions, {expected.name} runs {len(want)}.{_hint(hint)}")


@_graded
def inflight_at_most(schedule: Schedule, limits: Sequence[int], hint: str = "") -> None:
    """Fail if some stage holds more micro-batches' activations at once than `limits[stage]`."""
    __tracebackhide__ = True  # IPython and pytest hide this frame: the message is what matters
    from course_lib.balance import inflight_per_stage

    held = inflight_per_stage(schedule)
    for stage, (got, most) in enumerate(zip(held, limits, strict=True)):
        if got > most:
            fail(
                f"stage {stage} holds {got} micro-batches' activations at once (forwards run before their "
                f"backwards), but at most {most} are allowed here.{_hint(hint)}"
            )


@_graded
def partition_fits(sizes: object, profile, schedule: str, m: int, budget_bytes: int, hint: str = ""):
    """Fail unless `sizes` (layers per stage) covers the model and every stage fits the budget."""
    __tracebackhide__ = True  # IPython and pytest hide this frame: the message is what matters
    from course_lib.balance import OutOfMemory, check_memory
    from course_lib.shelf.model import Partition

    answered("your partition", sizes, hint)
    try:  # check_memory also checks that the partition covers the model's layers
        part = Partition.from_sizes(list(sizes))  # type: ignore[call-overload]
        return check_memory(part, profile, schedule, m, budget_bytes)
    except OutOfMemory as err:
        fail(f"{err}.{_hint(hint)}")
    except (TypeError, ValueError) as err:
        fail(f"your partition {sizes!r} is not usable: {err}.{_hint(hint)}")


@_graded
def close_to_best(
    name: str, value: float, best: float, within: float, higher_is_better: bool, hint: str = ""
):
    """Fail unless `value` is within a fraction `within` of the best known `best` (which the message
    does not give away: only how far from it the student is)."""
    __tracebackhide__ = True  # IPython and pytest hide this frame: the message is what matters
    ratio = value / best if higher_is_better else best / value
    if ratio < 1 - within:
        better = "higher" if higher_is_better else "lower"
        fail(
            f"{name}: a {better} one exists, and yours is not within {within:.0%} of the best; "
            f"{'below' if higher_is_better else 'above'} it {how_far(ratio, 1.0).split(', ')[1]}."
            + _hint(hint)
        )
