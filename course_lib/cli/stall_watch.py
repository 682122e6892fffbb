"""The engines' stall rule for the ranks torchrun starts: a rank whose peer falls silent says so within the
stall limit, naming itself, what it waits in, the peer and the seconds, and ends.

The course's own launcher watches its ranks' heartbeats from the parent (``course_lib/shelf/launcher.py``):
a rank silent for ``STALL_S`` (a SIGSTOP, a frozen process) fails the run at once, by name. Under torchrun
no parent can: torch's agent sees only processes that exit, and a stopped rank's peers wait out the
process group's timeout (60 s; gloo's receive took 92 s here) before anything is said. So each rank
watches for itself, on a thread (``StallWatch``):

- it beats: every ``BEAT_S`` it adds 1 to its counter in torchrun's own store (the rendezvous's TCPStore at
  MASTER_ADDR:MASTER_PORT, which every rank reaches already);
- it reads its peers' counters: one that has not moved for ``STALL_S`` is silent. A process that runs
  beats, even one computing for minutes (the thread needs the GIL for microseconds, and torch's kernels
  release it); a stopped or frozen one cannot;
- then it says what this rank is doing: the receive it waits in (the rank loop's ``RankComm._wait``,
  read off the main thread's frame: its message and when the wait began), or else the function it is
  in; and it ends the rank with exit code 1, which torch's agent reports, ending the run.

A rank that has finished marks itself done in the store first, so that its silence after the end is no
stall. The rule's numbers are the launcher's: ``STALL_S`` = 10 s.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from datetime import timedelta

import torch.distributed as dist

from course_lib.shelf.launcher import STALL_S
from course_lib.shelf.p2p import RankComm
from course_lib.shelf.schedule import FORWARD

BEAT_S = 0.5  # how often a rank beats and reads its peers'
KEY = "course_lib/stall_watch"


def doing(thread: threading.Thread) -> str:
    """What `thread` is doing, in words: the receive it waits in (message, peer, seconds waited) when it is
    inside ``RankComm._wait``, else the innermost function it is in."""
    frame = sys._current_frames().get(thread.ident or -1)
    innermost = frame
    while frame is not None:
        comm, msg = frame.f_locals.get("self"), frame.f_locals.get("msg")
        if frame.f_code.co_name == "_wait" and isinstance(comm, RankComm) and msg is not None:
            what = "activation" if msg.direction == FORWARD else "gradient"
            waited = comm.now() - frame.f_locals.get("start", comm.now())
            return f"waited {waited:.1f} s in the receive of the {what} of {msg.producer} from rank {msg.src}"
        frame = frame.f_back
    where = innermost.f_code.co_name if innermost is not None else "?"
    return f"was in {where}"


class StallWatch:
    """One rank's heartbeat and its watch over its peers' (module docstring). ``done()`` before the run's
    last barrier; the thread is a daemon and ends with the process."""

    def __init__(self, rank: int, world: int, stall_s: float = STALL_S) -> None:
        self.rank, self.world, self.stall_s = rank, world, stall_s
        host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
        self.store = dist.TCPStore(host, port, is_master=False, timeout=timedelta(seconds=30))
        self.main = threading.current_thread()
        self._done = threading.Event()
        self.started = time.monotonic()
        threading.Thread(target=self._run, name="stall-watch", daemon=True).start()

    def done(self) -> None:
        """This rank has finished: its silence from now on is no stall."""
        self._done.set()
        self.store.set(f"{KEY}/done/{self.rank}", "1")

    def _run(self) -> None:
        seen: dict[int, tuple[int, float]] = {}  # peer -> (its count, when it last moved)
        while not self._done.wait(BEAT_S):
            try:
                self.store.add(f"{KEY}/beat/{self.rank}", 1)
                now = time.monotonic()
                for peer in range(self.world):
                    if peer == self.rank or self.store.check([f"{KEY}/done/{peer}"]):
                        continue
                    # every rank starts its watch as the group forms: a peer that has not beaten since
                    # ours started counts from then (it may have stopped in between)
                    count = self.store.add(f"{KEY}/beat/{peer}", 0)
                    last, moved = seen.get(peer, (count, self.started))
                    seen[peer] = (count, now if count != last else moved)
                    if now - seen[peer][1] > self.stall_s:
                        self._stalled(peer, now - seen[peer][1])
            except Exception:  # noqa: BLE001  (the store is gone: the run is ending; the agent says why)
                return

    def _stalled(self, peer: int, silent_s: float) -> None:
        print(
            f"[rank {self.rank}] stalled: rank {self.rank} {doing(self.main)}; rank {peer}'s process is "
            f"silent (no heartbeat for {silent_s:.0f} s: stopped or frozen), so this run ends",
            file=sys.stderr,
            flush=True,
        )
        os._exit(1)
