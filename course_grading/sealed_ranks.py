"""The instructor's ranks beside a student's rank (assignment a04c) seal their reports; the grader checks.

The student's rank runs as the same user as the instructor's ranks, in the same sandbox, and could put a
report of its own on the launcher's queue in a neighbour's name. So each instructor's rank signs its
report (HMAC-SHA256 over its rank, the case's nonce, what it observed and a digest of its losses and
gradients, ``course_assignments.rank_checks.digest``) with a key that only it received: the grader makes
one per request (``execute.Editions.ranks``) or per run (``rank_grading``), and the launcher hands it to
the instructor's ranks alone (``spawn``'s `private` arguments, ``rank.private`` in the rank), never to
the fork server's memory nor the student's. ``seal_report`` is the observing function's ``finish`` hook
(``peer_ranks.py``); ``mark_seals`` checks every report on the grader's side, where a report whose seal
does not hold counts as one that saw nothing. The processes themselves are closed to the student's rank
by ``course_grading/rank_guard.py``.
"""

from __future__ import annotations

import hashlib
import hmac
import json


def _message(rank: int, nonce: str, observed: list[str], result_digest: str) -> bytes:
    return json.dumps([int(rank), str(nonce), [str(o) for o in observed], str(result_digest)]).encode()


def seal(key: bytes, rank: int, nonce: str, observed: list[str], result_digest: str) -> str:
    """The HMAC-SHA256 (hex) of an instructor's rank's report."""
    return hmac.new(key, _message(rank, nonce, observed, result_digest), hashlib.sha256).hexdigest()


def sealed(key: bytes, rank: int, nonce: str, observed: list[str], result_digest: str, mac: object) -> bool:
    """Whether `mac` is the seal of this report under `key` (compared in constant time)."""
    if not isinstance(mac, str) or not mac:
        return False
    return hmac.compare_digest(seal(key, rank, nonce, observed, result_digest), mac)


def seal_report(rank, result) -> None:
    """An instructor's rank's ``finish`` hook, in its own process once its report is built: stamp the
    report with its seal, under the (key, nonce) only this rank received (``rank.private``); a run that
    gave it none (a lesson's, not a grader's) leaves the report unstamped."""
    if not rank.private:
        return
    from course_assignments.rank_checks import digest  # in the rank, which has imported it all

    key, nonce = rank.private
    result.stamp = seal(key, result.rank, nonce, result.observed, digest(result.losses, result.grads))


def mark_seals(runs: list, cases: list, key: bytes, nonces: list[str]) -> list:
    """The runs (plain data) with each instructor's rank marked ``sealed``: whether its report's seal
    holds under this request's key and its case's nonce; the worker's word on it, if it sent one, is not
    taken."""
    for run, (_, _, _, student), nonce in zip(runs, cases, nonces):  # noqa: B905  the cases run
        for rank in run.get("ranks", []) if isinstance(run, dict) else []:
            rank["sealed"] = None
            if student is not None and rank.get("rank") != student:
                rank["sealed"] = sealed(key, int(rank["rank"]), nonce, [str(o) for o in rank["observed"]],
                                        str(rank.get("digest", "")), rank.get("seal"))  # fmt: skip
    return runs
