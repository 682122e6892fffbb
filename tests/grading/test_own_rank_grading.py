"""Grading a student's rank function (course_grading/rank_grading.py): the instructor's solution scores full
on the hidden matrix, the untouched release scores 0, each common mistake scores partial with its teaching
verdict, a deadlock is answered within 30 s naming the ranks and the operation, and no verdict gives away a
hidden size. Short stall limits, tiny models: a few seconds per run."""

from __future__ import annotations

import re
import time

import pytest
from support.own_rank_lesson import solution_function, written

from course_grading.rank_grading import MATRIX, Case, grade

pytestmark = pytest.mark.processes

# all the student's ranks (m not a multiple of p); the student's middle rank between the instructor's;
# the student's first stage alone, which receives only gradients
SMALL = (Case(2, 3, 2), Case(3, 2, 3, student=1), Case(2, 3, 2, student=0))
STALL_S = 1.5  # only where a stall is the point: a correct run on a loaded machine may wait longer


def no_sizes(lines: list[str]) -> bool:
    """No verdict carries a tuple of sizes or a measured number (hidden cases stay hidden)."""
    return not any(re.search(r"\(\d+(, \d+)+\)|\d+\.\d+", line) for line in lines)


def test_the_solution_scores_full_on_the_hidden_matrix(tmp_path):
    assert {c.p for c in MATRIX} >= {2, 3, 4} and any(c.m < c.p for c in MATRIX)
    assert any(c.m % c.p for c in MATRIX) and any(c.student is not None for c in MATRIX)
    result = grade(written(tmp_path, "solution", solution_function()))
    assert (result.score, result.verdicts) == (10, [])


def test_the_untouched_release_scores_zero(tmp_path):
    stub = "def one_f_one_b(rank):\n    raise NotImplementedError('write one_f_one_b')\n"
    result = grade(written(tmp_path, "untouched", stub), SMALL)
    assert result.score == 0
    assert any("NotImplementedError" in v for v in result.verdicts)


def test_a_deadlock_is_answered_within_30_s_with_ranks_and_operation_and_scores_partial(tmp_path):
    blocking = solution_function().replace("pending.append(dist.isend(", "(dist.send(")
    started = time.perf_counter()
    result = grade(written(tmp_path, "blocking", blocking), SMALL, stall_s=STALL_S)
    assert time.perf_counter() - started < 30 * len(SMALL)
    assert 0 < result.score < 10
    assert result.failed == {"no stall", "loss", "gradients", "memory", "buffers"}
    assert "ranks 0 and 1 deadlocked: rank 0 waited in send, rank 1 in send" in result.verdicts[0]
    assert no_sizes(result.verdicts)


MISTAKES = {  # name: (how the solution is changed, the check it fails, words of its verdict)
    "unscaled": ((" / rank.m\n", "\n"), "loss", "m times the reference's: divide each micro-batch's loss"),
    "wrong dtype": (
        ("dtype=rank.dtype, device=rank.device)", "dtype=torch.float64 if src == rank.prev else rank.dtype)"),
        "buffers",
        "a receive buffer has the sender's shape and dtype",
    ),
    "buffer reused": (
        ("pending.append(dist.isend(out.detach(), dst=rank.next))",
         "keep.copy_(out.detach()); pending.append(dist.isend(keep, dst=rank.next))"),
        "buffers",
        "changed a tensor before its send completed",
    ),
    "backward before its gradient": (
        ("grad = None if rank.is_last else arrive(rank.next)",
         "grad = None if rank.is_last else torch.empty(rank.shape)\n"
         "        if grad is not None:\n            pending.append(dist.irecv(grad, src=rank.next))"),
        "buffers",
        "a backward must not start before its gradient arrived",
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", MISTAKES)
def test_each_common_mistake_scores_partial_with_its_teaching_verdict(tmp_path, name):
    (old, new), check, words = MISTAKES[name]
    keep = "    pending, keep = [], torch.empty(rank.shape)"  # a buffer the "buffer reused" mistake needs
    source = solution_function().replace("    pending = []", keep)
    assert old in source
    result = grade(written(tmp_path, name, source.replace(old, new)), SMALL)
    assert 0 < result.score < 10, (name, result)
    assert check in result.failed and any(words in v for v in result.verdicts), (name, result.verdicts)
    assert no_sizes(result.verdicts), result.verdicts
