"""Lesson 13's model and runs: at a fixed global batch, the micro-batch size b against the number of them.

A global batch of B sequences goes through the pipeline as m = B / b micro-batches of b. A small b gives
many micro-batches and a small bubble, (p - 1)/(m + p - 1); a large b gives each operation more work,
which a machine runs more efficiently per sequence. Narayanan et al. 2021 (arXiv 2104.04473, eq. 1) write
the step as (B/b + p - 1) * (t_f(b) + t_b(b)); this module measures t_f(b) + t_b(b) of one toy stage in
CPU time, predicts the step from it, and trains each setting for real::

    from course_lib.lessons.microbatch import slot_cpu_ms, predicted_step_ms, microbatch_sweep
    slots = slot_cpu_ms(sizes=(1, 2, 4, 8), n_blocks=4)       # Spread of ms per micro-batch, per b
    predicted_step_ms(slots[4].median, global_batch=32, b=4, p=4)
    rows = microbatch_sweep(global_batch=32, p=4, sizes=(1, 2, 4, 8), n_layers=16, repeats=3)   # trained
"""

from __future__ import annotations

from dataclasses import dataclass

from course_lib.lessons.cpu_clock import stage_cpu_ms
from course_lib.lessons.repeats import Spread, repeat_all
from course_lib.lessons.runs import LessonRun, train_pipeline
from course_lib.shelf.errors import require


def _check_sizes(global_batch: int, sizes: tuple[int, ...]) -> None:
    bad = [b for b in sizes if not (isinstance(b, int) and b >= 1 and global_batch % b == 0)]
    require(not bad, f"sizes must be whole numbers that divide the global batch {global_batch}, got {bad}")


def slot_cpu_ms(sizes: tuple[int, ...] = (1, 2, 4, 8, 16), n_blocks: int = 4, repeats: int = 5) -> dict:
    """t_f(b) + t_b(b) of one stage of `n_blocks` blocks, CPU ms per micro-batch of b, per size."""
    bad = [b for b in sizes if not (isinstance(b, int) and b >= 1)]
    require(not bad, f"sizes must be whole numbers >= 1, got {bad}")
    configs = {str(b): (b, "never") for b in sizes}
    spreads = stage_cpu_ms(configs, n_blocks=n_blocks, repeats=repeats, passes=4)
    return {b: spreads[str(b)] for b in sizes}


def predicted_step_ms(slot_ms: float, global_batch: int, b: int, p: int) -> float:
    """(B/b + p - 1) * (t_f(b) + t_b(b)): equal stages, free links, 1F1B or GPipe."""
    _check_sizes(global_batch, (b,))
    return (global_batch // b + p - 1) * slot_ms


@dataclass(frozen=True)
class SizeRow:
    """One micro-batch size, trained `repeats` times (measured compute + simulated links)."""

    b: int
    m: int
    step_ms: Spread
    bubble: Spread
    last: LessonRun


def microbatch_sweep(
    global_batch: int = 32, p: int = 4, sizes: tuple[int, ...] = (1, 2, 4, 8), n_layers: int = 16,
    repeats: int = 3, schedule: str = "1f1b",
) -> list[SizeRow]:  # fmt: skip
    """Train one step per setting (after a warm-up step), the sizes taking turns `repeats` times."""
    _check_sizes(global_batch, tuple(sizes))
    common = dict(stages=p, steps=2, n_layers=n_layers, batch_size=global_batch, seq_len=32, eval_batches=1,
                  device="auto", progress=False)  # fmt: skip
    runs = {b: (lambda b=b: train_pipeline(schedule, microbatches=global_batch // b, **common))
            for b in sizes}  # fmt: skip
    done = repeat_all(runs, repeats)
    return [
        SizeRow(b, global_batch // b, Spread(tuple(r.measured.makespan * 1e3 for r in done[b])),
                Spread(tuple(r.measured.bubble_fraction for r in done[b])), done[b][-1])  # fmt: skip
        for b in sizes
    ]
