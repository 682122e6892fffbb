"""Grading a student's rank function (assignment a04c): the hidden test matrix, the checks, the verdicts.

The student writes ``one_f_one_b(rank)`` for one rank of a 1F1B pipeline (lesson 04c's harness,
``course_lib/lessons/own_rank.py``, runs it). ``grade(path)`` runs it on real processes for every case
of ``MATRIX``: some with the student's function on every rank, others with it on one rank only, its
neighbours the instructor's ranks (``course_grading/peer_ranks.py``), which compare every message that
arrives from it with what 1F1B sends then, in processes the student's code never touched, and seal
their reports with a key only they receive (a report whose seal fails counts as none). Six checks,
10 points; each failed check gives one instructor-written verdict line (which rank, which kind of
mistake, what to do), never the hidden sizes, the test's code or an expected value::

    result = grade("submission/my_1f1b.py")
    result.score, result.verdicts
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from course_assignments.rank_checks import (
    CHECKS,
    LIMIT_S,
    UNFINISHED,
    RunSeen,
    case_verdicts,
    plain_run,
    rank_check,
)
from course_assignments.rank_checks import RankCase as Case
from course_grading.rank_guard import RankGuard
from course_grading.sealed_ranks import mark_seals
from course_lib.lessons.own_rank import OwnRun, run_own_pipeline

PEERS = Path(__file__).with_name("peer_ranks.py")
PEER_FUNCTION = "observing_one_f_one_b"
STALL_S = 10.0  # the engines' stall limit; the tests set a shorter one


MATRIX = (  # the first two, at p <= 3, are what a grader told to run fewer (rank_cases) runs
    Case(2, 1, 2, student=0),  # m = 1: the first stage alone among the instructor's
    Case(3, 2, 3),  # m < p
    Case(3, 4, 3, student=1),  # a middle rank: both neighbours are the instructor's and observe it
    Case(2, 3, 2),  # m not a multiple of p
    Case(4, 5, 5),  # p = 4, layers not a multiple of stages
    Case(4, 6, 4, student=3),  # the last stage: it computes the loss
)

# check -> points (10 in all); a check passes when it passes in every case it applies to
POINTS = {"no stall": 2, "messages": 2, "loss": 2, "gradients": 2, "memory": 1, "buffers": 1}


@dataclass
class Grade:
    """What the student sees: a score out of 10 and one verdict line per failed check."""

    score: int
    verdicts: list[str] = field(default_factory=list)
    failed: set[str] = field(default_factory=set)


def _run(path: Path, case: Case, stall_s: float) -> OwnRun | RunSeen:
    """One case; the instructor's ranks seal their reports with a key made for this run alone (only their
    processes receive it), in a run closed to the student's rank (``RankGuard``)."""
    if case.student is None:
        return run_own_pipeline(path, case.p, case.m, n_layers=case.n_layers, stall_s=stall_s,
                                limit_s=stall_s + LIMIT_S)  # fmt: skip
    peers = {r: (PEERS, PEER_FUNCTION) for r in range(case.p) if r != case.student}
    key, nonce = secrets.token_bytes(32), secrets.token_hex(8)
    run = run_own_pipeline(path, case.p, case.m, n_layers=case.n_layers, stall_s=stall_s, peers=peers,
                           limit_s=stall_s + LIMIT_S, guard=RankGuard(),
                           private=dict.fromkeys(peers, (key, nonce)))  # fmt: skip
    return judged_run(run, case, key, nonce)


def judged_run(run: OwnRun, case: Case, key: bytes, nonce: str) -> RunSeen:
    """`run` as the checks judge it from a sandbox: plain data, each instructor's rank marked ``sealed``
    (whether its report's seal holds under `key` and `nonce`, ``sealed_ranks.mark_seals``)."""
    (seen,) = mark_seals([plain_run(run)], [[case.p, case.m, case.n_layers, case.student]], key, [nonce])
    return RunSeen.from_plain(seen)


def grade(path: str | Path, cases: tuple[Case, ...] = MATRIX, stall_s: float = STALL_S) -> Grade:
    """Run the student's rank function in `path` on every case and score the six checks (module doc):
    each check earns its points times the share of the cases it applies to that it passed."""
    verdicts: dict[str, str] = {}  # check -> its verdict (the first case that fails it)
    applied = dict.fromkeys(POINTS, 0)
    passed = dict.fromkeys(POINTS, 0)
    for case in cases:
        run = _run(Path(path), case, stall_s)
        for check, verdict in case_verdicts(case, run).items():
            applied[check] += 1
            if verdict is None:
                passed[check] += 1
            else:
                verdicts.setdefault(check, verdict)
    score = sum(POINTS[c] * passed[c] / applied[c] for c in POINTS if applied[c])
    lines = list(dict.fromkeys(verdicts[c] for c in POINTS if c in verdicts))  # each verdict once
    return Grade(math.floor(score + 1e-9), lines, set(verdicts))


def hidden_check(fn, check: str, stall_s: float = STALL_S) -> None:
    """A hidden test cell's check: `fn` (the grader's stand-in for the student's rank function, whose runs
    go to a fresh sandbox) on every case of MATRIX; fails with the check's verdict (AssertionError), or
    with partial credit (``PartialCredit``: POINTS[check] times the share of the cases that passed it)."""
    __tracebackhide__ = True
    rank_check(fn, check, MATRIX, stall_s, PEERS, points=POINTS[check])


__all__ = ["CHECKS", "MATRIX", "POINTS", "UNFINISHED", "Case", "Grade", "grade", "hidden_check"]
