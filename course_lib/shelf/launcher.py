"""The one launcher for every multi-process run: start, watch, leave nothing (lessons 04c, 08).

It serves the distributed engine, torch.distributed.pipelining, tensor parallelism and the
benchmarks. One idea, read whole: when a rank fails, say which one failed first (``diagnose``).

    from course_lib.shelf.launcher import spawn
    values = spawn(my_target, world=2, args=(job,), timeout_s=60)   # [rank 0's value, rank 1's]

``spawn`` starts `world` processes here, each forked from a server that imported torch once (the
forkserver start method, safe as spawn and fine in a notebook; spawn where a platform lacks it). Each
sees the launcher's os.environ of the moment, joins one process group (gloo, or NCCL with a GPU per
rank) and calls ``target(ctx, *args)`` with a RankContext. What the targets return comes back by rank;
`target` must be a module-level function, `args` must pickle.

Only this machine can join: the rendezvous (TCPStore) listens on 127.0.0.1 alone, on a socket handed to
rank 0; gloo and NCCL use the loopback. Ranks ignore Ctrl-C (the launcher stops them) and exit within a
second of the launcher's death, SIGKILL included. Their stderr goes to one log per run in the temp
folder, headed by the port and every rank's pid; a run that ends without a failed rank deletes it.

Failures are diagnosed alike for every caller. A rank that raises reports it and exits at once; its peers,
blocked in a receive or a collective, see the closed connection and stop too. A hung rank is caught by
the group's timeout (`timeout_s`) in its peers; a stopped (SIGSTOP) or frozen one by its heartbeat,
silent for STALL_S. After the first failure the others get GRACE_S (at most `timeout_s`); the launcher
kills what is left and raises DistributedError naming the rank that failed first (never one that only
saw a peer go) and the log. No rank outlives ``spawn``, nor the forkserver its launcher (the server keeps
course_lib as first imported: restart after editing it), nor the launcher's pymp-* folder the server; a
wait for a failed peer raises PeerFailure."""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.util
import os
import pickle
import queue
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, NamedTuple, Protocol

import torch
import torch.distributed as dist

from course_lib.shelf.errors import check_timeout, require, whole

_PEER_GONE = ("Connection closed by peer", "Connection reset by peer", "Broken pipe")  # gloo: a peer went
# what each rank would import on its own (the optimizer's first construction imports torch._dynamo): the
# forkserver imports them once and never runs a torch op, so it stays single-threaded and safe to fork
# (and course_lib.forkserver_folder, the fault machinery that removes the launcher's pymp-* folder when the
# server ends: a room beside the shelf, named here and never imported by it)
PRELOAD = ["torch", "torch._dynamo", "torch.distributed", "course_lib.shelf.launcher",
           "course_lib.shelf.rank_loop", "course_lib.forkserver_folder"]  # fmt: skip
STALL_S = 10.0  # a rank silent this long (no heartbeat: its process is stopped or frozen) has failed
GRACE_S = 5.0  # after the first failure, the others' time to stop by themselves (peers notice in < 1 s)


class PeerFailure(RuntimeError):
    """Waiting for rank ``peer`` (None: unknown) failed: it died, raised, or did not answer in time."""

    def __init__(self, message: str, peer: int | None = None):
        super().__init__(message)
        self.peer = peer


class DistributedError(RuntimeError):
    """A rank failed: ``failed_rank`` and ``cause`` (which, why), ``outcomes`` (how each rank ended)."""

    def __init__(self, message: str, failed_rank: int | None, cause: str, outcomes: dict[int, str]):
        super().__init__(message)
        self.failed_rank, self.cause, self.outcomes = failed_rank, cause, outcomes
        self.stopped_after_s: dict[int, float] = {}  # how long after the first failure each rank ended


@dataclass(frozen=True)
class RankContext:
    """What a spawned target gets: who it is, its device, and a line back to the launcher."""

    rank: int
    world: int
    device: torch.device
    results: Any = field(repr=False)  # the launcher's queue

    def progress(self, value: object = None) -> None:
        """One unit of work done: the launcher passes (rank, value) to its `on_progress`."""
        self.results.put(("progress", self.rank, value))


@dataclass(frozen=True)
class _Group:
    world: int
    backend: str
    timeout_s: float
    port: int  # of the rendezvous, on 127.0.0.1
    log_path: str  # every rank's stderr
    beats: Any = field(repr=False)  # shared counters, one per rank: its heartbeat
    env: dict[str, str] = field(repr=False)  # the launcher's os.environ now (the forkserver's is older)
    # removed by the ranks if the launcher dies (kill -9) before it can: the ranks' own TMPDIR (what torch
    # and multiprocessing put there), the log, and the launcher's multiprocessing folder (pymp-*)
    leftovers: tuple[str, ...] = ()


def free_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago (for a process group started elsewhere)."""
    with socket.create_server(("127.0.0.1", 0)) as s:
        return s.getsockname()[1]


class Guard(Protocol):
    """``spawn``'s hooks for a run where some ranks run code nobody vouches for (course_grading has one)."""

    def start(self, ctx) -> None: ...  # before the first rank: ready the fork server (closed to them)
    def queue(self, ctx) -> Any: ...  # the ranks' results queue
    def loads(self, data: bytes) -> Any: ...  # a rank's value from its bytes


def spawn(
    target: Callable[..., Any], world: int, args: tuple = (), *, backend: str = "gloo",
    timeout_s: float = 60.0, on_progress: Callable[[int, Any], None] | None = None,
    should_stop: Callable[[], bool] | None = None, private: dict[int, tuple] | None = None,
    guard: Guard | None = None,
) -> list:  # fmt: skip
    """Run ``target(ctx, *args)`` in `world` processes, one process group; return their values by rank.
    `timeout_s`: how long a rank may wait for a silent peer (see the module doc for what else stops).
    `should_stop`, asked about 20 times a second (a widget's Stop button), ends the run as Ctrl-C does:
    every rank's process ends, then KeyboardInterrupt says so. `private`: arguments only rank r gets,
    after `args`. `guard`: its hooks start the server, make the results queue and read each value."""
    world, timeout_s = whole("world", world), check_timeout(timeout_s)  # timeout: the ranks' timedelta
    require(backend in ("gloo", "nccl"), f"backend must be 'gloo' or 'nccl', got {backend!r}")
    ctx = _start_context(guard)
    results, beats = guard.queue(ctx) if guard else ctx.Queue(), ctx.Array("q", world, lock=False)
    log_fd, log = tempfile.mkstemp(prefix="course_lib-ranks-", suffix=".log")
    run_tmp = tempfile.mkdtemp(prefix="course_lib-run-")  # the ranks' TMPDIR, removed when the run ends
    procs: list = []  # filled as the ranks start: Ctrl-C while they start ends those already started
    watch = _Watch(procs, beats, loads=guard.loads if guard else pickle.loads)
    try:
        with socket.create_server(("127.0.0.1", 0)) as listener:  # rank 0's store takes it over; ours closes
            port = listener.getsockname()[1]
            env = dict(os.environ) | {"TMPDIR": run_tmp}
            leftovers = (run_tmp, log, multiprocessing.util.get_temp_dir())
            group = _Group(world, backend, float(timeout_s), port, log, beats, env, leftovers)
            for r in range(world):
                mine = args + (private or {}).get(r, ())
                args_r = (r, group, listener if r == 0 else None, target, mine, results)
                procs.append(ctx.Process(target=_rank_main, args=args_r, daemon=True))
                procs[-1].start()  # (the first start may wait for the forkserver to import torch)
        with os.fdopen(log_fd, "a") as file:
            log_fd = None
            pids = (f"rank {r}: pid {p.pid}" for r, p in enumerate(procs))
            print(f"rendezvous: 127.0.0.1:{group.port}", *pids, sep="\n", file=file)
        watch.run(results, timeout_s, on_progress, should_stop)
    except BaseException as err:  # not a rank's failure: no log to keep
        if log_fd is not None:
            os.close(log_fd)
        os.remove(log)
        if isinstance(err, KeyboardInterrupt):  # Ctrl-C, Kernel > Interrupt or should_stop
            raise KeyboardInterrupt(f"all {world} rank processes ended") from None
        raise
    finally:  # leave no rank behind (before the caller hears of any of the above), nor their files
        watch.kill_leftovers()
        shutil.rmtree(run_tmp, ignore_errors=True)
    if watch.errors or len(watch.values) < world:
        raise watch.error(log)
    os.remove(log)
    return [watch.values[r] for r in range(world)]


def _start_context(guard: Guard | None = None) -> multiprocessing.context.BaseContext:
    """Forkserver with PRELOAD (a rank starts in a fraction of spawn's CPU), else spawn. The preload
    is read when the server starts, once per launching process; it ends with that process."""
    if "forkserver" not in multiprocessing.get_all_start_methods() or not _socket_name_fits():  # Windows
        require(guard is None, "a guarded run needs a fork server (Linux or macOS, a short TMPDIR)")
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    if guard is not None:
        guard.start(ctx)
    return ctx


SOCKET_NAME_MAX = 103  # bytes in an AF_UNIX socket's path: 108 on Linux and 104 on macOS, with its NUL


def _socket_name_fits() -> bool:
    """Whether the forkserver's socket, listener-XXXXXXXX in this process's multiprocessing folder
    (pymp-* in the temp folder), has a path short enough to bind: under a long TMPDIR it has not, and
    the forkserver would fail with "AF_UNIX path too long"; spawn needs no socket. Asked without making
    the folder: one made for nothing would stay where a launcher is killed (kill -9) between runs."""
    folder = multiprocessing.process.current_process()._config.get("tempdir")  # made, if it is
    folder = folder or os.path.join(tempfile.gettempdir(), "pymp-XXXXXXXX")
    return len(os.fsencode(os.path.join(folder, "listener-XXXXXXXX"))) <= SOCKET_NAME_MAX


# ---- inside a spawned rank -------------------------------------------------------------------------
def _rank_main(rank: int, group: _Group, listener, target, args: tuple, results) -> None:
    """Entry point of one spawned process: join the group, run the target, report, never hang."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the launcher's to handle
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the server's handler is not a rank's
    os.environ.clear()  # a student's NCCL_/GLOO_ variables set after the forkserver started count
    os.environ.update(group.env)
    tempfile.tempdir = None  # read TMPDIR again: the run's own folder, not the forkserver's cached one
    os.dup2(os.open(group.log_path, os.O_WRONLY | os.O_APPEND), sys.stderr.fileno())
    _keep_in_touch(group, rank)
    try:
        device = _join(rank, group, listener)
        value = target(RankContext(rank, group.world, device, results), *args)
        dist.barrier()  # leave together: no rank closes its connections while a peer still reads them
        # pickled here, by value: torch's pickler would share tensors by file descriptors that die with us
        results.put(("ok", rank, pickle.dumps(value)))
        dist.destroy_process_group()
    except BaseException as err:  # report, then leave at once: the peers see the closed connection
        results.put(("error", rank, _failure(err)))
        print(f"[rank {rank}] {traceback.format_exc()}", file=sys.stderr)
        results.close()
        results.join_thread()
        os._exit(1)


def _keep_in_touch(group: _Group, rank: int) -> None:
    """A thread that beats twice a second while the launcher lives and exits this process once it is gone:
    its sentinel, a pipe it holds under spawn and forkserver alike, closes however it dies."""
    launcher = multiprocessing.parent_process()

    def watch() -> None:
        while launcher is not None and launcher.is_alive():
            group.beats[rank] += 1
            time.sleep(0.5)
        _remove(group.leftovers)  # the launcher died (kill -9): nobody else will remove them
        os._exit(1)

    threading.Thread(target=watch, name="heartbeat", daemon=True).start()


def _remove(paths: tuple[str, ...]) -> None:
    """Remove files and folders, quietly: every rank tries, the first one to get there wins."""
    for path in paths:
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.remove(path)


def _join(rank: int, group: _Group, listener: socket.socket | None) -> torch.device:
    # gloo and NCCL open their own connections between ranks: over the loopback interface too
    loopback = "lo0" if sys.platform == "darwin" else "lo"
    os.environ.setdefault("GLOO_SOCKET_IFNAME", loopback)
    os.environ.setdefault("NCCL_SOCKET_IFNAME", loopback)
    timeout = timedelta(seconds=group.timeout_s)
    fd = listener.detach() if listener is not None else None
    store = dist.TCPStore("127.0.0.1", group.port, group.world, rank == 0, timeout, master_listen_fd=fd)
    dist.init_process_group(group.backend, store=store, rank=rank, world_size=group.world, timeout=timeout)
    if group.backend == "nccl":
        torch.cuda.set_device(rank)
        return torch.device(f"cuda:{rank}")
    return torch.device("cpu")


def _failure(err: BaseException) -> Failure:
    message, peer = f"{type(err).__name__}: {err}", getattr(err, "peer", None)
    return Failure(isinstance(err, PeerFailure) or any(w in message for w in _PEER_GONE), message, peer)


# ---- in the launcher ---------------------------------------------------------------------------------
@dataclass
class _Watch:
    """What the launcher has heard from its ranks and seen of their processes."""

    procs: list
    beats: Any  # the ranks' heartbeat counters
    values: dict[int, Any] = field(default_factory=dict)
    errors: dict[int, Failure] = field(default_factory=dict)  # in the order they arrived
    exited_at: dict[int, float] = field(default_factory=dict)
    killed: set[int] = field(default_factory=set)
    settled_at: float | None = None  # the first failure, or the last result
    last_beat: dict[int, tuple[int, float]] = field(default_factory=dict)  # rank -> (count, seen at)
    checked_at: float = field(default_factory=time.monotonic)  # the last look at the heartbeats
    loads: Callable[[bytes], Any] = pickle.loads  # a rank's value from its bytes (a guard's reads data only)

    def run(self, results, timeout_s: float, on_progress, should_stop=None) -> None:
        """Collect until every process ended; once settled, give the rest a grace, then stop."""
        while len(self.exited_at) < len(self.procs):
            if should_stop is not None and should_stop():
                raise KeyboardInterrupt("stopped on request")
            now = time.monotonic()
            ended = [r for r, p in enumerate(self.procs) if r not in self.exited_at and not p.is_alive()]
            self.exited_at |= dict.fromkeys(ended, now)
            self._drain(results, on_progress)  # after the exits: what a rank sent before exiting is here
            for rank in self.exited_at.keys() - self.values.keys() - self.errors.keys():
                self.errors[rank] = self._silent_end(rank)
            for rank in self._stalled(now):
                self.errors[rank] = Failure(False, f"its process stopped (no heartbeat for {STALL_S:.0f} s)")
            if self.settled_at is None and (self.errors or len(self.values) == len(self.procs)):
                self.settled_at = now
            if self.settled_at is not None and now - self.settled_at > min(timeout_s, GRACE_S):
                return

    def _stalled(self, now: float) -> list[int]:
        """The running ranks whose heartbeat has not moved for STALL_S (counted from a rank's first).
        After a pause of the launcher too (Ctrl-Z, a sleeping laptop) the count starts again."""
        if now - self.checked_at > 1.0:
            self.last_beat.clear()
        self.checked_at, stalled = now, []
        done = self.exited_at.keys() | self.values.keys() | self.errors.keys()
        for rank in range(len(self.procs)):
            count, seen_at = self.last_beat.get(rank, (0, now))
            if self.beats[rank] != count:
                self.last_beat[rank] = (self.beats[rank], now)
            elif count and now - seen_at > STALL_S and rank not in done:
                stalled.append(rank)
        return stalled

    def _silent_end(self, rank: int) -> Failure:
        code = self.procs[rank].exitcode
        how = "was killed (SIGKILL)" if code == -9 else f"ended with exit code {code}"
        return Failure(False, f"the process {how} without reporting")

    def _drain(self, results, on_progress) -> None:
        until = time.monotonic() + 0.2  # or 50 ms of quiet: fast steps must not starve the stop check
        with contextlib.suppress(queue.Empty):
            while time.monotonic() < until:
                kind, rank, payload = results.get(timeout=0.05)
                if kind == "progress" and on_progress is not None:
                    on_progress(rank, payload)
                elif kind == "ok":
                    self.values[rank] = self.loads(payload)
                elif kind == "error":
                    self.errors[rank] = payload

    def kill_leftovers(self) -> None:
        self.killed = {rank for rank, p in enumerate(self.procs) if p.pid is not None and p.is_alive()}
        for p in (self.procs[rank] for rank in self.killed):
            p.kill()
        for p in self.procs:
            if p.pid is not None:  # started (an interrupt may come between making a process and its start)
                p.join(5)
        self.exited_at |= {r: time.monotonic() for r in self.killed}

    def error(self, log_path: str) -> DistributedError:
        rank, cause = diagnose(self.errors, self.killed)
        cause = " ".join(cause.split())  # one line, however the exception spelled it
        outcomes = {r: "finished" for r in range(len(self.procs))}
        outcomes |= {r: f.message for r, f in self.errors.items()}
        outcomes |= dict.fromkeys(self.killed, "stopped by the launcher after the timeout")
        message = f"rank {rank} failed: {cause} (ranks' tracebacks: {log_path})"
        err = DistributedError(message, rank, cause, outcomes)
        if self.settled_at is not None:
            err.stopped_after_s = {r: max(0.0, t - self.settled_at) for r, t in self.exited_at.items()}
        return err


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
