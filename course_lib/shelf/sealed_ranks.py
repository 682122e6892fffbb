"""Ranks a grader runs beside a student's rank (assignment a04c): closed to their peers, their reports sealed.

The student's rank runs as the same user as the grader's ranks, in the same sandbox. So that what the
grader's ranks report is theirs:

- ``close_to_peers``: the launcher, its fork server (and so every rank, forked from it), and the grading
  worker become non-dumpable (``prctl(PR_SET_DUMPABLE, 0)``, Linux): a process of the same user without
  CAP_SYS_PTRACE (the sandbox leaves none) can neither ptrace them nor open their /proc/<pid>/mem, environ
  or fd/. A student's rank can undo it only for itself.
- ``seal`` / ``sealed``: a grader's rank signs its report (HMAC-SHA256 over its rank, the run's nonce,
  what it observed and a digest of its losses and gradients) with a key that only it received (the
  launcher's per-rank arguments, never the fork server's memory nor the student's); whoever holds the key
  checks it. A report put on the result queue by another process carries no valid seal.
- ``GuardedQueue`` / ``guarded_loads``: the launcher reads what the ranks send without running it: only
  the classes a rank's result is made of are unpickled (a crafted pickle would otherwise run code in the
  launcher, which holds the key).
- ``check_forkserver``: the launcher talks only to the fork server it started (the peer of its socket
  must be itself, the listener's creator): another process of the user that took over the socket's
  path would otherwise receive the pickled arguments of the grader's ranks.
"""

from __future__ import annotations

import ctypes
import hashlib
import hmac
import io
import json
import multiprocessing.forkserver
import multiprocessing.queues
import os
import pickle
import queue
import socket
import struct
import sys
import types
from collections.abc import Iterable

PR_SET_DUMPABLE = 4
PR_GET_DUMPABLE = 3


def close_to_peers() -> bool:
    """Make this process non-dumpable (module doc); True where it is now (Linux), False elsewhere."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")
    return libc.prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) == 0


# ---- seals ------------------------------------------------------------------------------------------
def digest(losses: Iterable[float], grads: dict) -> str:
    """SHA-256 of a rank's losses and gradients (by name, their bytes): what its seal vouches for too."""
    h = hashlib.sha256(json.dumps([float(x) for x in losses]).encode())
    for name in sorted(grads):
        tensor = grads[name]
        h.update(name.encode() + b"\0")
        if tensor is not None:
            h.update(str(tuple(tensor.shape)).encode() + str(tensor.dtype).encode())
            h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def _message(rank: int, nonce: str, observed: list[str], result_digest: str) -> bytes:
    return json.dumps([int(rank), str(nonce), [str(o) for o in observed], str(result_digest)]).encode()


def seal(key: bytes, rank: int, nonce: str, observed: list[str], result_digest: str) -> str:
    """The HMAC-SHA256 (hex) of a grader's rank's report."""
    return hmac.new(key, _message(rank, nonce, observed, result_digest), hashlib.sha256).hexdigest()


def sealed(key: bytes, rank: int, nonce: str, observed: list[str], result_digest: str, mac: object) -> bool:
    """Whether `mac` is the seal of this report under `key` (compared in constant time)."""
    if not isinstance(mac, str) or not mac:
        return False
    return hmac.compare_digest(seal(key, rank, nonce, observed, result_digest), mac)


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
