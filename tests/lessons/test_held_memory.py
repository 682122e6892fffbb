"""Lesson 16's memory over time (course_lib/lessons/held_memory.py): the bytes each stage holds, measured
after every action, reach the simulator's levels; GPipe holds all m micro-batches, 1F1B at most p - s."""

from __future__ import annotations

import pytest

from course_lib.lessons.held_memory import held_over_time
from course_lib.shelf.reference import TrainConfig

CFG = TrainConfig(n_layers=6, d_model=16, n_heads=2, seq_len=8, batch_size=8, microbatches=4)


@pytest.mark.parametrize(("schedule", "held"), [("gpipe", lambda s: 4), ("1f1b", lambda s: 4 - s)])
def test_measured_held_bytes_reach_the_simulated_levels(schedule, held) -> None:
    curves = held_over_time(CFG, schedule, stages=4)
    for s in range(4):
        measured = max(b for _, b in curves.measured[s])
        simulated = max(b for _, b in curves.simulated[s])
        one = curves.timeline.stash_bytes[s]  # one micro-batch's stash on stage s (median measured)
        assert simulated == held(s) * one
        assert measured == pytest.approx(simulated, rel=0.05)
        assert curves.measured[s][-1][1] == 0  # everything freed by the end of the step
