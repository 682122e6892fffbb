"""The one launcher (course_lib/shelf/launcher.py): values back by rank, the failure diagnosis, nothing
listening beyond this machine, and no rank outliving its launcher."""

from __future__ import annotations

import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
import torch.distributed as dist

from course_lib.shelf.launcher import DistributedError, Failure, diagnose, spawn

psutil = pytest.importorskip("psutil")


# ---- the diagnosis, without processes ------------------------------------------------------------
def test_the_first_rank_with_a_failure_of_its_own_is_the_cause():
    errors = {
        2: Failure(True, "RuntimeError: Connection closed by peer"),  # arrived first, but only a peer loss
        1: Failure(False, "ValueError: bad input"),
        0: Failure(False, "RuntimeError: later"),
    }
    assert diagnose(errors, killed=set()) == (1, "ValueError: bad input")


def test_when_only_waits_failed_the_rank_waited_for_is_blamed():
    errors = {0: Failure(True, "PeerFailure: rank 0 waited 8 s for rank 1", peer=1)}
    rank, cause = diagnose(errors, killed={1})
    assert rank == 1 and "stopped answering" in cause and "rank 0 reported" in cause


def test_when_no_peer_is_known_the_rank_that_never_stopped_is_blamed():
    errors = {0: Failure(True, "RuntimeError: Connection reset by peer")}
    assert diagnose(errors, killed={2})[0] == 2
    assert diagnose({}, killed=set())[0] is None


# ---- real processes ------------------------------------------------------------------------------
def _report_and_listen(ctx, base: int):
    """Tell the launcher this rank's number; return a value and where this process listens."""
    ctx.progress(ctx.rank)
    dist.barrier()  # every connection of the group is open now
    sockets = psutil.Process().net_connections("tcp")
    return base + ctx.rank**2, sorted({c.laddr.ip for c in sockets if c.status == psutil.CONN_LISTEN})


def _rank_1_dies_rank_2_hangs(ctx):
    if ctx.rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)  # no report: the launcher only sees the exit
    if ctx.rank == 2:
        time.sleep(600)  # in no collective: it never notices, the launcher has to stop it
    dist.barrier()  # rank 0 waits here, and sees rank 1's connection close


@pytest.mark.processes
@pytest.mark.timeout(180)
def test_values_come_back_by_rank_and_only_loopback_listens():
    seen = []
    values = spawn(_report_and_listen, 3, (10,), timeout_s=60, on_progress=lambda r, v: seen.append((r, v)))
    assert [v for v, _ in values] == [10, 11, 14]
    assert sorted(seen) == [(0, 0), (1, 1), (2, 2)]
    # the rendezvous (rank 0) and gloo's connections (every rank) listen on the loopback alone
    assert values[0][1], "rank 0 should hold the rendezvous socket"
    assert all(ip in ("127.0.0.1", "::1") for _, ips in values for ip in ips), values
    assert multiprocessing.active_children() == []


@pytest.mark.processes
@pytest.mark.timeout(180)
def test_a_rank_that_dies_is_named_its_peer_not_blamed_and_a_hung_rank_stopped(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the run's log goes
    timeout_s = 5.0
    with pytest.raises(DistributedError) as info:
        spawn(_rank_1_dies_rank_2_hangs, 3, timeout_s=timeout_s)
    err = info.value
    assert err.failed_rank == 1 and "SIGKILL" in err.cause and str(err).startswith("rank 1 failed")
    # rank 0 saw the closed connection and stopped by itself; rank 2 was stopped, never before its timeout
    assert "by peer" in err.outcomes[0], err.outcomes
    assert err.stopped_after_s[2] >= timeout_s
    assert err.outcomes[2] == "stopped by the launcher after the timeout"
    assert multiprocessing.active_children() == []
    [log] = tmp_path.glob("course_lib-ranks-*.log")  # kept for the failure, named in the message
    assert str(err).endswith(f"(ranks' tracebacks: {log})") and "rank 2: pid" in log.read_text()


@pytest.mark.processes
@pytest.mark.timeout(180)
def test_a_run_without_a_failure_leaves_no_log(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert spawn(_report_and_listen, 1, (0,), timeout_s=60)[0][0] == 0
    assert list(tmp_path.iterdir()) == []


LAUNCHER = """
import os, sys, time
from course_lib.shelf.launcher import spawn

def hold(ctx, folder):
    with open(os.path.join(folder, f"rank{ctx.rank}.pid"), "w") as f:
        f.write(str(os.getpid()))
    time.sleep(600)

if __name__ == "__main__":
    spawn(hold, 2, (sys.argv[1],), timeout_s=600)
"""


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE  # ended; nobody reaped it yet
    except psutil.NoSuchProcess:
        return True


@pytest.mark.processes
@pytest.mark.timeout(240)
def test_no_rank_outlives_a_launcher_killed_with_sigterm(tmp_path):
    script = tmp_path / "launcher.py"
    script.write_text(textwrap.dedent(LAUNCHER))
    # TMPDIR: the run's log stays there (a launcher killed this way deletes nothing)
    env = os.environ | {"PYTHONPATH": os.pathsep.join(sys.path), "TMPDIR": str(tmp_path)}
    launcher = subprocess.Popen([sys.executable, str(script), str(tmp_path)], env=env)
    pid_files = [tmp_path / f"rank{r}.pid" for r in range(2)]
    try:
        deadline = time.monotonic() + 150  # two processes import torch and join the group first
        while not all(f.exists() and f.read_text() for f in pid_files):
            assert launcher.poll() is None and time.monotonic() < deadline, "the ranks never started"
            time.sleep(0.2)
        ranks = [int(f.read_text()) for f in pid_files]
        launcher.send_signal(signal.SIGTERM)  # Python's default: die at once, no clean-up code runs
        launcher.wait(30)
        deadline = time.monotonic() + 20
        while not all(_gone(pid) for pid in ranks) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert [pid for pid in ranks if not _gone(pid)] == [], "ranks outlived their launcher"
    finally:
        launcher.kill()
        for f in pid_files:  # never leave a rank behind, even when the test fails
            if f.exists() and f.read_text() and not _gone(int(f.read_text())):
                os.kill(int(f.read_text()), signal.SIGKILL)


def test_ranks_that_report_without_pause_do_not_keep_the_launcher_from_its_stop_check():
    """The launcher reads its ranks' messages between looks at the stop button and the heartbeats.
    Ranks of a tiny model report steps more often than every 50 ms; reading "until 50 ms of quiet" then
    never ended, and the stop button took 7-17 s. A queue that is never empty must still be left."""
    from course_lib.shelf.launcher import _Watch

    class EndlessProgress:
        calls = 0

        def get(self, timeout):
            self.calls += 1
            return "progress", 0, self.calls

    heard, results = [], EndlessProgress()
    _Watch(procs=[], beats=[])._drain(results, lambda rank, step: heard.append(step))
    assert heard and heard == list(range(1, results.calls + 1))  # it came back, having passed each one on


def _env_var(ctx, name: str):
    return os.environ.get(name)


@pytest.mark.processes
@pytest.mark.timeout(180)
def test_a_rank_sees_the_environment_of_its_launch_not_of_the_first(monkeypatch):
    """Ranks start from a server (forkserver) that the first launch started with that moment's
    environment; a variable set later (a notebook's NCCL_ or GLOO_ setting) must still reach them."""
    monkeypatch.delenv("COURSE_LIB_PROBE", raising=False)
    assert spawn(_env_var, 1, ("COURSE_LIB_PROBE",), timeout_s=60) == [None]
    monkeypatch.setenv("COURSE_LIB_PROBE", "set after the first launch")
    assert spawn(_env_var, 1, ("COURSE_LIB_PROBE",), timeout_s=60) == ["set after the first launch"]


def _parent_pid(ctx):
    return os.getppid()


@pytest.mark.processes
@pytest.mark.timeout(180)
def test_ranks_fork_from_the_forkserver_and_spawn_where_there_is_none(monkeypatch):
    [parent] = spawn(_parent_pid, 1, timeout_s=60)
    assert parent != os.getpid()  # the forkserver's child, not ours: it imported torch once for all
    monkeypatch.setattr(multiprocessing, "get_all_start_methods", lambda: ["spawn"])  # as on Windows
    assert spawn(_parent_pid, 1, timeout_s=60) == [os.getpid()]  # spawned here, and it still finished


@pytest.mark.processes
@pytest.mark.timeout(180)
def test_ctrl_c_while_the_ranks_start_ends_those_started_and_says_so(tmp_path, monkeypatch):
    # on a busy machine the first start waits seconds for the forkserver to import torch: Ctrl-C may land
    # there, between one rank's start and the next
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    real_start, started = multiprocessing.process.BaseProcess.start, []

    def start_then_interrupt(process):
        if started:
            raise KeyboardInterrupt
        real_start(process)
        started.append(process)

    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", start_then_interrupt)
    with pytest.raises(KeyboardInterrupt, match="all 3 rank processes ended"):
        spawn(_report_and_listen, 3, (0,), timeout_s=60)
    assert not started[0].is_alive() and multiprocessing.active_children() == []
    left = [p.name for p in tmp_path.iterdir() if not p.name.startswith("pymp-")]  # (this process's own)
    assert left == []  # neither the log nor the ranks' TMPDIR


RUN_THEN_WAIT = """
import sys, time
from course_lib.shelf.launcher import spawn

def rank_of(ctx):
    return ctx.rank

if __name__ == "__main__":
    print(spawn(rank_of, 2, timeout_s=60), flush=True)
    if sys.argv[1:] == ["wait"]:
        time.sleep(600)
"""


def _launch(tmp_path, temp: Path, *args: str, session: bool = False) -> subprocess.Popen:
    script = tmp_path / "run_then_wait.py"
    script.write_text(textwrap.dedent(RUN_THEN_WAIT))
    env = os.environ | {"PYTHONPATH": os.pathsep.join(sys.path), "TMPDIR": str(temp)}
    argv = [sys.executable, str(script), *args]
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True, start_new_session=session)


@pytest.mark.processes
@pytest.mark.timeout(180)
@pytest.mark.parametrize("how", ["SIGKILL to the launcher", "SIGTERM to its process group"])
def test_a_launcher_killed_between_runs_leaves_no_multiprocessing_folder(tmp_path, how):
    """A launcher killed after a run: no rank is left to remove its pymp-* folder (the forkserver's
    socket is in it); the forkserver, which ends with its launcher, does. Jupyter's shutdown of a kernel
    slow to exit (one that ran the ranks: 2.5 s) SIGTERMs the kernel's process group, server included.
    The temp folder is a short path: under pytest's long one the launcher uses spawn (no forkserver)."""
    temp = Path(tempfile.mkdtemp(prefix="launch-", dir="/tmp"))
    launcher = _launch(tmp_path, temp, "wait", session=True)
    try:
        assert launcher.stdout.readline().strip() == "[0, 1]"
        assert [p.name for p in temp.glob("pymp-*")] != []  # the launcher's, while it lives
        if how.startswith("SIGTERM"):
            os.killpg(launcher.pid, signal.SIGTERM)
        launcher.kill()
        launcher.wait(30)
        deadline = time.monotonic() + 20
        while list(temp.glob("pymp-*")) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert [p.name for p in temp.glob("pymp-*")] == []
    finally:
        launcher.kill()
        launcher.communicate()
        shutil.rmtree(temp, ignore_errors=True)


RUN_SIGNAL_SERVER_RUN = """
import multiprocessing.forkserver, os, signal, time
from course_lib.shelf.launcher import spawn

def rank_of(ctx):
    return ctx.rank

if __name__ == "__main__":
    print(spawn(rank_of, 2, timeout_s=60), flush=True)
    server = multiprocessing.forkserver._forkserver._forkserver_pid
    os.kill(server, signal.SIGTERM)  # the server alone: its launcher goes on
    while open(f"/proc/{server}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":  # left for the
        time.sleep(0.05)  # launcher to reap, as multiprocessing does when it next starts a server
    print(spawn(rank_of, 2, timeout_s=60), flush=True)
"""


@pytest.mark.processes
@pytest.mark.timeout(180)
def test_a_forkserver_signalled_alone_leaves_its_live_launchers_folder_for_the_next_run(tmp_path):
    """A SIGTERM that reaches the server but not its launcher: the server waits a moment for the launcher
    to go (as it does when the whole group is signalled), then leaves the folder, where the launcher's
    next run starts a new server (multiprocessing keeps the folder's path)."""
    temp = Path(tempfile.mkdtemp(prefix="launch-", dir="/tmp"))
    script = tmp_path / "run_signal_server_run.py"
    script.write_text(textwrap.dedent(RUN_SIGNAL_SERVER_RUN))
    env = os.environ | {"PYTHONPATH": os.pathsep.join(sys.path), "TMPDIR": str(temp)}
    try:
        argv = [sys.executable, str(script)]
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=150)
        runs = done.stdout.split("\n")[:2]
        assert (done.returncode, runs) == (0, ["[0, 1]", "[0, 1]"]), done.stderr[-2000:]
        left = [p.name for p in temp.iterdir() if not p.name.startswith("torchinductor_")]  # torch's
        assert left == []  # the launcher removed its folder at its exit
    finally:
        shutil.rmtree(temp, ignore_errors=True)


@pytest.mark.processes
@pytest.mark.timeout(180)
def test_a_long_temp_folder_path_runs_with_spawn_instead_of_failing_to_bind_the_forkservers_socket(tmp_path):
    """The forkserver's socket lives in the temp folder, and an AF_UNIX path has at most 107 bytes: under
    a long TMPDIR the forkserver failed with "OSError: AF_UNIX path too long"."""
    temp = tmp_path / ("long" * 25)
    temp.mkdir()
    launcher = _launch(tmp_path, temp)
    out, _ = launcher.communicate(timeout=150)
    assert (launcher.returncode, out.strip()) == (0, "[0, 1]")
    assert list(temp.iterdir()) == []
