"""The wall around a student's code: its own process, in bubblewrap, with bounded time, memory and tasks.

``Sandbox`` starts ``course_grading.worker`` under Debian's ``bwrap`` (bubblewrap): a new mount, network,
PID, IPC and UTS namespace whose file system holds only the system's read-only /usr (and /etc), the Python
environment and ``course_lib`` / ``course_assignments`` / ``data`` (read-only) and an empty /tmp. The
course directory (sources, gradebook.db, other students' submissions) is not there, and there is no
network but a loopback of its own. Limits (setrlimit): address space, CPU seconds, processes (as
``nobody`` when the grader is root), file size, open files; and a wall clock per request, past which the
sandbox is killed and started again with its cells replayed, so one runaway function fails only its own
test; and a wall clock for the whole submission (``Budget``), shared by its sandboxes, past which nothing
of the student's runs any more (CPU seconds do not bound a ``sleep``).

    with Sandbox() as box:
        box.exec("def f(x):\\n    return 2 * x")
        box.call("f", (21,))              # 42, as plain data
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import resource
import select
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from course_grading import plain
from course_grading.names import STUDENT_PACKAGES
from course_grading.sandbox_output import Output

ROOT = Path(__file__).resolve().parents[1]
GiB = 2**30
NOBODY = 65534


@dataclass(frozen=True)
class Limits:
    memory_bytes: int = 6 * GiB  # address space: torch alone maps about 1.5 GiB
    cpu_s: int = 900  # CPU seconds over the sandbox's whole life
    processes: int = 64  # tasks the sandbox's user may have (threads count)
    file_bytes: int = 64 * 2**20  # the largest file it may write (its /tmp is memory)
    open_files: int = 256
    request_s: float = 120.0  # wall clock for one cell or one call
    output_chars: int = 10_000  # what one cell's printed output may show; the rest is counted, not kept


@dataclass
class Budget:
    """The wall-clock seconds one submission's code may run in all, over all its sandboxes."""

    seconds: float = 600.0
    started: float = field(default_factory=time.monotonic)

    def left(self) -> float:
        return self.seconds - (time.monotonic() - self.started)

    def message(self) -> str:
        return (
            f"grading stopped running your code here: your notebook used up its {self.seconds:g} s of "
            "grading time (wall clock, all cells and graded calls together); what was not run scores 0"
        )


class StudentError(Exception):
    """The student's code failed (raised, ran too long, ended its process, or returned what cannot cross)."""

    def __init__(self, ename: str, evalue: str, traceback: str = "") -> None:
        super().__init__(evalue)
        self.ename, self.evalue, self.traceback = ename, evalue, traceback


def unavailable() -> str | None:
    """Why no sandbox can be made here (one line), or None when bubblewrap works."""
    if platform.system() != "Linux":
        return f"the grading sandbox needs Linux (bubblewrap); this is {platform.system()}"
    if shutil.which("bwrap") is None:
        return "bubblewrap is not installed: run course_grading/ensure_sandbox.sh (as root)"
    probe = subprocess.run(
        [*bwrap_argv(), "true"], capture_output=True, text=True, preexec_fn=_limit(Limits()), timeout=30
    )
    if probe.returncode:
        return f"bubblewrap cannot make a sandbox here: {probe.stderr.strip()[:200]}"
    return None


def _environment_paths() -> list[Path]:
    """What Python needs, read-only: the interpreter's prefix and the virtual environment's."""
    paths = {Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve()}
    paths.add(Path(sys.executable).resolve().parent.parent)
    return sorted(p for p in paths if not str(p).startswith("/usr"))


def python() -> Path:
    """This environment's interpreter by a path the sandbox has (a symlinked .venv resolved)."""
    inside = Path(sys.prefix).resolve() / "bin" / Path(sys.executable).name
    return inside if inside.exists() else Path(sys.executable).resolve()


# What the sandbox holds of the grader: the worker and what it imports, and the instructor's observing
# ranks that run beside a student's rank function (a04c), with what seals their reports and closes their
# run (its fork server imports closed_server first); nothing else of course_grading
WORKER_FILES = ("__init__.py", "worker.py", "plain.py", "names.py", "peer_ranks.py", "sealed_ranks.py",
                "rank_guard.py", "closed_server.py")  # fmt: skip
GRADER = Path(__file__).resolve().parent


def bwrap_argv(library: Path | None = None) -> list[str]:
    """bubblewrap's command line: a file system of read-only system files, the course's library and an
    empty /tmp; no network, no view of other processes; killed with the grader. As root, bwrap makes the
    namespaces itself and the worker then becomes ``nobody`` (setpriv, no capabilities left); as anyone
    else, bwrap makes a user namespace too."""
    root = os.getuid() == 0
    unshare = ["--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    argv = ["bwrap", *(unshare if root else ["--unshare-all", "--cap-drop", "ALL"])]
    argv += ["--die-with-parent", "--new-session"]
    argv += ["--ro-bind", "/usr", "/usr", "--proc", "/proc", "--dev", "/dev"]
    argv += ["--perms", "1777", "--tmpfs", "/tmp"]
    # its own /dev/shm: multiprocessing's locks and queues live there (a04c's ranks are processes)
    argv += ["--perms", "1777", "--tmpfs", "/dev/shm"]
    for name in ("bin", "lib", "lib64", "sbin"):  # /bin -> /usr/bin on Debian: the links, kept
        path = Path("/") / name
        if path.is_symlink():
            argv += ["--symlink", os.readlink(path), str(path)]
        elif path.exists():
            argv += ["--ro-bind", str(path), str(path)]
    etc = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "nsswitch.conf", "passwd", "group")
    for name in etc:
        if (Path("/etc") / name).exists():
            argv += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    # the library (the grading edition, when given, in its place) and its data files, not notebooks/ (the
    # course directory); of the grader, the worker's files only
    worker = [GRADER / name for name in WORKER_FILES]
    packages = library.parent if library else ROOT  # the edition holds course_assignments beside course_lib
    bound = {**{p: p for p in _environment_paths()},
             **{ROOT / s.name: packages / s.name for s in STUDENT_PACKAGES},
             ROOT / "data": ROOT / "data", **{p: p for p in worker}}  # fmt: skip
    parents = sorted({str(a) for p in bound for a in p.parents if str(a) != "/"}, key=len)
    for parent in parents:  # made here, traversable by nobody (bwrap's own would be root's, mode 0700)
        argv += ["--perms", "0755", "--dir", parent]
    for inside, outside in bound.items():
        argv += ["--ro-bind", str(outside), str(inside)]
    argv += ["--chdir", "/tmp", "--setenv", "HOME", "/tmp", "--setenv", "MPLCONFIGDIR", "/tmp"]
    argv += ["--setenv", "PYTHONPATH", str(ROOT), "--setenv", "MPLBACKEND", "Agg", "--"]
    if root:  # root is exempt from the process limit and may read anything: the worker is nobody
        argv += ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--no-new-privs"]
        argv += ["--inh-caps=-all", "--bounding-set=-all"]
    return argv


def _own_processes() -> int:
    """How many tasks this user has now (the process limit counts them all, not only the sandbox's)."""
    uid, count = os.getuid(), 0
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and entry.stat().st_uid == uid:
                count += len(list((entry / "task").iterdir()))
        except OSError:
            continue
    return count


def _limit(limits: Limits):
    """The function the child runs before bwrap: the limits, which the worker inherits."""
    processes = limits.processes + (0 if os.getuid() == 0 else _own_processes())

    def apply() -> None:
        for kind, value in (
            (resource.RLIMIT_AS, limits.memory_bytes), (resource.RLIMIT_CPU, limits.cpu_s),
            (resource.RLIMIT_NPROC, processes), (resource.RLIMIT_FSIZE, limits.file_bytes),
            (resource.RLIMIT_NOFILE, limits.open_files), (resource.RLIMIT_CORE, 0),
        ):  # fmt: skip
            resource.setrlimit(kind, (value, value))

    return apply


@dataclass
class Sandbox:
    limits: Limits = field(default_factory=Limits)
    library: Path | None = None  # the grading edition's course_lib to mount, its course_assignments beside it
    contained: bool = True  # False: the same worker process and limits, without bubblewrap
    budget: Budget | None = None  # the submission's wall clock, shared with its other sandboxes
    _cells: list[str] = field(default_factory=list)

    def __enter__(self) -> Sandbox:
        self._start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self, attempts: int = 8) -> None:
        """A fresh worker, started again if it dies before any student code ran: a fork bomb's processes
        count against the process limit until the kernel has ended them, and block a new worker's threads."""
        for attempt in range(attempts):
            try:
                return self._start_once()
            except StudentError:
                if attempt == attempts - 1 or self.spent():
                    raise
                time.sleep(0.25 * 2**attempt)  # 0.25 s, 0.5 s, ... about 30 s in all

    def _start_once(self) -> None:
        reply_read, reply_write = os.pipe()
        # -P: the sandbox's /tmp (the working folder, writable by the student's code) is not on the path
        worker = [str(python()), "-P", "-m", "course_grading.worker", str(reply_write)]
        argv = [*(bwrap_argv(self.library) if self.contained else []), *worker]
        # without bubblewrap nothing is mounted: the edition's folder (which holds its own data/) goes first
        path = str(ROOT) if self.contained or self.library is None else f"{self.library.parent}:{ROOT}"
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": path, "HOME": "/tmp", "MPLBACKEND": "Agg"}
        self._proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
            pass_fds=(reply_write,), preexec_fn=_limit(self.limits), start_new_session=True,
            cwd="/tmp",
        )  # fmt: skip
        os.close(reply_write)
        self._replies = os.fdopen(reply_read, "rb")
        self._output = Output(self._proc.stdout, self.limits.output_chars)
        self._request({"op": "ready"}, timeout_s=max(self.limits.request_s, 120))

    def close(self) -> None:
        proc, self._proc = getattr(self, "_proc", None), None
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError):  # its PID namespace, and all in it, go with it
            os.killpg(proc.pid, 9)
        proc.wait()
        self._replies.close()

    def _request(self, request: dict, timeout_s: float | None = None) -> dict:
        """Send one request; its reply, or StudentError if the sandbox died or ran past the time."""
        timeout_s = self.limits.request_s if timeout_s is None else timeout_s
        over_budget = self.budget is not None and self.budget.left() < timeout_s
        if over_budget:
            timeout_s = max(self.budget.left(), 0.0)  # type: ignore[union-attr]
            if timeout_s <= 0:
                self.close()
                raise StudentError("TimeoutError", self.budget.message())  # type: ignore[union-attr]
        try:
            self._proc.stdin.write((json.dumps(request) + "\n").encode())
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return self._died("had already ended")
        deadline = time.monotonic() + timeout_s
        line = b""
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            output = [self._output.fd] if self._output.open else []  # read, or a full pipe blocks it
            ready, _, _ = select.select([self._replies, *output], [], [], max(left, 0))
            if not ready:
                self.close()
                if over_budget:
                    raise StudentError("TimeoutError", self.budget.message())  # type: ignore[union-attr]
                raise StudentError("TimeoutError", f"ran longer than {timeout_s:g} s and was stopped")
            if self._output.fd in ready:
                self._output.read()
            if self._replies not in ready:
                continue
            chunk = os.read(self._replies.fileno(), 1 << 20)
            if not chunk:
                return self._died("ended")
            line += chunk
        return json.loads(line)

    def _died(self, how: str) -> dict:
        self.close()
        raise StudentError(
            "SystemExit",
            f"the process running your code {how}: os._exit, a crash or a limit (memory, CPU time) ended it",
        )

    def spent(self) -> bool:
        """Whether the submission's wall clock has run out (nothing more of the student's runs)."""
        return self.budget is not None and self.budget.left() <= 0

    def restart(self) -> None:
        """A fresh sandbox with the cells run so far run again (their output and errors ignored); a cell
        that ends the process even then is left out, of this replay and of later ones."""
        self.close()
        self._start()
        kept = []
        # a replayed cell ran within its budget before; on a busy machine a fresh process may take longer to
        # import what it used, so the replay gets the start-up's patience (the submission's wall clock
        # still bounds the whole), and a cell is dropped only when it ends the process again
        replay_s = max(self.limits.request_s, 120)
        for code in self._cells:
            try:
                self._request({"op": "exec", "code": code}, timeout_s=replay_s)
                kept.append(code)
            except StudentError:  # this cell ends the process: a fresh one, with the cells kept so far
                if self.spent():
                    raise
                self._start()
                for done in kept:
                    self._request({"op": "exec", "code": done}, timeout_s=replay_s)
        self._cells = kept
        self._output.take()  # the replay's output is not the next cell's

    def catch_up(self, codes: list[str]) -> None:
        """Run `codes` after the cells this sandbox has run, as a replay (output and errors ignored, a cell
        that ends the process left out): the cells run elsewhere since. Cheaper than ``restart`` with every
        cell, which starts a process and imports torch again; ``restart`` when this one has ended."""
        if self._proc is None:
            self._cells += codes
            return self.restart()
        replay_s = max(self.limits.request_s, 120)  # restart()'s patience
        for code in codes:
            try:
                self._request({"op": "exec", "code": code}, timeout_s=replay_s)
                self._cells.append(code)
            except StudentError:  # this cell ends the process: left out, the kept cells run in a fresh one
                if self.spent():
                    raise
                self.restart()
        self._output.take()  # the replay's output is not the next call's

    def exec(self, code: str) -> tuple[str, dict | None, dict]:
        """Run a cell: (printed output, error or None, {name: description})."""
        try:
            if self._proc is None:
                self.restart()
            reply = self._request({"op": "exec", "code": code})
        except StudentError as err:  # the cell ended the process (or ran out of time): not replayed later
            return self._output.take(), {"ename": err.ename, "evalue": err.evalue, "traceback": ""}, {}
        self._cells.append(code)
        return self._output.take(), reply.get("error"), reply.get("names", {})

    def call(self, name: str, args: tuple = (), kwargs: dict | None = None):
        """The student's `name`(*args, **kwargs): its value, rebuilt here from plain data."""
        if self._proc is None:
            self.restart()
        request = {
            "op": "call",
            "name": name,
            "args": plain.encode(tuple(args)),
            "kwargs": plain.encode(kwargs or {}),
        }
        reply = self._request(request)
        self._output.take()  # what a graded call prints is not shown (it could carry a hidden case)
        if not reply.get("ok"):
            error = reply.get("error") or {}
            raise StudentError(str(error.get("ename", "Error"))[:40], str(error.get("evalue", ""))[:2000])
        return plain.decode(reply["value"])
