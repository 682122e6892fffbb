"""Lesson 12: the data-parallel all-reduce of a pipeline, and ZeRO's traffic under micro-batching."""

import pytest

from course_lib.lessons.pp_dp import (
    OVERLAPS,
    all_reduce_timings,
    last_backwards,
    step_with_dp,
    zero_memory,
    zero_traffic,
)
from course_lib.shelf.errors import CourseError
from course_lib.shelf.first_schedules import build_schedule
from course_lib.shelf.simulator import StageCosts, simulate

P, M = 4, 8


@pytest.fixture(scope="module")
def tl():
    return simulate(build_schedule("1f1b", P, M), StageCosts.fused(1, 2))


def test_the_last_stage_finishes_first_one_backward_apart(tl):
    ends = [end for _, end in last_backwards(tl)]
    assert ends[0] == tl.makespan
    assert [ends[d] - ends[d + 1] for d in range(P - 1)] == [2.0] * (P - 1)  # T_B apart


@pytest.mark.parametrize("a", [0.5, 1.0, 2.0, 6.0])
def test_what_each_way_of_reducing_adds_to_the_step(tl, a):
    own = {o: step_with_dp(tl, a, o) for o in OVERLAPS}
    shared = {o: step_with_dp(tl, a, o, shared=True) for o in OVERLAPS}
    # a port per GPU: device 0's reduction ends the step, unless buckets overlap its last backward
    assert own["after-flush"] == own["per-stage"] == tl.makespan + a
    # the first piece is ready T_B/8 into the last backward; then the pieces go one after another
    assert own["buckets"] == pytest.approx(tl.makespan + max(a / 8, a - 2 + 2 / 8))
    # one shared port: p reductions queue after the flush; per stage hides the others while a <= T_B
    assert shared["after-flush"] == tl.makespan + P * a
    if a <= 2:
        assert shared["per-stage"] == tl.makespan + a
    assert shared["buckets"] <= shared["per-stage"] <= shared["after-flush"]


def test_a_reduction_never_starts_before_its_gradients_exist(tl):
    for overlap in OVERLAPS:
        timings = all_reduce_timings(tl, 3.0, overlap, shared=True)
        for timing, (start, end) in zip(timings, last_backwards(tl), strict=True):
            assert timing.pieces[0][0] >= (start if overlap == "buckets" else end)
            assert all(b >= a for (_, a), (b, _) in zip(timing.pieces, timing.pieces[1:], strict=False))


def test_zero_2_and_3_pay_per_micro_batch_and_zero_1_does_not():
    for m in (1, 8, 32):
        t = zero_traffic(m, 8)
        assert t["ZeRO-1"] == t["DP"] == pytest.approx(2 * 7 / 8)
        assert t["ZeRO-2"] / t["DP"] == pytest.approx((m + 1) / 2)
        assert t["ZeRO-3"] / t["DP"] == pytest.approx(1.5 * m)
    assert zero_memory(8) == {"DP": 16, "ZeRO-1": 5.5, "ZeRO-2": 3.75, "ZeRO-3": 2.0}


@pytest.mark.parametrize("kwargs, words", [
    (dict(overlap="later"), "overlap must be one of"), (dict(reduce_s=-1), "reduce_s must be >= 0"),
    (dict(buckets=0), "buckets must be a whole number"),
])  # fmt: skip
def test_bad_settings_are_refused_with_the_value_named(tl, kwargs, words):
    args = dict(reduce_s=1.0) | kwargs
    with pytest.raises(CourseError, match=words):
        all_reduce_timings(tl, **args)
    with pytest.raises(CourseError, match="d must be a whole number >= 2"):
        zero_traffic(8, 1)
