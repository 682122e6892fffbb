"""Assignment 7's committed solution outputs agree with the engine they were made with: its Gantt chart is
drawn from measured F, I and W costs, and since W is computed as dy^T x (course_lib/engines/split_backward.py)
a W costs less than an I on the toy, as lesson 07b's measured costs print. Outputs from before that change
showed W about five times I; this keeps a stale re-execution from coming back."""

from __future__ import annotations

import re

from support.committed import output_text

A7 = "assignments/source/a07_zero_bubble/zero_bubble"
PRINTED = re.compile(r"T_F ([\d.]+) ms, T_I ([\d.]+) ms, T_W ([\d.]+) ms \(T_W / T_I = ([\d.]+)\)")


def _costs(notebook: str, cell_id: str) -> tuple[float, float, float, float]:
    found = PRINTED.search(output_text(notebook, cell_id))
    assert found, f"{notebook} cell {cell_id} no longer prints its measured T_F, T_I, T_W"
    return tuple(float(x) for x in found.groups())


def test_a7s_training_cell_prints_the_costs_its_chart_is_drawn_from():
    f, i, w, ratio = _costs(A7, "a7-train")
    assert min(f, i, w) > 0
    assert abs(ratio - w / i) < 0.01 + 0.01 * ratio  # the ratio is the printed costs' (rounding aside)


def test_a7_and_lesson_07b_agree_that_w_costs_less_than_i_on_the_toy():
    *_, a7_ratio = _costs(A7, "a7-train")
    *_, lesson_ratio = _costs("07b_zero_bubble", "66f98286")
    assert a7_ratio < 1 and lesson_ratio < 1, (a7_ratio, lesson_ratio)
