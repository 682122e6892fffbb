"""The instructor's ranks beside a student's rank (assignment a04c) are closed to it
(course_grading/rank_guard.py, course_grading/sealed_ranks.py): a report forged on the result queue for
the neighbour earns nothing for the messages check and is named; the neighbour's, the fork server's and
the worker's memory cannot be read or traced from the student's rank in the sandbox, while its own
dumpable child's can; the launcher unpickles only a rank's result; the honest solution's sealed reports
hold, through the sandbox too."""

from __future__ import annotations

import os
import pickle
import secrets
import socket
import subprocess
import sys

import pytest
from support.assignments import sandbox_or_skip
from support.own_rank_lesson import solution_function, written
from support.rank_submissions import cheating

from course_assignments.rank_checks import UNSEALED, RankCase, RunSeen, case_verdicts, digest
from course_grading.execute import Editions
from course_grading.rank_grading import PEER_FUNCTION, PEERS, judged_run
from course_grading.rank_guard import RankGuard, _ServerSocket, guarded_loads
from course_grading.sandbox import Budget, Limits, unavailable
from course_grading.sealed_ranks import mark_seals, seal
from course_lib.lessons.own_rank import run_own_pipeline

NAME = "a04c_write_the_pipeline"


class _Payload:
    def __reduce__(self):
        return (os.system, ("touch /tmp/sealed-ranks-ran",))


def test_the_launcher_unpickles_a_ranks_result_and_nothing_that_runs_code():
    with pytest.raises(pickle.UnpicklingError, match="posix.system"):
        guarded_loads(pickle.dumps(("progress", 0, _Payload())))
    assert guarded_loads(pickle.dumps(("ok", 1, b"x"))) == ("ok", 1, b"x")


def test_a_seal_holds_only_for_its_key_nonce_and_report():
    key, run = secrets.token_bytes(32), {"ranks": [{"rank": 0, "observed": ["activation 1 0 ok"]},
                                                  {"rank": 1, "observed": ["x"]}]}  # fmt: skip
    report = run["ranks"][0]
    report["digest"] = digest([0.5], {})
    report["seal"] = seal(key, 0, "n1", report["observed"], report["digest"])
    assert mark_seals([run], [[2, 2, 2, 1]], key, ["n1"])[0]["ranks"][0]["sealed"] is True
    assert run["ranks"][1]["sealed"] is None  # the student's own rank: nothing to seal
    assert mark_seals([run], [[2, 2, 2, 1]], key, ["n2"])[0]["ranks"][0]["sealed"] is False  # another case
    report["observed"] = ["activation 1 0 ok", "activation 1 1 ok"]
    assert mark_seals([run], [[2, 2, 2, 1]], key, ["n1"])[0]["ranks"][0]["sealed"] is False
    report["seal"] = seal(secrets.token_bytes(32), 0, "n1", report["observed"], report["digest"])
    assert mark_seals([run], [[2, 2, 2, 1]], key, ["n1"])[0]["ranks"][0]["sealed"] is False


@pytest.mark.processes
def test_the_launcher_talks_only_to_a_fork_server_it_started(tmp_path):
    path = str(tmp_path / "server")
    listen = f"import socket, time\ns = socket.socket(socket.AF_UNIX)\ns.bind({path!r}); s.listen()\n"
    other = subprocess.Popen([sys.executable, "-c", listen + "print(1, flush=True); time.sleep(30)"],
                             stdout=subprocess.PIPE)  # fmt: skip
    try:
        other.stdout.readline()
        with (
            _ServerSocket(socket.AF_UNIX) as client,
            pytest.raises(ConnectionRefusedError, match=f"process {other.pid}, not ours"),
        ):
            client.connect(path)
    finally:
        other.kill()
        other.wait()


@pytest.mark.processes
def test_a_report_forged_for_the_neighbour_earns_nothing_for_messages(tmp_path):
    case = RankCase(2, 3, 2, student=0)
    path = written(tmp_path, "forger", cheating("forged report", solution_function()))
    key, peers = secrets.token_bytes(32), {1: (PEERS, PEER_FUNCTION)}
    run = run_own_pipeline(path, case.p, case.m, n_layers=case.n_layers, stall_s=5.0, limit_s=60.0,
                           peers=peers, guard=RankGuard(), private={1: (key, "n")})  # fmt: skip
    assert run.error is None, run.error
    neighbour = run.ranks[1]
    assert neighbour.observed == [f"activation 0 {i} ok" for i in range(case.m + 1)]  # the forgery, read last
    assert neighbour.stamp == ""
    seen = judged_run(run, case, key, "n")
    assert seen.ranks[1].sealed is False and seen.ranks[0].sealed is None
    verdicts = case_verdicts(case, seen)
    assert verdicts["messages"] == UNSEALED.format(rank=1)
    assert verdicts["loss"] == verdicts["gradients"] == UNSEALED.format(rank=1)
    assert verdicts["memory"] is None and verdicts["buffers"] is None  # its own rank's: still judged


@pytest.mark.processes
def test_in_the_sandbox_no_memory_of_the_grader_can_be_read_and_the_honest_seal_holds():
    """One sandbox: the solution, first reading the memory of every process of the run it can see."""
    sandbox_or_skip()
    contained = unavailable() is None
    with Editions(NAME, Limits(request_s=120.0), contained=contained, budget=Budget(600.0),
                  rank_stall_s=5.0) as boxes:  # fmt: skip
        boxes.cells = [("import torch\nimport torch.distributed as dist", True)]
        boxes.cells.append((cheating("memory reader", solution_function().split("\n\n\n", 1)[1]), False))
        (run,) = boxes.ranks("one_f_one_b", [[2, 2, 2, 0]])
    assert run["error"] is None, run["error"]
    student, neighbour = run["ranks"]
    probes = {note.split()[1]: note.split()[2:] for note in student["observed"]}
    assert probes["child"] == ["mem=opened", "ptrace=attached"]  # nothing else stops these calls
    if contained:  # the same user, no capabilities: a non-dumpable process is out of reach
        for name in ("neighbour", "server", "worker"):
            assert probes[name] == ["mem=PermissionError", "ptrace=EPERM"], (name, probes)
    assert neighbour["sealed"] is True and student["sealed"] is None
    verdicts = case_verdicts(RankCase(2, 2, 2, student=0), RunSeen.from_plain(run))
    assert set(verdicts.values()) == {None}, verdicts
