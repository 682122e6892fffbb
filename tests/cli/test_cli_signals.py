"""Interrupts and process lifetime through the real command line: Ctrl-C (SIGINT to the process
group, as a terminal sends it), SIGTERM to the distributed launcher alone, a stopped rank (SIGSTOP).
Each run is a new session, so that a test can find every process it started (in /proc, no psutil)
and kill them all in `finally`, whatever happened."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.processes,
    pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from /proc (Linux)"),
]

LOCAL = ["--engine", "local", "--layers", "8", "--steps", "500"]
DISTRIBUTED = ["--engine", "distributed", "--stages", "2", "--layers", "4", "--steps", "1000"]
STOPPED_WITHIN_S = 20  # generous: a signalled run ends in about a second on a quiet machine


def _session_of(pid: int) -> tuple[str, int] | None:
    """(state, session id) of a process, from /proc (None once it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # after the command name, which may hold spaces
    return fields[0], int(fields[3])


def _alive_in_session(sid: int) -> list[int]:
    """Every process of session `sid` that has not ended (zombies have ended)."""
    alive = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (info := _session_of(int(entry.name))) and info[1] == sid:
            if info[0] != "Z":
                alive.append(int(entry.name))
    return alive


class Run:
    """`python -m course_lib train ARGS` in a session of its own; stderr read as it comes."""

    def __init__(self, args: list[str], tmp_path: Path):
        env = os.environ | {"PYTHONPATH": os.pathsep.join(sys.path), "TMPDIR": str(tmp_path)}
        command = [sys.executable, "-m", "course_lib", "train", *args]
        self.tmp_path, self.err = tmp_path, ""
        self.proc = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, start_new_session=True
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while chunk := os.read(self.proc.stderr.fileno(), 4096):
            self.err += chunk.decode(errors="replace")

    def wait_for_steps(self, steps: int, within_s: float = 240) -> None:
        """Until the progress bar shows `steps` steps done (torch's import comes first)."""
        deadline = time.monotonic() + within_s
        while not any(int(n) >= steps for n in re.findall(r"\| *(\d+)/\d+ \[", self.err)):
            assert self.proc.poll() is None, f"the run ended early:\n{self.err}"
            assert time.monotonic() < deadline, f"no progress after {within_s} s:\n{self.err}"
            time.sleep(0.1)

    def rank_pids(self) -> dict[int, int]:
        """Rank -> pid, from the head of the run's log (the launcher writes it once the ranks start)."""
        [log] = self.tmp_path.glob("course_lib-ranks-*.log")
        return {int(r): int(p) for r, p in re.findall(r"^rank (\d+): pid (\d+)$", log.read_text(), re.M)}

    def wait(self, within_s: float = STOPPED_WITHIN_S) -> int:
        code = self.proc.wait(within_s)
        self._reader.join(5)
        return code

    def kill_all(self) -> None:
        for pid in _alive_in_session(self.proc.pid):
            os.kill(pid, signal.SIGKILL)
        self.proc.wait(10)

    def gone_within(self, seconds: float) -> list[int]:
        """The processes of the run still alive after `seconds` (an empty list is the goal)."""
        deadline = time.monotonic() + seconds
        while (alive := _alive_in_session(self.proc.pid)) and time.monotonic() < deadline:
            time.sleep(0.2)
        return alive


def _ends_as_one_interrupted_line(run: Run) -> None:
    code = run.wait()
    assert code == 130, run.err
    assert run.err.strip().splitlines()[-1] == "interrupted", run.err
    assert "Traceback" not in run.err and "Exception ignored" not in run.err, run.err
    assert run.gone_within(STOPPED_WITHIN_S) == [], "processes outlived the run"


@pytest.mark.timeout(600)
@pytest.mark.parametrize("delay_s", [0.0, 0.3, 0.7])  # at different points of a step
def test_ctrl_c_stops_the_local_engine_at_once_every_time(delay_s, tmp_path):
    run = Run(LOCAL, tmp_path)
    try:
        run.wait_for_steps(2)
        time.sleep(delay_s)
        os.killpg(run.proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
        _ends_as_one_interrupted_line(run)
    finally:
        run.kill_all()


@pytest.mark.timeout(600)
def test_ctrl_c_stops_the_distributed_launcher_and_its_ranks(tmp_path):
    run = Run(DISTRIBUTED, tmp_path)
    try:
        run.wait_for_steps(2)
        ranks = run.rank_pids()
        assert sorted(ranks) == [0, 1] and all(_session_of(pid) for pid in ranks.values())
        os.killpg(run.proc.pid, signal.SIGINT)
        _ends_as_one_interrupted_line(run)
        assert not list(tmp_path.glob("course_lib-ranks-*.log")), "an interrupted run keeps no log"
    finally:
        run.kill_all()


@pytest.mark.timeout(600)
def test_sigterm_to_the_distributed_launcher_takes_its_ranks_along(tmp_path):
    run = Run(DISTRIBUTED, tmp_path)
    try:
        run.wait_for_steps(2)
        assert len(run.rank_pids()) == 2
        [log] = tmp_path.glob("course_lib-ranks-*.log")
        port = int(re.search(r"^rendezvous: 127\.0\.0\.1:(\d+)$", log.read_text(), re.M).group(1))
        run.proc.send_signal(signal.SIGTERM)  # the launcher alone, as `kill PID` does
        assert run.wait() == 128 + signal.SIGTERM, run.err  # unwound as Ctrl-C is: the shell's 143
        assert run.err.strip().splitlines()[-1] == "terminated (SIGTERM)", run.err
        assert "Traceback" not in run.err, run.err
        assert run.gone_within(STOPPED_WITHIN_S) == [], "ranks outlived their launcher"
        assert not log.exists(), "a terminated run keeps no log"
        socket.create_server(("127.0.0.1", port)).close()  # nothing holds the rendezvous port
    finally:
        run.kill_all()


@pytest.mark.timeout(600)
def test_a_stopped_rank_is_named_in_seconds_with_the_log(tmp_path):
    run = Run(DISTRIBUTED, tmp_path)  # the default --timeout (60 s) is not what names it
    try:
        run.wait_for_steps(2)
        os.kill(run.rank_pids()[1], signal.SIGSTOP)
        # it ends before the 60 s --timeout could, and the message shows the heartbeat named it
        assert run.wait(within_s=60) == 1, run.err
        line = run.err.strip().splitlines()[-1]
        assert line.startswith("error: rank 1 failed: its process stopped (no heartbeat"), run.err
        [log] = tmp_path.glob("course_lib-ranks-*.log")
        assert line.endswith(f"(ranks' tracebacks: {log})") and "Traceback" not in run.err
        assert run.gone_within(STOPPED_WITHIN_S) == []
    finally:
        run.kill_all()
