"""Assignment a04c's path through the grader (course_grading/execute.py): the student's rank function is
cut from the cells the grader ran, never from an object, and run on real processes in a fresh sandbox
with its grading edition; a deadlock there is answered within 30 s naming the ranks and the operation; a
check passed in some hidden cases earns nbgrader's partial credit with its verdict line. The whole
nbgrader flow (solution 10, untouched 0, the hard-coded copy, the tricks) runs in the graded course
(tests/grading/conftest.py); each mistake's score through nbgrader is bench/bench_rank_assignment.py's."""

from __future__ import annotations

import time

import pytest
from support.assignments import sandbox_or_skip
from support.rank_submissions import mistaken

from course_assignments.rank_checks import PartialCredit, RankCase, RankSeen, RunSeen, failed
from course_grading.execute import Editions, _Grader, function_source
from course_grading.sandbox import Budget, Limits, unavailable

NAME = "a04c_write_the_pipeline"


def test_the_function_is_cut_from_the_cells_as_they_were_run():
    cells = ["import math\nx = 1", "def one_f_one_b(rank):\n    return 'first'\n", "%time y = 2",
             "def helper():\n    pass\n\ndef one_f_one_b(rank):\n    return math.pi\n"]  # fmt: skip
    source = function_source("one_f_one_b", cells)
    assert source.startswith("import torch\nimport torch.distributed as dist\nimport math\n")
    assert source.rstrip().endswith("def one_f_one_b(rank):\n    return math.pi")  # the last one, alone
    assert "first" not in source and "helper" not in source and "x = 1" not in source
    assert function_source("one_f_one_b", ["one_f_one_b = print"]) is None  # a name bound, not a def


def test_partial_credit_reaches_nbgrader_as_a_verdict_line_and_points():
    from nbformat import from_dict
    from nbgrader.utils import determine_grade

    grader = _Grader(set())
    grader.space["PartialCredit"] = PartialCredit
    cell = "raise PartialCredit('memory: Your stage 2 held more (4, 5). Hint: h.', 0.5)"
    outputs = grader.run(cell, test=True, hidden=True)
    assert [o["output_type"] for o in outputs] == ["display_data", "execute_result"]
    shown = outputs[0]["data"]["text/plain"]
    assert shown.startswith("partial credit: AssertionError: a hidden case") and "4, 5" not in shown
    info = {"grade": True, "solution": False, "points": 1, "grade_id": "t", "locked": True}
    info["schema_version"] = 3
    cell = from_dict({"cell_type": "code", "source": "", "execution_count": None, "outputs": outputs,
                      "metadata": {"nbgrader": info}})  # fmt: skip
    assert determine_grade(cell) == (0.5, 1.0)


def test_a_check_passed_in_some_cases_earns_that_share():
    """`failed`: the first failing case's verdict, and the share of the cases the check applies to that
    pass it (a hidden test cell's partial credit)."""
    ranks = [RankSeen(0, 0, [], 2, []), RankSeen(1, 1, [], 1, [])]
    right = RunSeen(loss=3.0, reference_loss=3.0, grad_diff=0.0, ranks=ranks)
    unscaled = RunSeen(loss=6.0, reference_loss=3.0, grad_diff=0.5, ranks=ranks)
    cases = (RankCase(2, 2, 2), RankCase(2, 2, 2), RankCase(2, 3, 2, student=1))
    verdict, share = failed(cases, (right, unscaled, right), "loss")
    assert "m times the reference's" in verdict and share == pytest.approx(2 / 3)
    assert failed(cases, (right, unscaled, right), "memory") == (None, 1.0)
    assert failed(cases, (right, right, unscaled), "messages") == (None, 1.0)  # no message noted wrong


@pytest.mark.processes
def test_a_deadlock_in_the_sandbox_is_answered_within_30_s_naming_ranks_and_operation():
    sandbox_or_skip()
    limits = Limits(request_s=120.0)
    contained = unavailable() is None
    with Editions(NAME, limits, contained=contained, budget=Budget(600.0), rank_stall_s=2.0) as boxes:
        boxes.cells = [("import torch\nimport torch.distributed as dist", True)]
        boxes.cells.append((mistaken("wrong order"), False))
        started = time.perf_counter()
        (run,) = boxes.ranks("one_f_one_b", [[2, 2, 2, None]])
        waited = time.perf_counter() - started
    assert waited < 30, waited
    assert run["loss"] is None and "PeerFailure" in run["error"], run["error"]
    stalled = {(rank, op, peer) for rank, op, peer, _ in run["stalls"]}
    assert stalled == {(0, "send", 1), (1, "send", 0)}, run["stalls"]
