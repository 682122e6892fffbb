"""Every schedule's closed forms (SCHEDULES[name].bubble / .peak) against the simulator, over a grid.

Where a form's predicate says it holds, formula and simulation agree to rounding error; with two or
more devices, where it says it does not hold, they differ (so the stated range is the real one).
"""

from __future__ import annotations

import pytest

from course_lib.schedules.closed_forms import Case, gpipe_bubble, megatron
from course_lib.shelf.costs import Link, StageCosts
from course_lib.shelf.errors import CourseError
from course_lib.shelf.first_schedules import SCHEDULES, build_schedule
from course_lib.shelf.simulator import simulate

# one stage's (F, I, W): uniform, and ratios either side of the zero-bubble condition W <= min(F, I)
COSTS = [(1.0, 1.0, 1.0), (1.0, 2.0, 0.5), (2.0, 1.0, 1.0), (1.0, 3.0, 2.0), (1.0, 1.0, 0.0), (0.5, 1.0, 1.0)]


def grid(name: str):
    info = SCHEDULES[name]
    vs = (info.fixed_virtual,) if info.fixed_virtual else (1, 2, 3) if info.uses_virtual else (1,)
    for v in vs:
        for p in range(1, 9):
            for m in range(1, 17):
                try:
                    yield p, m, v, build_schedule(name, p, m, v)
                except CourseError:
                    continue  # sizes the builder refuses (interleaved's rounds rule)


@pytest.mark.parametrize("name", list(SCHEDULES))
def test_closed_forms_equal_the_simulator_exactly_where_they_hold(name):
    info = SCHEDULES[name]
    held = 0
    for p, m, v, schedule in grid(name):
        for f, i, w in COSTS:
            tl = simulate(schedule, StageCosts(f, i, w))
            case = Case(p, m, v, f, i, w)
            formula = info.bubble.value(case)
            if info.bubble.holds(case):
                assert tl.bubble_fraction == pytest.approx(formula, abs=1e-12), (p, m, v, f, i, w)
                held += 1
            elif p > 1 and not info.fixed_virtual:  # V shapes: sufficient ranges (test_schedules_vshape)
                assert tl.bubble_fraction != pytest.approx(formula, abs=1e-9), (p, m, v, f, i, w)
            peak = max(tl.peak_inflight(d) for d in range(p))
            assert info.peak.holds(case) and peak == info.peak.value(case), (p, m, v, f, i, w)
    # a good part of the grid was really compared (V-Min's and V-Half's forms: at F = I = W only)
    assert held > {"v-min": 90, "v-half": 80}.get(name, 150 if info.fixed_virtual else 250)


def test_the_bubble_forms_assume_equal_stages_and_free_links():
    form = SCHEDULES["1f1b"].bubble
    assert form.at(Case(4, 8)) == pytest.approx(3 / 11)
    assert form.at(Case(4, 8, equal_stages=False)) is None
    assert form.at(Case(4, 8, free_links=False)) is None
    assert form.where == "any m; equal stage costs, free links"
    assert SCHEDULES["1f1b"].peak.at(Case(4, 8, free_links=False)) == 4  # peaks depend on the order only


def test_case_of_a_simulation_reads_its_costs_and_link():
    assert Case.of(2, 4) == Case(2, 4)
    uneven = Case.of(2, 4, costs=StageCosts([1.0, 3.0], 1.0, 0.5))
    assert (uneven.f, uneven.i, uneven.w, uneven.equal_stages) == (2.0, 1.0, 0.5, False)
    assert Case.of(2, 4, 2, costs=StageCosts(0.5, 0.5, 0.5)).equal_stages  # p*v = 4 equal stages
    assert not Case.of(2, 4, link=Link(latency_s=0.01)).free_links
    assert Case.of(2, 4, link=Link(bandwidth_Bps=1e9), nbytes=0).free_links  # nothing to send
    assert not Case.of(2, 4, link=Link(bandwidth_Bps=1e9), nbytes=1).free_links


def test_explain_gives_the_value_or_the_range():
    interleaved = SCHEDULES["interleaved-1f1b"].bubble
    assert interleaved.explain(Case(4, 8, 2)) == "formula (p-1)/(v*m+p-1) = 15.79%"
    assert interleaved.explain(Case(4, 2, 2)) == (
        "formula (p-1)/(v*m+p-1) does not apply here; it holds for m >= p (or v = 1); equal stage costs, "
        "free links"
    )
    assert SCHEDULES["naive"].bubble.explain(Case(4, 8), ".1%") == "formula (p-1)/p = 75.0%"


def test_every_schedule_names_its_paper_and_megatrons_convention_is_kept():
    for info in SCHEDULES.values():
        assert info.paper and info.bubble.source and info.peak.source and info.bubble.megatron_text
    assert gpipe_bubble(4, 12) == pytest.approx(3 / 15)
    assert gpipe_bubble(4, 12, convention="megatron") == pytest.approx(0.25)  # (p-1)/m
    assert gpipe_bubble(4, 12, 2, convention="megatron") == pytest.approx(3 / 24)  # (p-1)/(v*m)
    assert megatron(SCHEDULES["naive"].bubble.value(Case(4, 8))) == pytest.approx(3)  # p-1
    with pytest.raises(CourseError, match="convention must be 'gpipe' or 'megatron', got 'mine'"):
        gpipe_bubble(4, 12, convention="mine")
