"""Lesson 13: micro-batch size against the number of micro-batches at a fixed global batch."""

import pytest

from course_lib.lessons.cpu_clock import stage_cpu_ms
from course_lib.lessons.microbatch import microbatch_sweep, predicted_step_ms, slot_cpu_ms
from course_lib.shelf.errors import CourseError


def test_the_step_formula_is_narayanans():
    # (B/b + p - 1)(t_f + t_b): B = 32, b = 4, p = 4 -> 11 slots
    assert predicted_step_ms(2.0, global_batch=32, b=4, p=4) == pytest.approx(22.0)
    assert predicted_step_ms(2.0, global_batch=32, b=1, p=8) == pytest.approx(78.0)
    with pytest.raises(CourseError, match="divide the global batch 32, got \\[3\\]"):
        predicted_step_ms(2.0, global_batch=32, b=3, p=4)


def test_a_larger_micro_batch_costs_more_per_micro_batch_and_less_per_sequence():
    slots = slot_cpu_ms(sizes=(1, 16), n_blocks=2, repeats=3)
    assert slots[16].median > slots[1].median  # more work in one micro-batch
    assert slots[16].median / 16 < slots[1].median  # but less per sequence: overheads shared


def test_the_sweep_trains_every_size_to_the_same_losses():
    rows = microbatch_sweep(global_batch=8, p=2, sizes=(1, 4), n_layers=2, repeats=3)
    assert [(r.b, r.m) for r in rows] == [(1, 8), (4, 2)]
    assert rows[0].last.losses == pytest.approx(rows[1].last.losses, rel=1e-5)  # b changes timing only
    assert all(len(r.step_ms.values) == 3 for r in rows)


def test_bad_sizes_are_refused_with_the_value_named():
    with pytest.raises(CourseError, match="divide the global batch 8, got \\[3\\]"):
        microbatch_sweep(global_batch=8, p=2, sizes=(1, 3))
    with pytest.raises(CourseError, match="micro-batch size >= 1"):
        stage_cpu_ms({"zero": (0, "never")})
