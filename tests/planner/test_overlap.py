"""The planner's overlap assumptions (``planner.step_time.Overlap``): each alone changes only its own term."""

from __future__ import annotations

import pytest

from course_lib.planner.clusters import cluster
from course_lib.planner.layout import Layout
from course_lib.planner.shapes import model
from course_lib.planner.step_time import (
    MEGATRON_OVERLAP,
    Overlap,
    boundary_message_s,
    compute_times,
    dp_time,
    estimate,
    simulate_pipeline,
    tp_times,
)
from course_lib.shelf.errors import CourseError

SELENE = cluster("a100-selene")
T1 = model("megatron-1t")
LAYOUT = Layout(8, 8, 6, 1, "1f1b")  # t = 8, p = 8 (across nodes), d = 6, b = 1
BATCH = 96


def test_the_default_is_megatrons_blocking_sends_and_dp_after_the_flush():
    assert MEGATRON_OVERLAP == Overlap("blocking", dp_overlapped=False) and not MEGATRON_OVERLAP.tp_overlapped
    assert estimate(T1, SELENE, LAYOUT, BATCH) == estimate(T1, SELENE, LAYOUT, BATCH, MEGATRON_OVERLAP)


def test_overlapped_sends_pay_the_boundary_only_in_fill_and_drain():
    blocking = estimate(T1, SELENE, LAYOUT, BATCH)
    overlapped = estimate(T1, SELENE, LAYOUT, BATCH, Overlap("overlapped"))
    message, m = boundary_message_s(T1, SELENE, LAYOUT), LAYOUT.microbatches(BATCH)
    assert overlapped.boundary_s == pytest.approx(2 * (LAYOUT.p - 1) * message)
    assert blocking.boundary_s - overlapped.boundary_s == pytest.approx(2 * m * message)
    assert (overlapped.compute_s, overlapped.bubble_s, overlapped.dp_s) == (
        blocking.compute_s, blocking.bubble_s, blocking.dp_s,
    )  # fmt: skip
    simulated = simulate_pipeline(T1, SELENE, LAYOUT, BATCH, overlapped, overlap=Overlap("overlapped"))
    assert simulated.boundary_s < simulate_pipeline(T1, SELENE, LAYOUT, BATCH, blocking).boundary_s


def test_an_overlapped_dp_all_reduce_hides_behind_the_last_backward():
    after = estimate(T1, SELENE, LAYOUT, BATCH)
    during = estimate(T1, SELENE, LAYOUT, BATCH, Overlap(dp_overlapped=True))
    backward = compute_times(T1, SELENE, LAYOUT)[1] + tp_times(T1, SELENE, LAYOUT)[1]
    assert after.dp_s == dp_time(T1, SELENE, LAYOUT) > 0
    assert during.dp_s == pytest.approx(max(0.0, after.dp_s - backward))
    assert during.boundary_s == after.boundary_s
    assert Overlap(dp_overlapped=True).exposed_dp_s(1.0, 3.0) == 0.0  # never below zero


@pytest.mark.parametrize("kwargs, words", [
    ({"pipeline_sends": "eager"}, "pipeline_sends must be one of 'blocking', 'overlapped', got 'eager'"),
    ({"dp_overlapped": "yes"}, "dp_overlapped must be True or False, got 'yes'"),
])  # fmt: skip
def test_a_bad_assumption_is_refused_with_the_choices(kwargs, words):
    with pytest.raises(CourseError, match=words):
        Overlap(**kwargs)


def test_the_plan_costs_every_layout_under_the_overlap_it_is_given():
    from course_lib.planner import plan

    blocking = plan(T1, SELENE, 3072, 3072, simulate_top=1)
    hidden = plan(T1, SELENE, 3072, 3072, simulate_top=1, overlap=Overlap("overlapped", dp_overlapped=True))
    assert blocking.overlap == MEGATRON_OVERLAP and hidden.overlap.pipeline_sends == "overlapped"
    by_layout = {x.layout: x.step_s for x in blocking.layouts}
    assert all(x.step_s <= by_layout[x.layout] + 1e-9 for x in hidden.layouts)  # hiding never costs
    assert hidden.best.step_s < blocking.best.step_s
    with pytest.raises(CourseError, match="overlap must be a planner.step_time.Overlap, got 'overlapped'"):
        plan(T1, SELENE, 3072, 3072, overlap="overlapped")


def test_the_command_line_names_the_overlap_it_planned_under(capsys):
    from course_lib.cli import main

    args = ["plan", "--model", "megatron-1t", "--cluster", "a100-selene", "--gpus", "3072"]
    assert main([*args, "--global-batch", "3072", "--top", "1", "--sends", "overlapped", "--json"]) == 0
    out = capsys.readouterr().out
    assert '"pipeline_sends": "overlapped"' in out and '"dp_overlapped": false' in out
