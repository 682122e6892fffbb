"""Which rank caused a failed run (``course_lib/shelf/launcher.py``'s diagnosis, kept apart so it can be
read and tested without processes)."""

from __future__ import annotations

from typing import NamedTuple


class Failure(NamedTuple):
    """One rank's report of how it failed."""

    peer_loss: bool  # it only saw a peer disappear or stop answering
    message: str
    peer: int | None = None  # the rank it was waiting for, when known


def diagnose(errors: dict[int, Failure], killed: set[int]) -> tuple[int | None, str]:
    """Which rank failed first, and why, from the failures in the order they arrived and the ranks
    the launcher had to kill. A rank that only saw a peer disappear is never the cause."""
    if own := [rank for rank, f in errors.items() if not f.peer_loss]:
        return own[0], errors[own[0]].message
    if waiting := [(rank, f) for rank, f in errors.items() if f.peer is not None]:  # only waits failed
        waiter, f = waiting[0]
        return f.peer, f"it stopped answering; rank {waiter} reported: {f.message}"
    if killed:  # the peers' connections failed and these never stopped: they hung
        return min(killed), "it stopped answering and was killed after the timeout"
    return None, "no rank reported a failure of its own, and not every rank sent its result"
