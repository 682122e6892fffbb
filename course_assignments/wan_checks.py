"""The checks of assignment 4 (a pipeline across two continents): pass, or say what is wrong.

Like ``schedule_checks``: each check computes the right answer from the library's primitives (the
fiber model, the links, the simulator), never returns or prints it, and raises the teaching
AssertionError of ``course_assignments`` when the student's code differs. The bar a plan must reach
comes from a brute-force search that lives here, with the grader, and returns only a throughput.

    from course_assignments import wan_checks as checks
    checks.choose_plan(my_choose_plan, [WanProblem()])
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import course_assignments as grading
from course_assignments.guard import without
from course_lib.lessons.wan_plan import WanPlan, WanProblem, check_plan, even_sizes, throughput
from course_lib.network import distance_km, fiber_latency_s, site, site_link
from course_lib.schedules import latency_aware
from course_lib.shelf.simulator import simulate

WITHIN = 0.2  # a plan must reach 80% of the strongest plan the search below finds


def one_way_latency_ms(fn: Callable, cases: Sequence[tuple[str, str, float]], hint: str = "") -> None:
    """`fn(west, east, route_factor)`: one-way fiber latency in ms between two sites of data/sites.csv."""
    __tracebackhide__ = True
    for west, east, factor in cases:
        want = fiber_latency_s(distance_km(site(west), site(east)), factor) * 1e3
        with without(fiber_latency_s, site_link, why="work it out from the distance and the speed of light"):
            got = grading.call("one_way_latency_ms", fn, west, east, factor, hint=hint)
        grading.number(f"one_way_latency_ms({west!r}, {east!r}, {factor})", got, want, hint)


def ocean_link(problem: WanProblem, p: int):
    """The link that crosses between the sites: boundary p/2 - 1."""
    return problem.links(p)[p // 2 - 1]


def extra_needed(fn: Callable, cases: Sequence[tuple[WanProblem, int, int]], hint: str = "") -> None:
    """`fn(problem, p, m)`: extra micro-batches in flight that hide the ocean link's round trip,
    for an even cut of problem.n_blocks into p stages and a batch split into m micro-batches."""
    __tracebackhide__ = True
    for problem, p, m in cases:
        per_mb = problem.batch // m
        one_way = ocean_link(problem, p).transfer_time(per_mb * problem.boundary_bytes)
        slot = per_mb * (problem.n_blocks / p) * (problem.f_s + problem.b_s)
        want = math.ceil(2 * one_way / slot - 1e-12)
        with without(latency_aware.extra_in_flight, why="count the round trip in slots yourself"):
            got = grading.call("extra_needed", fn, problem, p, m, hint=hint)
        grading.number(f"extra_needed({_short(problem)}, p={p}, m={m})", got, want, hint, rel_tol=0)


def _short(problem: WanProblem) -> str:
    return f"{problem.west} - {problem.east}, {problem.devices_per_site} per site, batch {problem.batch}"


def strongest_throughput(problem: WanProblem) -> float:
    """Sequences/s of the best plan a brute force finds over p, m, schedule and extra micro-batches on
    the ocean link (even cuts: every block costs the same). The bar, not the plan, leaves this module."""
    best = 0.0
    for p in range(2, 2 * problem.devices_per_site + 1, 2):
        sizes = even_sizes(problem.n_blocks, p)
        for m in (d for d in range(1, problem.batch + 1) if problem.batch % d == 0):
            candidates = [WanPlan(p, m, "gpipe", sizes), WanPlan(p, m, "1f1b", sizes)]
            for k in range(1, 9):  # extra in flight on the ocean link only
                extra = tuple(k if link == p // 2 - 1 else 0 for link in range(p - 1))
                candidates.append(WanPlan(p, m, "latency-aware-1f1b", sizes, extra))
            for plan in candidates:
                if not check_plan(problem, plan):
                    best = max(best, throughput(problem, plan))
    return best


def _runnable(plan: object, label: str, hint: str) -> WanPlan:
    __tracebackhide__ = True
    grading.answered(label, plan, hint)
    if not isinstance(plan, WanPlan):
        grading.fail(f"{label}: expected a WanPlan, got {type(plan).__name__}.{grading._hint(hint)}")
    return plan  # type: ignore[return-value]


def choose_plan(fn: Callable, problems: Sequence[WanProblem], hint: str = "") -> None:
    """`fn(problem)`: a plan that can run and reaches 80% of the strongest plan's throughput."""
    __tracebackhide__ = True
    for problem in problems:
        label = f"choose_plan({_short(problem)})"
        plan = _runnable(grading.call("choose_plan", fn, problem, hint=hint), label, hint)
        if problems_found := check_plan(problem, plan):
            grading.fail(f"{label}: the plan cannot run: " + "; ".join(problems_found) + grading._hint(hint))
        grading.close_to_best(
            f"{label}: throughput (sequences/s)", throughput(problem, plan), strongest_throughput(problem),
            within=WITHIN, higher_is_better=True, hint=hint,
        )  # fmt: skip


def predict_throughput(fn: Callable, cases: Sequence[tuple[WanProblem, object]], hint: str = "") -> None:
    """`fn(problem, plan)` within 10% of the simulated throughput, computed with the simulator off."""
    __tracebackhide__ = True
    for problem, plan in cases:
        plan = _runnable(plan, "the plan to predict", "finish part 3 first: choose_plan must give a plan")
        if problems_found := check_plan(problem, plan):
            grading.fail(f"the plan to predict cannot run: {'; '.join(problems_found)}. Finish part 3 first")
        why = "predict from the plan's numbers, before any simulation"
        with without(simulate, latency_aware.flush_bound, why=why):
            got = grading.call("predict_throughput", fn, problem, plan, hint=hint)
        label = f"predict_throughput for p={plan.p}, m={plan.m}, {plan.schedule} ({_short(problem)})"
        grading.number(label, got, throughput(problem, plan), hint, rel_tol=0.10)
