"""Issue 42: a distributed run leaves nothing behind, however it ends: normally, by Ctrl-C, or by
``kill -9`` of its launcher (which no handler sees: the ranks notice their launcher is gone, end
within a second, and remove the run's folder, log and the launcher's multiprocessing folder).

"Nothing" is checked where it would pile up: the run's TMPDIR (a folder of the test's own), and the
named semaphores of /dev/shm that the run's processes had mapped (read from /proc/PID/maps, so that
another program's semaphores on a shared machine do not count). torch's compile cache folder,
``torchinductor_USER``, which ``import torch._dynamo`` makes once per user and reuses, is torch's, not
the run's. The run's processes must be gone within 10 s of a kill -9 (the issue's bound; measured
about 1 s), and a Ctrl-C is one line within 25 s (the issue's 5 s with 5x slack; measured ~1.5 s).
"""

from __future__ import annotations

import contextlib
import getpass
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from test_cli_signals import Run, _alive_in_session  # tests/cli is on the path, as pytest puts it

pytestmark = [
    pytest.mark.processes,
    pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads processes from /proc (Linux)"),
]
TORCH_CACHE = f"torchinductor_{getpass.getuser()}"
KILL_9_S = 10 * 5  # a kill -9 of the launcher ends every rank within the 10 s, with 5x slack


def _semaphores_of(pids: list[int]) -> set[str]:
    names: set[str] = set()
    for pid in pids:
        try:
            names |= set(re.findall(r"/dev/shm/(sem\.mp-\S+)", Path(f"/proc/{pid}/maps").read_text()))
        except OSError:  # ended meanwhile
            pass
    return names


@pytest.mark.timeout(600)
@pytest.mark.parametrize("how", ["normal end", "Ctrl-C", "kill -9 of the launcher"])
def test_a_distributed_run_leaves_nothing_behind(how, tmp_path):
    steps = "3" if how == "normal end" else "1000"
    run = Run(["--engine", "distributed", "--stages", "2", "--layers", "2", "--steps", steps], tmp_path)
    semaphores: set[str] = set()

    def sample() -> None:  # every semaphore the run's processes map, until it ends
        while run.proc.poll() is None:
            semaphores.update(_semaphores_of(_alive_in_session(run.proc.pid)))
            time.sleep(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        run.wait_for_steps(1)
        start = time.monotonic()
        if how == "Ctrl-C":
            os.killpg(run.proc.pid, signal.SIGINT)
        elif how == "kill -9 of the launcher":
            run.proc.kill()
        code = run.wait(within_s=240 if how == "normal end" else 25)
        sampler.join(5)
        assert semaphores, "the launcher's queue maps its semaphores: none was seen"
        assert run.gone_within(KILL_9_S) == [], f"processes outlived the run ({how})"
        took_s = time.monotonic() - start
        if how == "Ctrl-C":
            assert code == 130 and run.err.strip().splitlines()[-1] == "interrupted", run.err
            assert "Traceback" not in run.err and took_s < 25
        elif how == "normal end":
            assert code == 0, run.err
        else:
            assert code == -signal.SIGKILL and took_s < KILL_9_S
    finally:
        run.kill_all()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != TORCH_CACHE) == [], how
    assert [s for s in semaphores if Path("/dev/shm", s).exists()] == [], how


def _stat(pid: int) -> list[str] | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2 :].split()  # state, ppid, ...


def _state(pid: int) -> str | None:
    return (_stat(pid) or [None])[0]


def _children(pid: int) -> list[int]:
    return [
        int(p.name)
        for p in Path("/proc").iterdir()
        if p.name.isdigit() and (_stat(int(p.name)) or [0, 0])[1] == str(pid)
    ]


@pytest.mark.timeout(300)
def test_ctrl_c_on_the_torchrun_launcher_is_one_line_and_leaves_no_folder(tmp_path):
    """The course's torchrun launcher (``python -m course_lib.cli.torchrun ... -m course_lib.cli.torchrun``)
    runs torch's agent in a TMPDIR of its own: its torchelastic_* log folder and the ranks' pymp-* ones
    go there, and go with it. Ctrl-C ends it with exit 130 and one line, "interrupted": the ranks leave
    quietly, and the agent's warnings are not shown (measured 1.6 s; 25 s is the issue's 5 s x 5)."""
    env = os.environ | {"PYTHONPATH": os.pathsep.join(sys.path), "TMPDIR": str(tmp_path)}
    flags = ["--layers", "2", "--steps", "100000"]
    command = [
        sys.executable,
        "-m",
        "course_lib.cli.torchrun",
        "--nproc-per-node",
        "2",
        "-m",
        "course_lib.cli.torchrun",
    ]
    ranks: list[int] = []
    semaphores: set[str] = set()
    proc = subprocess.Popen([*command, *flags], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
                            start_new_session=True, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        while len(ranks := _children(proc.pid)) < 2:  # torch's agent starts them in sessions of their own
            assert proc.poll() is None and time.monotonic() < deadline, "no ranks started"
            time.sleep(0.2)
        for _ in range(15):  # 3 s of the run, its semaphores noted
            semaphores |= _semaphores_of([proc.pid, *ranks])
            time.sleep(0.2)
        start = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)
        err = proc.communicate(timeout=25)[1]
        assert time.monotonic() - start < 25 and proc.returncode == 130, err
        assert err.strip() == "interrupted", err  # one line: not the ranks', nor the agent's warnings
        deadline = time.monotonic() + 10
        while (
            alive := [pid for pid in ranks if _state(pid) not in (None, "Z")]
        ) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert alive == [], "ranks outlived the launcher"
    finally:
        for pid in [*_alive_in_session(proc.pid), *ranks]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != TORCH_CACHE) == []
    assert [s for s in semaphores if Path("/dev/shm", s).exists()] == []


@pytest.mark.timeout(300)
def test_kill_9_of_the_torchrun_launcher_ends_its_ranks_and_their_folder(tmp_path):
    """A kill -9 reaches no handler of the launcher's: its ranks notice that their parent is gone, remove
    the run's folder and exit, instead of training on under init (as they did, for an hour, on this
    machine)."""
    env = os.environ | {"PYTHONPATH": os.pathsep.join(sys.path), "TMPDIR": str(tmp_path)}
    launcher = [sys.executable, "-m", "course_lib.cli.torchrun", "--nproc-per-node", "2"]
    command = [*launcher, "-m", "course_lib.cli.torchrun", "--layers", "2", "--steps", "100000"]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=env, start_new_session=True)  # fmt: skip
    ranks: list[int] = []
    semaphores: set[str] = set()
    try:
        deadline = time.monotonic() + 240
        while len(ranks := _children(proc.pid)) < 2:
            assert proc.poll() is None and time.monotonic() < deadline, "no ranks started"
            time.sleep(0.2)
        for _ in range(15):  # 3 s of the run, its semaphores noted
            semaphores |= _semaphores_of([proc.pid, *ranks])
            time.sleep(0.2)
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + KILL_9_S  # measured about 1 s
        while True:
            alive = [pid for pid in ranks if _state(pid) not in (None, "Z")]
            if not alive or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert alive == [], "ranks outlived their launcher"
    finally:
        for pid in ranks:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != TORCH_CACHE) == []
    assert [s for s in semaphores if Path("/dev/shm", s).exists()] == []


@pytest.mark.timeout(300)
def test_a_torchrun_run_that_ends_normally_leaves_nothing(tmp_path):
    """A finished torchrun run leaves no torchelastic_* or pymp-* folder in TMPDIR, and no semaphore of
    its processes in /dev/shm (sampled from their maps while it runs, as for the course's launcher)."""
    env = os.environ | {"PYTHONPATH": os.pathsep.join(sys.path), "TMPDIR": str(tmp_path)}
    launcher = [sys.executable, "-m", "course_lib.cli.torchrun", "--nproc-per-node", "2"]
    command = [*launcher, "-m", "course_lib.cli.torchrun", "--layers", "2", "--steps", "3"]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
                            start_new_session=True, text=True)  # fmt: skip
    semaphores: set[str] = set()
    try:
        while proc.poll() is None:
            semaphores |= _semaphores_of([proc.pid, *_children(proc.pid)])
            time.sleep(0.1)
        assert proc.wait(240) == 0, proc.stderr.read()
    finally:
        for pid in _alive_in_session(proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != TORCH_CACHE) == []
    assert [s for s in semaphores if Path("/dev/shm", s).exists()] == []


def _wait_until_both_beat(ranks: list[int], deadline: float) -> None:
    """Until both ranks' heartbeats are in torchrun's store (read at MASTER_ADDR:MASTER_PORT, from a
    rank's environment): the group is formed and each rank's stall watch is on."""
    from datetime import timedelta

    import torch.distributed as dist

    from course_lib.cli.stall_watch import KEY

    items = Path(f"/proc/{ranks[0]}/environ").read_text().split("\0")
    environ = dict(item.split("=", 1) for item in items if "=" in item)
    store = dist.TCPStore(environ["MASTER_ADDR"], int(environ["MASTER_PORT"]), is_master=False,
                          timeout=timedelta(seconds=30))  # fmt: skip
    while not all(store.add(f"{KEY}/beat/{rank}", 0) > 0 for rank in (0, 1)):
        assert time.monotonic() < deadline, "the ranks never formed their group"
        time.sleep(0.2)


@pytest.mark.timeout(300)
def test_a_stopped_rank_under_torchrun_is_named_within_the_stall_limit(tmp_path):
    """SIGSTOP one of torchrun's ranks: its peer says, within the engines' stall limit (10 s; 50 s here,
    5x), which rank it is, what it waits in, the silent peer and the seconds, and ends (before, it waited
    the group's timeout: 92 s, with nothing said). Continued, the stopped rank ends too: no folder is left."""
    env = os.environ | {"PYTHONPATH": os.pathsep.join(sys.path), "TMPDIR": str(tmp_path)}
    launcher = [sys.executable, "-m", "course_lib.cli.torchrun", "--nproc-per-node", "2"]
    command = [*launcher, "-m", "course_lib.cli.torchrun", "--layers", "2", "--steps", "100000"]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
                            start_new_session=True, text=True)  # fmt: skip
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True).start()
    ranks: list[int] = []
    try:
        deadline = time.monotonic() + 240
        while len(ranks := sorted(_children(proc.pid))) < 2:
            assert proc.poll() is None and time.monotonic() < deadline, "no ranks started"
            time.sleep(0.2)
        _wait_until_both_beat(ranks, deadline)  # past the rendezvous: every rank's watch is on
        stopped = ranks[0]
        os.kill(stopped, signal.SIGSTOP)
        start = time.monotonic()
        said = []
        while not (said := [line for line in lines if "stalled:" in line]) and time.monotonic() - start < 50:
            time.sleep(0.2)
        waited = time.monotonic() - start
        assert said, "".join(lines)
        assert re.search(
            r"\[rank (\d)\] stalled: rank \1 (waited [\d.]+ s in the receive of the (activation|gradient) of "
            r"[FB]\(\S+\) from rank (\d)|was in \w+); rank (\d)'s process is silent \(no heartbeat for 1\d s",
            said[0],
        ), said[0]
        assert waited < 50, waited
        # then the run ends: torch's agent sends the stopped rank SIGTERM (and SIGKILL after its 30 s);
        # continued, as a student's `kill -CONT` would, it takes the SIGTERM at once
        time.sleep(1)
        os.kill(stopped, signal.SIGCONT)
        assert proc.wait(120) != 0
        assert [pid for pid in ranks if _state(pid) not in (None, "Z")] == []
    finally:
        for pid in [*_alive_in_session(proc.pid), *ranks]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != TORCH_CACHE) == []
