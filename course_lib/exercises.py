"""Checked exercises for the lessons: a friendly verdict and a hint, never a bare AssertionError.

    from course_lib.exercises import check_answer
    answer = None                 # the student writes their number here
    check_answer("03.1", answer)  # lesson 03, exercise 1: answer and hint live in course_lib.lessons.answers

``check_answer`` prints one line (and returns nothing, so a notebook shows only that line); it never raises on
a student's answer, so a lesson keeps running while an exercise is still open. The line says "too high"
or "too low", never by how much: that would give the answer away. Graded assignments use
``course_assignments`` instead, which does raise.
"""

from __future__ import annotations

import math
import numbers
import reprlib


def _as_number(answer: object) -> float:
    """The answer as a float, or nan: text is not a number even when it reads like one ("0.5")."""
    if isinstance(answer, (str, bytes, bool)):
        return math.nan
    try:
        return float(answer)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):  # a list, an int beyond a float (10**400)
        return math.nan


def verdict(
    answer: object, expected: float, rel_tol: float = 0.02, abs_tol: float = 1e-9, how_far: bool = True
) -> str:
    """'ok', 'missing', 'not a number', 'not a whole number', 'too high by 3.2x', 'too low by 10%', ...

    An integer `expected` (a count, a smallest m) asks for that integer exactly; a fraction between 0 and 1
    given as a percent (18 for 0.18) is answered with a word on the unit. `how_far=False` says only
    'too high' or 'too low' (a lesson's exercise: the distance would pin the answer).
    """
    if answer is None or answer is Ellipsis:
        return "missing"
    value = _as_number(answer)
    if not math.isfinite(value):  # nan and inf are neither too high nor too low
        return "not a number"
    whole = isinstance(expected, numbers.Integral) and not isinstance(expected, bool)
    if whole and not math.isclose(value, round(value), rel_tol=1e-9):  # 199.99999999999997 is whole
        return "not a whole number (the question counts something)"
    if round(value) == expected if whole else math.isclose(value, expected, rel_tol=rel_tol, abs_tol=abs_tol):
        return "ok"
    if 0 < abs(expected) < 1 and math.isclose(value / 100, expected, rel_tol=rel_tol):
        return "a percent: give the share as a fraction between 0 and 1"
    if not how_far:
        return f"too {'high' if value > expected else 'low'}"
    if expected != 0 and value != 0 and (value / expected > 2 or value / expected < 0.5):
        ratio = value / expected
        return f"too {'high' if ratio > 1 else 'low'} by {max(ratio, 1 / ratio):.1f}x"
    off = (value - expected) / expected if expected else value
    return f"too {'high' if value > expected else 'low'} by {abs(off):.0%}"


def check_answer(key: str, answer: object, **measured: object) -> None:
    """Print whether `answer` is the answer to exercise `key` (a key of course_lib.lessons.answers, such as
    "03.1"), and the exercise's hint if not. `measured`: the values the exercise says the notebook passes.
    """
    from course_lib.lessons.answers import exercise  # imported here: it pulls in the planner and the model

    ex = exercise(key)
    _report(f"{ex.key} {ex.title}", answer, ex.expected(**measured), ex.hint, ex.rel_tol)


def _report(name: str, answer: object, expected: float, hint: str, rel_tol: float) -> None:
    try:  # reprlib shortens a huge list or number; whatever the answer, this prints one short line
        result, shown = verdict(answer, expected, rel_tol, how_far=False), reprlib.repr(answer)
    except Exception:  # an answer that cannot even be shown, such as an int of 5,000 digits
        result, shown = "not a number", f"a {type(answer).__name__} too big to show"
    if result == "ok":
        value = float(answer)  # type: ignore[arg-type]
        # a count prints as one: 49,984, not 4.998e+04
        print(f"[correct] {name}: {int(value):,}" if value.is_integer() else f"[correct] {name}: {value:.4g}")
    elif result == "missing":
        print(f"[open] {name}: no answer yet. Hint: {hint}" if hint else f"[open] {name}: no answer yet.")
    else:
        print(f"[not yet] {name}: you gave {shown}, which is {result}. Hint: {hint}")
