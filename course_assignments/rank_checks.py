"""The checks of a student's rank function (assignment a04c): its runs as plain data, and a verdict per check.

A run of ``one_f_one_b(rank)`` (``course_lib/lessons/own_rank.py``) on real processes is judged by six
checks: no stall, the messages it sends, the loss, the gradients, the micro-batches it holds, its buffers.
Each check that fails gives one instructor-written verdict line (which rank, which kind of mistake, what to
do), never a size or an expected value. Runs travel as plain data (``plain_run``): the grader receives
them from the sandbox that ran the student's function (``RunSeen`` rebuilds them), and a student's
notebook runs the same checks on its own function::

    rank_check(one_f_one_b, "loss")          # fails (AssertionError) with the verdict, or passes

A function defined in a cell cannot be unpickled by a spawned rank, so its source is written to a module
file that every rank imports (``module_source``): ``torch`` and ``dist`` (torch.distributed) are imported
there, and the function itself; helpers it needs go inside it.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
import re
import tempfile
import textwrap
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import course_assignments as grading
from course_assignments import CheckFailed, fail
from course_lib.lessons.own_rank import one_f_one_b_bound, run_own_pipeline
from course_lib.shelf.errors import capped
from course_lib.shelf.launcher import Guard

CHECKS = ("no stall", "messages", "loss", "gradients", "memory", "buffers")
HEADER = "import torch\nimport torch.distributed as dist\n\n\n"  # what every student module starts with
UNFINISHED = "Loss, gradients and memory score nothing for a case whose run did not finish."
NOT_WRITTEN = "not written yet"
UNSEALED = (  # an instructor's rank whose report's seal did not hold (course_grading/sealed_ranks.py)
    "The instructor's rank {rank}'s observations did not arrive signed: the report in its place is not the "
    "one it sent, so nothing it saw of your rank, nor its loss and gradients, counts."
)
# a case's wall clock beyond its stall limit: a backstop for a rank that computes without end (a
# deadlock is caught by the stall limit); generous, as p processes starting on a busy machine take long
LIMIT_S = 120.0


@dataclass(frozen=True)
class RankCase:
    """One run: p ranks, m micro-batches, `n_layers` blocks; `student` the one rank that runs the
    student's function beside the instructor's ranks (None: the student's function on every rank)."""

    p: int
    m: int
    n_layers: int
    student: int | None = None


VISIBLE_RUNS = (RankCase(2, 4, 3),)  # what the notebook's visible checks run: no case of the hidden tests


# ---- runs as plain data -----------------------------------------------------------------------------
@dataclass
class RankSeen:
    rank: int
    stage: int
    mistakes: list[str]
    peak_held: int
    observed: list[str]
    sealed: bool | None = None  # an instructor's rank: whether its report's seal held (None: no seal asked)


@dataclass(frozen=True)
class StallSeen:
    rank: int
    operation: str
    peer: int
    waited_s: float


@dataclass
class RunSeen:
    """A run as the checks read it (an ``OwnRun``'s fields that judge it), rebuilt from plain data."""

    error: str | None = None
    stalls: list[StallSeen] = field(default_factory=list)
    loss: float | None = None
    reference_loss: float | None = None
    grad_diff: float | None = None
    ranks: list[RankSeen] = field(default_factory=list)

    @property
    def mistakes(self) -> list[str]:
        return [m for r in self.ranks for m in r.mistakes]

    @classmethod
    def from_plain(cls, data: dict) -> RunSeen:
        def number(value: object) -> float | None:
            return None if value is None else float(value)  # type: ignore[arg-type]

        return cls(
            None if data.get("error") is None else str(data["error"]),
            [StallSeen(int(r), str(op), int(peer), float(w)) for r, op, peer, w in data.get("stalls", [])],
            number(data.get("loss")), number(data.get("reference_loss")), number(data.get("grad_diff")),
            [RankSeen(int(r["rank"]), int(r["stage"]), [str(m) for m in r["mistakes"]], int(r["peak_held"]),
                      [str(o) for o in r["observed"]], r.get("sealed")) for r in data.get("ranks", [])],
        )  # fmt: skip


def plain_run(run) -> dict:
    """An ``OwnRun`` as plain data: what the checks read of it, nothing else."""
    return {
        "error": run.error,
        "stalls": [[s.rank, s.operation, s.peer, s.waited_s] for s in run.stalls],
        "loss": run.loss, "reference_loss": run.reference_loss, "grad_diff": run.grad_diff,
        "ranks": [{"rank": r.rank, "stage": r.stage, "mistakes": list(r.mistakes), "peak_held": r.peak_held,
                   "observed": list(r.observed), "seal": r.stamp, "digest": digest(r.losses, r.grads)}
                  for r in run.ranks],
    }  # fmt: skip


def digest(losses: Iterable[float], grads: dict) -> str:
    """SHA-256 of a rank's losses and gradients (by name, their bytes): what an instructor's rank's seal
    vouches for beside what it observed (``course_grading/sealed_ranks.py``)."""
    h = hashlib.sha256(json.dumps([float(x) for x in losses]).encode())
    for name in sorted(grads):
        tensor = grads[name]
        h.update(name.encode() + b"\0")
        if tensor is not None:
            h.update(str(tuple(tensor.shape)).encode() + str(tensor.dtype).encode())
            h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def run_cases(path: str | Path, cases: Sequence[Sequence], stall_s: float, peers: str | Path | None,
              guard: Guard | None = None, private: Sequence[tuple] = ()) -> list:  # fmt: skip
    """Run the rank function in `path` on each case ((p, m, n_layers, student) lists); `peers`: the
    file of the instructor's observing ranks, for a case with one student rank; such a case's run is
    closed by `guard` and each observing rank alone receives the case's `private` arguments (a grader's
    key and nonce, to seal its report with: ``run_own_pipeline``'s). Plain data per case."""
    found = []
    for i, (p, m, n_layers, student) in enumerate(cases):
        others = mine = None
        if student is not None and peers is not None:
            others = {r: (peers, "observing_one_f_one_b") for r in range(p) if r != student}
            mine = dict.fromkeys(others, private[i]) if private else None
        run = run_own_pipeline(path, p, m, n_layers=n_layers, stall_s=stall_s, peers=others,
                               limit_s=stall_s + LIMIT_S, guard=guard if others else None,
                               private=mine)  # fmt: skip
        found.append(plain_run(run))
    return found


def module_source(fn: Callable) -> str:
    """The module every rank imports: HEADER and the function's own source (its cell's text)."""
    return HEADER + textwrap.dedent(inspect.getsource(fn))


_CACHE: list[tuple[object, tuple, float, list[RunSeen] | Exception]] = []  # (function, cases, stall_s, runs)


def rank_runs(
    fn: Callable, cases: Sequence[RankCase] = VISIBLE_RUNS, stall_s: float = 10.0,
    peers: str | Path | None = None,
) -> list[RunSeen]:  # fmt: skip
    """The runs of `fn` on `cases` (each run once per function: the checks share them). The grader's
    stand-in for a student's function runs them in a sandbox (its ``run_ranks``, which may run only the
    first cases where the grader is told to: a quick check of the grading); here, in this process, with
    `peers` (the instructor's observing ranks' file) beside a case's one student rank."""
    key = tuple((c.p, c.m, c.n_layers, c.student) for c in cases)
    for seen, k, s, runs in _CACHE:
        if seen is fn and k == key and s == stall_s:
            if isinstance(runs, BaseException):  # the runs could not be had: each check says so, once run
                raise runs
            return runs
    if hasattr(type(fn), "run_ranks"):  # the grader's stand-in (a class attribute: not a student's own)
        try:
            data = fn.run_ranks([list(c) for c in key], stall_s)
        except Exception as err:
            _CACHE.append((fn, key, stall_s, err))
            raise
    else:
        with tempfile.TemporaryDirectory(prefix="your-rank-") as folder:
            path = Path(folder) / "your_rank.py"
            path.write_text(module_source(fn))
            data = run_cases(path, key, stall_s, peers)
    runs = [RunSeen.from_plain(d) for d in data]
    _CACHE.append((fn, key, stall_s, runs))
    return runs


# ---- the verdicts -----------------------------------------------------------------------------------
def verdict_for_stalls(stalls: Sequence) -> str:
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


def _failure_verdict(run) -> str:
    if run.stalls:
        return verdict_for_stalls(run.stalls)
    said = run.error.split("failed: ", 1)[-1][:300]  # the exception's own words, sizes taken out
    return "Your rank function failed: " + re.sub(r"\(\d+(?:, \d+)*\)|\b\d+\.\d+\b", "(...)", said)


def case_verdicts(case: RankCase, run) -> dict[str, str | None]:
    """Each check that applies to this case: None where it passed, else its verdict line. `run`: an
    ``OwnRun`` or a ``RunSeen``."""
    out: dict[str, str | None] = {}
    mine = [r for r in run.ranks if case.student is None or r.rank == case.student]
    mistakes = run.mistakes if case.student is None else [m for r in mine for m in r.mistakes]
    wrong = re.search(r"rank (\d+) would (?:send|receive) a", run.error or "")
    if wrong:
        out["buffers"] = MISTAKES["buffer"].format(rank=wrong.group(1))
    elif mistakes:
        kind = mistakes[0][1 : mistakes[0].index("]")]
        out["buffers"] = MISTAKES[kind].format(rank=_rank_named(mistakes[0]))
    else:
        out["buffers"] = None if run.error is None else UNFINISHED
    check = "no stall" if case.student is None else "messages"
    if run.error is not None:
        beside = "" if wrong or case.student is None else " (beside the instructor's ranks)"
        out[check] = (out["buffers"] if wrong else _failure_verdict(run)) + beside
        out |= dict.fromkeys(("loss", "gradients", "memory"), UNFINISHED)
        return out
    out[check] = None
    peers = [r for r in run.ranks if case.student is not None and r.rank != case.student]
    for note in (n for r in peers if getattr(r, "sealed", None) is not False for n in r.observed):
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
    if grading.verdict(run.loss, run.reference_loss, rel_tol=1e-5, abs_tol=0.0) != "ok":
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
    if unsealed := [r.rank for r in peers if getattr(r, "sealed", None) is False]:  # forged, or not sent
        out["messages"] = out["loss"] = out["gradients"] = UNSEALED.format(rank=unsealed[0])
    return out


def _rank_named(mistake: str) -> str:
    found = re.search(r"rank (\d+)", mistake)
    return found.group(1) if found else "?"


MISTAKES = {  # the harness's mistake kinds (MessageWatch), as the student reads them
    "buffer": "Your rank {rank} received into (or sent) a tensor of the wrong shape or dtype: a receive "
    "buffer has the sender's shape and dtype, rank.shape and rank.dtype.",
    "reuse": "Your rank {rank} changed a tensor before its send completed: isend reads its tensor until its "
    "wait returns; send a tensor you no longer write to, or wait for the send first.",
    "early": "Your rank {rank} used a receive before it was waited for: wait for an irecv before you read "
    "its buffer (a backward must not start before its gradient arrived).",
}

HINTS = {  # what each check asks, for the hint after its verdict
    "no stall": "every send has its receive on the neighbour, in an order both ranks reach",
    "messages": "what a rank sends, in which order, is what 1F1B sends: a neighbour checks each message",
    "loss": "the last stage's loss, micro-batch by micro-batch, divided by m",
    "gradients": "each backward on its own micro-batch, with the gradient that arrived for it",
    "memory": "p - s - 1 forwards in the warm-up, then one forward and one backward in turn",
    "buffers": "fresh buffers of rank.shape and rank.dtype, waited for before use, untouched until sent",
}


class PartialCredit(CheckFailed):
    """A check passed in some of its cases: an AssertionError with its verdict (a failed test, wherever
    nothing reads `points`) that the grader turns into `points` of partial credit and the verdict line."""

    def __init__(self, message: str, points: float):
        super().__init__(message)
        self.points = points


PartialCredit.__name__ = PartialCredit.__qualname__ = "AssertionError"


def failed(cases: Sequence[RankCase], runs: Sequence, check: str) -> tuple[str | None, float]:
    """The verdict of the first case that fails `check` (None: it passed in every case it applies to),
    and the share of the cases it applies to that pass it."""
    verdicts = [case_verdicts(case, run) for case, run in zip(cases, runs)]  # noqa: B905  the first runs
    applied = [v[check] for v in verdicts if check in v]
    first = next((v for v in applied if v is not None), None)
    return first, (sum(v is None for v in applied) / len(applied) if applied else 1.0)


def _not_written(runs: Sequence) -> bool:
    return any(run.error is not None and "NotImplementedError" in run.error for run in runs)


def rank_check(
    fn: Callable, check: str, cases: Sequence[RankCase] = VISIBLE_RUNS, stall_s: float = 10.0,
    peers: str | Path | None = None, points: float | None = None,
) -> None:  # fmt: skip
    """Fail (AssertionError) with `check`'s verdict unless `fn` passes it on every case; with `points`,
    a check passed in some of its cases raises PartialCredit: that share of the points."""
    __tracebackhide__ = True  # IPython and pytest hide this frame: the message is what matters
    if check not in CHECKS:
        raise ValueError(f"check must be one of {CHECKS}, got {check!r}")
    runs = rank_runs(fn, cases, stall_s, peers)
    if _not_written(runs):
        fail(
            f"one_f_one_b is {NOT_WRITTEN}: replace `raise NotImplementedError()` in its cell with your "
            "code, run that cell, then this one."
        )
    verdict, share = failed(cases, runs, check)
    if verdict is None:
        return
    message = f"{check}: {verdict} Hint: {HINTS[check]}."
    if points is not None and share > 0:
        raise PartialCredit(capped(message), round(points * share, 2))
    fail(message)
