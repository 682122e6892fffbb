"""Grading a student's rank function (assignment a04c): the hidden test matrix, the checks, the verdicts.

The student writes ``one_f_one_b(rank)`` for one rank of a 1F1B pipeline (lesson 04c's harness,
``course_lib/lessons/own_rank.py``, runs it). ``grade(path)`` runs it on real processes for every case
of ``MATRIX``: some with the student's function on every rank, others with it on one rank only, its
neighbours the instructor's ranks (``course_grading/peer_ranks.py``), which compare every message that
arrives from it with what 1F1B sends then, in processes the student's code never touched. Six checks,
10 points; each failed check gives one instructor-written verdict line (which rank, which kind of
mistake, what to do), never the hidden sizes, the test's code or an expected value::

    result = grade("submission/my_1f1b.py")
    result.score, result.verdicts
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from course_lib.lessons.own_rank import OwnRun, Stall, one_f_one_b_bound, run_own_pipeline

PEERS = Path(__file__).with_name("peer_ranks.py")
PEER_FUNCTION = "observing_one_f_one_b"
STALL_S = 10.0  # the engines' stall limit; the tests set a shorter one
# a case's wall clock beyond its stall limit: a backstop for a rank that computes without end (a
# deadlock is caught by the stall limit); generous, as p processes starting on a busy machine take long
LIMIT_S = 120.0
UNFINISHED = "Loss, gradients and memory score nothing for a case whose run did not finish."


@dataclass(frozen=True)
class Case:
    """One hidden run: p ranks, m micro-batches, `n_layers` blocks; `student` the one rank that runs the
    student's function beside the instructor's ranks (None: the student's function on every rank)."""

    p: int
    m: int
    n_layers: int
    student: int | None = None


MATRIX = (
    Case(2, 3, 2),  # m not a multiple of p
    Case(3, 2, 3),  # m < p
    Case(4, 5, 5),  # p = 4, layers not a multiple of stages
    Case(3, 4, 3, student=1),  # a middle rank: both neighbours are the instructor's and observe it
    Case(2, 1, 2, student=0),  # m = 1: the first stage alone among the instructor's
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


def verdict_for_stalls(stalls: list[Stall]) -> str:
    """The verdict for a run that stalled: mutual waits are a deadlock; a lone wait, a missing message."""
    pairs = {(s.rank, s.peer): s for s in stalls}
    for (a, b), s in pairs.items():
        if (b, a) in pairs:
            other = pairs[(b, a)].operation
            return (
                f"Your ranks {a} and {b} deadlocked: rank {a} waited in {s.operation}, rank {b} in {other}, "
                "each for the other, past the stall limit. Two neighbours that each block until the other "
                "acts never get there: send with isend (wait at the end of the step), or post the receive "
                "before the blocking call."
            )
    s = stalls[0]
    return (
        f"Your rank {s.rank} waited in {s.operation} for rank {s.peer} past the stall limit: a message it "
        "waits for is never sent, or it sends one that is never received. Count what each rank sends and "
        "receives per micro-batch, in the warm-up, the steady state and the cool-down."
    )


def _failure_verdict(run: OwnRun) -> str:
    if run.stalls:
        return verdict_for_stalls(run.stalls)
    said = run.error.split("failed: ", 1)[-1][:300]  # the exception's own words, sizes taken out
    return "Your rank function failed: " + re.sub(r"\(\d+(?:, \d+)*\)|\b\d+\.\d+\b", "(...)", said)


def _run(path: Path, case: Case, stall_s: float) -> OwnRun:
    peers = None
    if case.student is not None:
        peers = {r: (PEERS, PEER_FUNCTION) for r in range(case.p) if r != case.student}
    return run_own_pipeline(path, case.p, case.m, n_layers=case.n_layers, stall_s=stall_s, peers=peers,
                            limit_s=stall_s + LIMIT_S)  # fmt: skip


def grade(path: str | Path, cases: tuple[Case, ...] = MATRIX, stall_s: float = STALL_S) -> Grade:
    """Run the student's rank function in `path` on every case and score the six checks (module doc):
    each check earns its points times the share of the cases it applies to that it passed."""
    verdicts: dict[str, str] = {}  # check -> its verdict (the first case that fails it)
    applied = dict.fromkeys(POINTS, 0)
    passed = dict.fromkeys(POINTS, 0)
    for case in cases:
        run = _run(Path(path), case, stall_s)
        for check, verdict in _case_verdicts(case, run).items():
            applied[check] += 1
            if verdict is None:
                passed[check] += 1
            else:
                verdicts.setdefault(check, verdict)
    score = sum(POINTS[c] * passed[c] / applied[c] for c in POINTS if applied[c])
    lines = list(dict.fromkeys(verdicts[c] for c in POINTS if c in verdicts))  # each verdict once
    return Grade(math.floor(score + 1e-9), lines, set(verdicts))


def _case_verdicts(case: Case, run: OwnRun) -> dict[str, str | None]:
    """Each check that applies to this case: None where it passed, else its verdict line."""
    out: dict[str, str | None] = {}
    mine = [r for r in run.ranks if case.student is None or r.rank == case.student]
    mistakes = run.mistakes if case.student is None else [m for r in mine for m in r.mistakes]
    wrong = re.search(r"rank (\d+) would (?:send|receive) a", run.error or "")
    if wrong:
        out["buffers"] = _MISTAKES["buffer"].format(rank=wrong.group(1))
    elif mistakes:
        out["buffers"] = _MISTAKES[mistakes[0][1 : mistakes[0].index("]")]].format(
            rank=_rank_named(mistakes[0])
        )
    else:
        out["buffers"] = None if run.error is None else UNFINISHED
    check = "no stall" if case.student is None else "messages"
    if run.error is not None:
        beside = "" if wrong or case.student is None else " (beside the instructor's ranks)"
        out[check] = (out["buffers"] if wrong else _failure_verdict(run)) + beside
        out |= dict.fromkeys(("loss", "gradients", "memory"), UNFINISHED)
        return out
    out[check] = None
    for note in (n for r in run.ranks for n in r.observed) if case.student is not None else ():
        kind, src, _, status = note.split()
        if int(src) == case.student and status != "ok":
            article = "an" if kind == "activation" else "a"
            out["messages"] = (
                f"The instructor's rank beside your rank {case.student} received {article} {kind} from it "
                "that is not what 1F1B sends at that point: check the order of your sends, which micro-batch "
                "each one carries, and that the loss is divided by m."
            )
            break
    out["loss"] = None
    if not math.isclose(run.loss, run.reference_loss, rel_tol=1e-5):
        if math.isclose(run.loss, case.m * run.reference_loss, rel_tol=1e-4):
            out["loss"] = (
                "The last stage's loss is m times the reference's: divide each micro-batch's loss by m, so "
                "that the m gradients add up to the gradient of the batch's mean loss."
            )
        else:
            out["loss"] = (
                "The last stage's loss differs from the reference's: a forward read the wrong input (another "
                "micro-batch's, a buffer written over, or one that had not arrived)."
            )
    out["gradients"] = None
    if run.grad_diff is None or run.grad_diff >= 1e-5:
        out["gradients"] = (
            "Your gradients differ from the reference trainer's: a backward ran on the wrong micro-batch, or "
            "on a gradient that had not arrived (wait for every receive first)."
        )
    bound = one_f_one_b_bound(case.p, case.m)
    out["memory"] = None
    for r in mine:
        if r.peak_held > bound[r.stage]:
            out["memory"] = (
                f"Your stage {r.stage} held more micro-batches at once than 1F1B's bound: run p - s - 1 "
                "forwards in the warm-up, then one backward after every forward."
            )
    return out


def _rank_named(mistake: str) -> str:
    found = re.search(r"rank (\d+)", mistake)
    return found.group(1) if found else "?"


_MISTAKES = {  # the harness's mistake kinds (MessageWatch), as the student reads them
    "buffer": "Your rank {rank} received into (or sent) a tensor of the wrong shape or dtype: a receive "
    "buffer has the sender's shape and dtype, rank.shape and rank.dtype.",
    "reuse": "Your rank {rank} changed a tensor before its send completed: isend reads its tensor until its "
    "wait returns; send a tensor you no longer write to, or wait for the send first.",
    "early": "Your rank {rank} used a receive before it was waited for: wait for an irecv before you read "
    "its buffer (a backward must not start before its gradient arrived).",
}
