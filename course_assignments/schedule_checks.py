"""The checks of assignments 1 and 2 (the bubble, GPipe and 1F1B in the IR): pass, or say what is wrong.

Each check takes the student's function (or value) and the cases to try, computes the right answer
from the library's primitives (the simulator, the schedule builders), and raises the teaching
AssertionError of ``course_assignments`` when the student's differs: how far off and in which
direction, the validator's sentences, a hint. It never returns or prints the right answer. The
visible test cells call a check on the case the text shows; the hidden ones on other p and m.

    from course_assignments import schedule_checks as checks
    checks.idle_fraction(lambda p, m: (p - 1) / m)       # raises: "... too high by 38% ..."
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from fractions import Fraction

import course_assignments as grading
from course_assignments.guard import without
from course_lib.balance import inflight_per_stage
from course_lib.schedules import closed_forms
from course_lib.shelf import first_schedules as builders
from course_lib.shelf.simulator import StageCosts, simulate

SizeCase = tuple[int, int]  # (p, m)
VISIBLE: tuple[SizeCase, ...] = ((4, 8),)
# GPipe and 1F1B idle the same share of the step whatever t_f and t_b; these make the timeline readable
T_F, T_B = 1.0, 2.0


def _simulated(schedule) -> float:
    return simulate(schedule, StageCosts.fused(f=T_F, b=T_B)).bubble_fraction


def _gpipe_idle(p: int, m: int) -> float:
    """The idle share of a GPipe step, measured on the simulator (it knows no formula, only dependencies)."""
    return _simulated(builders.build_schedule("gpipe", p, m))


def _derived(name: str, fn: Callable, *args, hint: str = ""):
    """The student's formula at `args`, with the library's closed forms of GPipe's bubble switched off."""
    __tracebackhide__ = True
    with without(closed_forms.gpipe_bubble, closed_forms.megatron, why="derive the formula yourself"):
        return grading.call(name, fn, *args, hint=hint)


def idle_fraction(fn: Callable, cases: Sequence[SizeCase] = VISIBLE, hint: str = "") -> None:
    """`fn(p, m)` must give the share of a GPipe step a device is idle."""
    __tracebackhide__ = True
    for p, m in cases:
        got = _derived("idle_fraction", fn, p, m, hint=hint)
        grading.number(f"idle_fraction({p}, {m})", got, _gpipe_idle(p, m), hint)


def bubble_over_ideal(fn: Callable, cases: Sequence[SizeCase] = VISIBLE, hint: str = "") -> None:
    """`fn(p, m)` must give GPipe's idle time over the ideal compute time (Megatron's convention)."""
    __tracebackhide__ = True
    for p, m in cases:
        idle = _gpipe_idle(p, m)  # idle share of the step: idle / (idle + busy)
        got = _derived("bubble_over_ideal", fn, p, m, hint=hint)
        grading.number(f"bubble_over_ideal({p}, {m})", got, idle / (1 - idle), hint)


def smallest_m(fn: Callable, cases: Sequence[tuple[int, float]] = ((4, 0.025),), hint: str = "") -> None:
    """`fn(p, limit)` must give the smallest whole m whose GPipe idle share is below `limit`."""
    __tracebackhide__ = True
    for p, limit in cases:
        got = _derived("smallest_m", fn, p, limit, hint=hint)
        grading.answered(f"smallest_m({p}, {limit})", got, hint)
        want = _smallest_m(p, limit)
        grading.number(f"smallest_m({p}, {limit})", got, want, hint, rel_tol=0)


def _smallest_m(p: int, limit: float) -> int:
    """Bisection on m over the simulated idle share (it falls as m grows). Compared as fractions, so
    that 3/120 is not below 0.025 whichever way the simulator's floats round."""
    bound = Fraction(str(limit))

    def below(m: int) -> bool:
        return Fraction(_gpipe_idle(p, m)).limit_denominator(10**6) < bound

    low, high = 1, 1
    while not below(high):
        low, high = high + 1, high * 2
    while low < high:
        mid = (low + high) // 2
        low, high = (low, mid) if below(mid) else (mid + 1, high)
    return low


def _students_schedule(fn: Callable, name: str, library_fn: Callable, p: int, m: int, hint: str):
    """The student's schedule for (p, m), built with the library's own builder switched off."""
    __tracebackhide__ = True
    with without(library_fn, why=f"this task asks you to build the schedule yourself, in {name}"):
        schedule = grading.call(name, fn, p, m, hint=hint)
    grading.schedule_valid(schedule, p=p, m=m, name=f"{name}({p}, {m})", hint=hint)
    return schedule


def gpipe_builder(fn: Callable, cases: Sequence[SizeCase] = VISIBLE, hint: str = "") -> None:
    """`fn(p, m)` must build GPipe: valid, and in GPipe's order on every device."""
    __tracebackhide__ = True
    for p, m in cases:
        mine = _students_schedule(fn, "my_gpipe", builders.gpipe, p, m, hint)
        grading.schedule_equals(mine, builders.build_schedule("gpipe", p, m), hint)


def simulated_bubble(value: object, p: int = 4, m: int = 8, hint: str = "") -> None:
    """`value` must be the simulated idle share of GPipe at (p, m) with t_f = 1, t_b = 2."""
    __tracebackhide__ = True
    grading.number(f"simulated bubble of my_gpipe({p}, {m})", value, _gpipe_idle(p, m), hint)


def one_f_one_b_valid(fn: Callable, cases: Sequence[SizeCase] = VISIBLE, hint: str = "") -> None:
    """`fn(p, m)` must build a schedule the validator accepts (the library's 1F1B switched off)."""
    __tracebackhide__ = True
    for p, m in cases:
        _students_schedule(fn, "my_1f1b", builders.one_f_one_b, p, m, hint)


def one_f_one_b_memory(fn: Callable, cases: Sequence[SizeCase] = VISIBLE, hint: str = "") -> None:
    """Every stage of `fn(p, m)` must hold no more micro-batches at once than 1F1B's does."""
    __tracebackhide__ = True
    for p, m in cases:
        mine = _students_schedule(fn, "my_1f1b", builders.one_f_one_b, p, m, hint)
        grading.inflight_at_most(mine, inflight_per_stage(builders.build_schedule("1f1b", p, m)), hint)


def one_f_one_b_bubble(fn: Callable, cases: Sequence[SizeCase] = VISIBLE, hint: str = "") -> None:
    """`fn(p, m)`, simulated, must idle no longer than GPipe does (1F1B keeps GPipe's bubble)."""
    __tracebackhide__ = True
    for p, m in cases:
        mine = _students_schedule(fn, "my_1f1b", builders.one_f_one_b, p, m, hint)
        label = f"simulated bubble of my_1f1b({p}, {m})"
        grading.number(label, _simulated(mine), _gpipe_idle(p, m), hint, rel_tol=1e-6)


def peaks(one_f_one_b_stage0: object, gpipe_stage0: object, p: int = 4, m: int = 8, hint: str = "") -> None:
    """Stage 0's peak micro-batches in flight under 1F1B and under GPipe at (p, m)."""
    __tracebackhide__ = True
    for name, value in (("1f1b", one_f_one_b_stage0), ("gpipe", gpipe_stage0)):
        want = inflight_per_stage(builders.build_schedule(name, p, m))[0]
        grading.number(f"stage 0's peak micro-batches in flight, {name}", value, want, hint, rel_tol=0)
