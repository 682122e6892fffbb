"""The checks of assignment 3 (cut the model under a memory budget): pass, or say what is wrong.

Like ``schedule_checks``: each check computes the right answer from the library's primitives
(``balance.stage_memory``, ``balance.inflight_per_stage``, ``balance.balanced``), never returns or prints
it, and raises the teaching AssertionError of ``course_assignments`` when the student's code differs.
While the student's function runs, the library function that would answer the task is switched off.

    from course_assignments import memory_checks as checks
    checks.held(my_held, [("1f1b", 4, 8)])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import course_assignments as grading
import course_lib.schedules  # noqa: F401  (registers every schedule by name in the shelf's registry)
from course_assignments.guard import without
from course_lib.balance import OutOfMemory, balanced, inflight_per_stage, stage_memory
from course_lib.shelf.first_schedules import build_schedule
from course_lib.shelf.model import Partition

_MIB = 2**20


def stage_bytes(fn: Callable, profile, cases: Sequence[tuple[Sequence[int], int]], hint: str = "") -> None:
    """`fn(profile, start, end, inflight)` for every stage of each (partition sizes, m) under 1F1B."""
    __tracebackhide__ = True
    for sizes, m in cases:
        for st in stage_memory(Partition.from_sizes(list(sizes)), profile, "1f1b", m):
            start, end = st.layers
            with without(stage_memory, why="add up the profile's bytes yourself"):
                got = grading.call("stage_bytes", fn, profile, start, end, st.inflight, hint=hint)
            label = f"stage_bytes(profile, {start}, {end}, {st.inflight})"
            grading.number(label, got, st.total_bytes, hint, rel_tol=1e-9)


def held(fn: Callable, cases: Sequence[tuple[str, int, int]], hint: str = "") -> None:
    """`fn(schedule)` must give each stage's peak micro-batches in flight, for each (name, p, m)."""
    __tracebackhide__ = True
    for name, p, m in cases:
        schedule = build_schedule(name, p, m)
        with without(inflight_per_stage, why="count the micro-batches in flight yourself"):
            got = grading.call("held", fn, schedule, hint=hint)
        grading.numbers(f"held({name} with p={p}, m={m})", got, inflight_per_stage(schedule), hint, rel_tol=0)


def _largest_params(profile, sizes: Sequence[int]) -> int:
    return max(sum(profile.params[a:b]) for a, b in Partition.from_sizes(list(sizes)).bounds)


def _best(profile, p: int, m: int, budget: int, schedule: str) -> Partition | None:
    try:
        return balanced(profile, p, by="params", schedule=schedule, microbatches=m, budget_bytes=budget)
    except OutOfMemory:
        return None


def fit_partition(fn: Callable, profile, cases: Sequence[tuple[int, int, int, str]], hint: str = "") -> None:
    """`fn(profile, p, m, budget, schedule)`: a cut that fits, with the smallest largest stage (in
    parameters) that any fitting cut has; None exactly when no cut fits."""
    __tracebackhide__ = True
    for p, m, budget, schedule in cases:
        label = f"fit_partition(profile, {p}, {m}, {budget / _MIB:g} _MIB, {schedule!r})"
        with without(balanced, why="find the cut yourself (course_lib.balance.optimal is allowed)"):
            sizes = grading.call("fit_partition", fn, profile, p, m, budget, schedule, hint=hint)
        best = _best(profile, p, m, budget, schedule)
        if best is None:
            if sizes is not None:
                grading.fail(f"{label}: no cut fits this budget, so the answer is None.{grading._hint(hint)}")
            continue
        grading.answered(label, sizes, f"a cut exists here. {hint}")
        grading.partition_fits(sizes, profile, schedule, m, budget, hint)
        grading.close_to_best(
            f"{label}: largest stage's parameter count", _largest_params(profile, sizes),
            _largest_params(profile, best.sizes), within=0.01, higher_is_better=False, hint=hint,
        )  # fmt: skip


def min_stages(fn: Callable, profile, cases: Sequence[tuple[int, int, str]], hint: str = "") -> None:
    """`fn(profile, m, budget, schedule)`: the fewest stages whose best cut fits the budget."""
    __tracebackhide__ = True
    for m, budget, schedule in cases:
        label = f"min_stages(profile, {m}, {budget / _MIB:g} _MIB, {schedule!r})"
        with without(balanced, why="use your fit_partition"):
            got = grading.call("min_stages", fn, profile, m, budget, schedule, hint=hint)
        grading.answered(label, got, hint)
        want = next(p for p in range(1, profile.n_layers + 1) if _best(profile, p, m, budget, schedule))
        grading.number(label, got, want, hint, rel_tol=0)
