"""StageCosts (named after the action letters) and costs_from (measured Timelines -> costs)."""

from __future__ import annotations

import pytest

from course_lib.shelf.costs import StageCosts, costs_from, costs_from_durations
from course_lib.shelf.errors import CourseError
from course_lib.shelf.first_schedules import build_schedule
from course_lib.shelf.schedule import Kind
from course_lib.shelf.simulator import simulate
from course_lib.shelf.timeline import MEASURED, Timeline


def test_fields_follow_the_action_letters():
    assert StageCosts(1.0, 2.0, 3.0) == StageCosts(f=1.0, i=2.0, w=3.0)
    assert StageCosts.fused(f=1.0, b=5.0) == StageCosts(f=1.0, i=5.0, w=0.0)
    assert StageCosts(f=[1, 2], i=4, w=0).per_stage(2) == ([1.0, 2.0], [4.0, 4.0], [0.0, 0.0])


def test_a_virtual_stage_costs_one_vth_of_a_devices_share():
    assert StageCosts(f=3.0, i=[6.0, 9.0], w=0.0).per_virtual_stage(3) == StageCosts(1.0, [2.0, 3.0], 0.0)


def test_read_back_costs_equal_the_ones_simulated_with():
    sched = build_schedule("1f1b", 3, 6)
    truth = StageCosts.fused(f=[1.0, 2.0, 3.0], b=[2.0, 4.0, 5.0])
    assert costs_from([simulate(sched, truth)]).per_stage(3) == truth.per_stage(3)


def test_split_backward_keeps_i_and_w():
    sched = build_schedule("zb-h1", 2, 4)
    got = costs_from([simulate(sched, StageCosts(f=1.0, i=2.0, w=3.0))])
    assert got.per_stage(2) == ([1.0, 1.0], [2.0, 2.0], [3.0, 3.0])


def test_median_mean_and_equal_stages():
    durations = {(0, Kind.F): [1.0, 1.0, 7.0], (1, Kind.F): [3.0], (0, Kind.B): [2.0], (1, Kind.B): [4.0]}
    assert costs_from_durations(durations, 2).f == [1.0, 3.0]
    assert costs_from_durations(durations, 2, reduce="mean").f == [3.0, 3.0]
    # every stage's spans pooled: one number per kind, the textbook's equal stages
    assert costs_from_durations(durations, 2, "mean", equal_stages=True) == StageCosts(3.0, 3.0, 0.0)
    assert costs_from_durations({}, 2) == StageCosts([0.0, 0.0], [0.0, 0.0], [0.0, 0.0])  # nothing ran


def test_bad_input_says_what_is_wrong():
    tl = simulate(build_schedule("1f1b", 2, 2))
    with pytest.raises(CourseError, match="at least one Timeline"):
        costs_from([])
    with pytest.raises(CourseError, match="reduce must be one of \\['mean', 'median'\\], got 'max'"):
        costs_from([tl], reduce="max")
    with pytest.raises(CourseError, match="n_stages"):
        costs_from([Timeline(MEASURED, 2, tl.spans)])  # a Timeline that does not say its stages
    with pytest.raises(CourseError, match="n_stages"):
        costs_from([tl, simulate(build_schedule("1f1b", 3, 2))])  # two different schedules
    with pytest.raises(CourseError, match="StageCosts.i has 3 entries but the schedule has 2 stages"):
        StageCosts(i=[1, 2, 3]).per_stage(2)
