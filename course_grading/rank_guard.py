"""The guard of a rank run (assignment a04c) in which a student's rank runs beside the instructor's:
``launcher.spawn(..., guard=RankGuard())`` (the shelf's ``Guard`` hooks), and the worker's own closing.

The student's rank runs as the same user as the instructor's ranks, in the same sandbox. So that what the
instructor's ranks report is theirs (``course_grading/sealed_ranks.py`` seals it):

- ``close_to_peers``: the launcher, its fork server (and so every rank, forked from it), and the grading
  worker become non-dumpable (``prctl(PR_SET_DUMPABLE, 0)``, Linux): a process of the same user without
  CAP_SYS_PTRACE (the sandbox leaves none) can neither ptrace them nor open their /proc/<pid>/mem, environ
  or fd/. A student's rank can undo it only for itself.
- ``GuardedQueue`` / ``guarded_loads``: the launcher reads what the ranks send without running it: only
  the classes a rank's result is made of are unpickled (a crafted pickle would otherwise run code in the
  launcher, which holds the key).
- ``check_forkserver``: the launcher talks only to the fork server it started (the peer of its socket
  must be itself, the listener's creator): another process of the user that took over the socket's
  path would otherwise receive the pickled arguments of the instructor's ranks.
- ``RankGuard.start``: the launcher closed, and its fork server started closed before its first fork
  (``course_grading.closed_server`` is its first preload); a server started open is stopped first, and
  one started closed that has ended is not started again (a rank ended it, and a new one would be open
  to that rank's processes until its first import).
"""

from __future__ import annotations

import ctypes
import io
import multiprocessing.forkserver
import multiprocessing.queues
import os
import pickle
import queue
import socket
import struct
import sys
import types
from typing import Any

PR_SET_DUMPABLE = 4
PR_GET_DUMPABLE = 3
CLOSED_PRELOAD = "course_grading.closed_server"  # a guarded run's fork server imports it first
_CLOSED_SERVER: set[int | None] = set()  # the fork servers this process started closed to their peers


def close_to_peers() -> bool:
    """Make this process non-dumpable (module doc); True where it is now (Linux), False elsewhere."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")
    return libc.prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) == 0


# ---- what the launcher unpickles ----------------------------------------------------------------------
def _storage_from_bytes(data: bytes):
    """torch's own ``_load_from_bytes`` runs a full unpickle; this one torch's weights-only loader."""
    import torch

    return torch.load(io.BytesIO(data), weights_only=True)


ALLOWED = {  # (module, name): what a rank's result and report may hold
    ("collections", "OrderedDict"): None,
    ("torch._utils", "_rebuild_tensor_v2"): None,
    ("torch.storage", "_load_from_bytes"): _storage_from_bytes,
    ("course_lib.shelf.launcher", "Failure"): None,
    ("course_lib.shelf.schedule", "Action"): None,
    ("course_lib.shelf.schedule", "Kind"): None,
    ("course_lib.lessons.own_rank", "RankResult"): None,
    ("course_lib.lessons.own_rank", "MessageSeen"): None,
}


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) not in ALLOWED:
            raise pickle.UnpicklingError(f"a rank sent {module}.{name}: not part of a rank's result")
        return ALLOWED[(module, name)] or super().find_class(module, name)


def guarded_loads(data: bytes):
    """``pickle.loads`` that builds only ALLOWED classes (a rank's result), never calls anything else."""
    return _Unpickler(io.BytesIO(data)).load()


class GuardedQueue(multiprocessing.queues.Queue):
    """The launcher's result queue, read with ``guarded_loads`` (what the ranks put is unchanged)."""

    def __init__(self, ctx) -> None:
        super().__init__(ctx=ctx)

    def get(self, block: bool = True, timeout: float | None = None):
        if not self._rlock.acquire(block, timeout):
            raise queue.Empty
        try:
            if not self._poll(timeout):
                raise queue.Empty
            data = self._recv_bytes()
            self._sem.release()
        finally:
            self._rlock.release()
        return guarded_loads(data)


# ---- the fork server ---------------------------------------------------------------------------------
class _ServerSocket(socket.socket):
    """A client socket that refuses a server it did not start: the listener's creator must be us."""

    def connect(self, address) -> None:
        super().connect(address)
        if self.family == socket.AF_UNIX:
            pid = struct.unpack("3i", self.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[0]
            if pid != os.getpid():
                self.close()
                raise ConnectionRefusedError(f"the fork server's socket is held by process {pid}, not ours")


def check_forkserver() -> None:
    """From now on this process's requests to its fork server check who answers (module doc)."""
    if sys.platform.startswith("linux") and not isinstance(
        multiprocessing.forkserver.socket, types.SimpleNamespace
    ):
        multiprocessing.forkserver.socket = types.SimpleNamespace(**{**vars(socket), "socket": _ServerSocket})


def _alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie does not), without reaping it."""
    try:
        with open(f"/proc/{pid}/stat") as file:
            return file.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return sys.platform != "linux"


class RankGuard:
    """``launcher.spawn``'s guard (the shelf's ``Guard``) for a run with a student's rank in it."""

    def start(self, ctx) -> None:
        """This process closed, its fork server closed from its start and running now (module doc)."""
        from course_lib.shelf.launcher import PRELOAD, DistributedError

        close_to_peers()
        check_forkserver()
        server = multiprocessing.forkserver._forkserver
        running = server._forkserver_pid
        if running is not None and running not in _CLOSED_SERVER:
            server._stop()
        elif running is not None and not _alive(running):
            raise DistributedError("the run's fork server ended (a rank ended it)", None, "fork server", {})
        ctx.set_forkserver_preload([CLOSED_PRELOAD, *PRELOAD])
        server.ensure_running()
        _CLOSED_SERVER.add(server._forkserver_pid)

    def queue(self, ctx) -> Any:
        return GuardedQueue(ctx)

    def loads(self, data: bytes) -> Any:
        return guarded_loads(data)
