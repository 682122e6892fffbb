"""The grading sandbox (course_grading/sandbox.py), tried the way a student's code would try it:
each attack runs as a cell or inside a graded call, and must fail only itself, with a message, leaving
the sandbox usable (it is restarted and its cells replayed) and nothing behind."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest
from support.assignments import sandbox_or_skip
from support.paths import REPO_ROOT

from course_grading import sandbox
from course_grading.edition import edition
from course_lib.shelf.schedule import Schedule

ROOT = REPO_ROOT
pytestmark = pytest.mark.processes


@pytest.fixture(scope="module")
def box():
    sandbox_or_skip()
    library = edition({"one_f_one_b": "write 1F1B yourself"})
    with sandbox.Sandbox(sandbox.Limits(request_s=4, output_chars=2000), library=library) as box:
        output, error, names = box.exec("def double(x):\n    return 2 * x\nprint('ready')")
        assert (output, error, names["double"]) == ("ready\n", None, {"kind": "callable"})
        yield box


def failed(box, code: str, *args) -> sandbox.StudentError:
    """Define `attack` in the sandbox, call it, and return the error the call ended with."""
    box.exec(code)
    with pytest.raises(sandbox.StudentError) as info:
        box.call("attack", args)
    assert box.call("double", (21,)) == 42  # and the sandbox still answers (restarted if it had to be)
    return info.value


def test_plain_data_comes_back_and_nothing_else(box):
    box.exec(
        "from course_lib.shelf.schedule import Action, Kind, Schedule\n"
        "def mine(p, m):\n"
        "    return Schedule('x', p, m, [[Action(0, Kind.F, 0), Action(0, Kind.B, 0)]], [0])\n"
        "class Sly(float):\n    def __eq__(self, other):\n        return True\n"
        "def sly():\n    return Sly(0.5)\n"
    )
    schedule = box.call("mine", (1, 1))
    assert type(schedule) is Schedule and str(schedule.orders[0][1]) == "0B0"
    with pytest.raises(sandbox.StudentError, match="cannot be handed to the grader"):
        box.call("sly")


def test_no_network_not_even_the_graders_loopback(box):
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    with server:
        code = (
            "import socket\n"
            f"def attack():\n    return socket.create_connection(('127.0.0.1', {port}), timeout=2).fileno()\n"
        )
        assert "ConnectionRefusedError" in failed(box, code).ename
        outside = (
            "import socket\ndef attack():\n    return socket.create_connection(('1.1.1.1', 80), timeout=2)\n"
        )
        assert failed(box, outside).ename in ("OSError", "gaierror", "TimeoutError")


def test_the_course_directory_and_gradebook_are_not_there(box):
    course = ROOT / "notebooks" / "assignments"
    code = f"import os\ndef attack():\n    return open({str(course / 'gradebook.db')!r}, 'rb').read()\n"
    assert failed(box, code).ename == "FileNotFoundError"
    look = "import os\ndef looked():\n    return [os.path.exists(p) for p in {paths}]\n"
    paths = [str(course / "source"), str(ROOT / "notebooks"), str(ROOT / "tests"), str(ROOT / ".git")]
    box.exec(look.format(paths=paths))
    assert box.call("looked") == [False] * 4
    write = f"def attack():\n    open({str(ROOT / 'course_lib' / 'x.py')!r}, 'w').write('import os')\n"
    assert failed(box, write).ename in ("OSError", "PermissionError")
    assert not (ROOT / "course_lib" / "x.py").exists()


def test_a_fork_bomb_is_stopped_and_leaves_nothing(box):
    box.call("double", (1,))  # the worker the bomb goes off in is running (a restart made a new one)
    (worker,) = workers_started_here()
    bombed = _pid_namespace(worker)  # every process the bomb makes is in the worker's PID namespace
    assert bombed is not None and bombed != _pid_namespace(os.getpid())  # one of its own
    bomb = "import os\ndef attack():\n    while True:\n        try:\n            os.fork()\n"
    bomb += "        except OSError:\n            pass\n"
    assert failed(box, bomb).ename == "TimeoutError"
    # the namespace empties as the kernel ends its processes: waited for, not slept a fixed time
    deadline = time.monotonic() + 30
    while (left := in_namespace(bombed)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert left == [], f"{len(left)} of the bomb's processes outlived it"
    assert len(workers_started_here()) == 1  # the restarted sandbox's worker only


def _stat(pid: str) -> tuple[str, int] | None:
    """(state, parent pid) of a process, from /proc (None once it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # after the command name, which may hold spaces
    return fields[0], int(fields[1])


def _living() -> dict[int, int]:
    """pid -> parent pid of every process on the machine that has not ended (zombies have)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (info := _stat(entry.name)) and info[0] != "Z":
            found[int(entry.name)] = info[1]
    return found


def workers_started_here() -> list[int]:
    """The sandbox workers that descend from this test process: another test run on the machine (or
    pytest-xdist's other worker) grading at the same time has its own, which are not counted."""
    parents, ours, mine = _living(), set(), os.getpid()
    for pid in parents:
        chain, up = [], pid
        while up in parents and up not in ours and up != mine:
            chain.append(up)
            up = parents[up]
        if up == mine or up in ours:
            ours.update(chain)
    return sorted(pid for pid in ours if _is_worker(Path(f"/proc/{pid}")))


def _is_worker(path: Path) -> bool:
    """A Python process running the sandbox's worker (bwrap's own command line names it too)."""
    try:
        argv = (path / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return Path(argv[0].decode()).name.startswith("python") and b"course_grading.worker" in argv


def _pid_namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def in_namespace(namespace: str) -> list[int]:
    """Every living process in PID namespace `namespace`, whoever its parent is now."""
    return [pid for pid in _living() if _pid_namespace(pid) == namespace]


def test_an_endless_loop_is_stopped_after_the_time_limit(box):
    start = time.monotonic()
    error = failed(box, "def attack():\n    while True:\n        pass\n")
    assert error.ename == "TimeoutError" and "ran longer than 4 s" in error.evalue
    assert time.monotonic() - start < 60


def test_ten_gigabytes_are_refused(box):
    assert failed(box, "def attack():\n    return len(bytearray(10 * 2**30))\n").ename == "MemoryError"


def test_exiting_fails_the_call_only(box):
    error = failed(box, "import os\ndef attack():\n    os._exit(0)\n")
    assert error.ename == "SystemExit" and "os._exit" in error.evalue
    error = failed(box, "import sys\ndef attack():\n    sys.exit(3)\n")
    assert error.ename == "SystemExit" and "sys.exit(3) ends the program" in error.evalue


def test_a_flood_of_output_is_capped(box):
    output, error, _ = box.exec("for _ in range(400_000):\n    print('x' * 99)\n")  # 40 MB
    assert error is None and len(output) < 2200
    assert "more characters of output not shown" in output


def test_what_a_cell_prints_comes_back_with_that_cell_and_no_other(box):
    # the grader reads the output while it waits for the reply, so none is late on a busy machine
    for k in range(40):
        assert box.exec(f"print({k})")[0] == f"{k}\n"
    box.exec("print('replayed')")
    box.restart()  # the cells run again, and what they print is not the next cell's
    assert box.exec("print('next')")[0] == "next\n"


def test_a_left_out_answer_is_not_in_the_sandbox_at_all(box):
    """The edition holds a stub where the library's 1F1B was: no copy, no re-import, no reading of its
    source brings it back, and what the registry builds by name refuses too."""
    box.exec(
        "import importlib, inspect, types\nfrom course_lib.shelf import first_schedules as registry\n"
        "def attack(p, m):\n    return registry.build_schedule('1f1b', p, m)\n"
        "def source():\n    name = registry.one_f_one_b.__module__\n"
        "    module = importlib.reload(importlib.import_module(name))\n"
        "    return inspect.getsource(module)\n"
    )
    with pytest.raises(sandbox.StudentError, match="one_f_one_b is not available while grading: write 1F1B"):
        box.call("attack", (2, 2))
    text = box.call("source")
    assert "def one_f_one_b(" in text and "not available while grading" in text
    assert "orders" not in text.split("def one_f_one_b(")[1].split("\ndef ")[0]  # its body is gone


def test_an_old_import_of_the_checks_is_the_editions_checks(box):
    """A cell released before the checks left the library (``from course_lib.grading import ...``) gets the
    edition's course_assignments, mounted where the real one is, and no second copy of it."""
    box.exec("from course_lib.grading import schedule_checks as old\n"
             "import course_assignments.schedule_checks as new\n"
             "def same():\n    return old is new, new.__file__\n")  # fmt: skip
    assert box.call("same") == (True, str(ROOT / "course_assignments" / "schedule_checks.py"))


def test_the_worker_needs_nothing_else_of_the_grader(box):
    box.exec("import pathlib, course_grading\ndef mine():\n    return sorted(p.name for p in "
             "pathlib.Path(course_grading.__file__).parent.glob('*.py'))\n")  # fmt: skip
    assert box.call("mine") == sorted(sandbox.WORKER_FILES)


def test_catching_up_runs_the_new_cells_in_the_same_process_and_leaves_out_one_that_ends_it(box):
    """An edition's sandbox gets the cells run since its last call without a new process (a new one
    imports torch again); a cell that ends the process is left out, and the others still count."""
    box.exec(
        "import os, uuid\nstarted = uuid.uuid4().hex  # run again in a new process\n"
        "def pid():\n    return started\n"
    )  # fmt: skip  (the PID is 2 in every sandbox)
    before = box.call("pid")
    box.catch_up(["counter = 1", "counter += 1"])
    box.exec("def count():\n    return counter\n")
    assert (box.call("pid"), box.call("count")) == (before, 2)
    box.catch_up(["counter += 10", "os._exit(0)", "counter += 100"])
    assert box.call("count") == 112 and box.call("pid") != before  # a fresh process, every kept cell
    assert "os._exit(0)" not in box._cells
