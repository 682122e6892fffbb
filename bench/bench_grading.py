"""Benchmark the assignments' grading: scores per attempt, autograde time, and what the sandbox blocks.

Not part of the test suite (it autogrades about 120 submissions). Through the real ``nbgrader autograde``
(nbgrader's API, the course's own nbgrader_config.py, a temp copy of the course directory), it prints:

1. a table assignment x attempt -> score out of 10: the solution, the untouched student version, the
   hard-coded submission and every trick of ``tests/grading/test_assignments_tricks.py`` (exec the source
   solution, an input transformer, patched checks, a frame-reading float, the gradebook, a library copy
   made before it is switched off, where the assignment has one; issue 41's: test cells unlocked with the
   checks patched, a pasted test cell, a call of the library's answer, a table of its answers), and on A03
   the solution with ``os._exit(0)`` in one function, ``sys.exit(1)`` in another, and 40 MB of printed output;
2. autograde wall time per submission, median of ``--repeats`` (solution and untouched), and the
   robustness cases' time and feedback size;
3. what the sandbox blocks: network (the grader's loopback and the outside), the gradebook and the
   course directory, a fork bomb, an endless loop, a 10 GB allocation; each attack's error and time.

Run (from the repository root)::

    PYTHONPATH=$PWD .venv/bin/python bench/bench_grading.py
    PYTHONPATH=$PWD .venv/bin/python bench/bench_grading.py --repeats 1 --assignments a03_bubble
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # tests/support: one definition of each submission, trick

from support.assignments import ASSIGNMENTS, HARD_CODED, hard_coded_notebook  # noqa: E402
from support.course_copy import course_copy  # noqa: E402
from support.tricks import ANSWER_TABLE, LIBRARY_CALL, LIBRARY_COPY, ROBUSTNESS, trick  # noqa: E402

from course_grading import sandbox  # noqa: E402

TRICKS = ("exec_source", "transformer", "patch_checks", "frame_reader", "gradebook", "library_copy",
          "unlocked", "pasted_test", "library_call", "answer_table")  # fmt: skip
ONLY_ON = {"library_copy": LIBRARY_COPY, "library_call": LIBRARY_CALL, "answer_table": ANSWER_TABLE}
ROBUST_ON = "a03_bubble"  # the robustness cases replace lines of its solution


def attempts(name: str) -> list[str]:
    found = ["solution", "untouched"] + (["hardcoded"] if name in HARD_CODED else [])
    found += [t for t in TRICKS if t not in ONLY_ON or name in ONLY_ON[t]]
    return found + (list(ROBUSTNESS) if name == ROBUST_ON else [])


def _submit(course: Path, name: str, attempt: str, student: str) -> None:
    folder = course / "submitted" / student / name
    (release,) = (course / "release" / name).glob("*.ipynb")
    if attempt == "hardcoded":
        hard_coded_notebook(course / "release" / name, folder)
        return
    folder.mkdir(parents=True)
    if attempt in ("solution", "untouched"):
        origin = course / ("source" if attempt == "solution" else "release") / name / release.name
        (folder / release.name).write_text(origin.read_text())
    else:
        (folder / release.name).write_text(json.dumps(trick(course, name, attempt)))


def _grade(api, config, course: Path, name: str, attempt: str, student: str) -> tuple[float, float]:
    """(score, seconds) of one submission through nbgrader autograde."""
    from nbgrader.api import Gradebook

    _submit(course, name, attempt, student)
    start = time.perf_counter()
    result = api.autograde(name, student, force=True, create=True)
    seconds = time.perf_counter() - start
    if not result["success"]:  # said, and counted as no score: the other submissions are still graded
        errors = [line for line in result["log"].splitlines() if "ERROR" in line or "Error" in line]
        print(f"  {name} {attempt}: autograde failed: " + " / ".join(errors[-3:])[-600:], flush=True)
        return float("nan"), seconds
    with Gradebook(config.CourseDirectory.db_url) as gb:
        return gb.find_submission(name, student).score, seconds


def grade_everything(names: list[str], repeats: int) -> tuple[dict, dict, dict]:
    """Scores {(name, attempt): score}, seconds {(name, attempt): [s, ...]}, feedback bytes."""
    scores, seconds, feedback = {}, {}, {}
    with tempfile.TemporaryDirectory() as tmp, course_copy(Path(tmp)) as (course, config, api):
        for name in names:
            assert api.generate_assignment(name, force=True)["success"], name
            for attempt in attempts(name):
                runs = repeats if attempt in ("solution", "untouched") else 1
                for i in range(runs):
                    student = f"{attempt.replace('_', '-')}-{i}"
                    score, took = _grade(api, config, course, name, attempt, student)
                    scores.setdefault((name, attempt), score)
                    seconds.setdefault((name, attempt), []).append(took)
                    print(f"  {name} {attempt} #{i}: {score:g} in {took:.1f} s", flush=True)
                if attempt in ROBUSTNESS:
                    student = f"{attempt.replace('_', '-')}-0"
                    assert api.generate_feedback(name, student)["success"]
                    (page,) = (course / "feedback" / student / name).glob("*.html")
                    feedback[(name, attempt)] = page.stat().st_size
                    print(f"  {name} {attempt}: feedback page {page.stat().st_size / 1e3:.0f} kB", flush=True)
    return scores, seconds, feedback


def print_scores(names: list[str], scores: dict) -> None:
    columns = ["solution", "untouched", "hardcoded", *TRICKS, *ROBUSTNESS]
    print("\n| assignment | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    for name in names:
        row = [f"{scores[(name, c)]:g}" if (name, c) in scores else "-" for c in columns]
        print(f"| {name} | " + " | ".join(row) + " |")


def print_times(names: list[str], seconds: dict, feedback: dict) -> None:
    print("\nautograde wall time per submission, median (runs), seconds:")
    for name in names:
        parts = [f"{a} {statistics.median(seconds[(name, a)]):.1f} ({len(seconds[(name, a)])})"
                 for a in ("solution", "untouched")]  # fmt: skip
        print(f"  {name}: " + ", ".join(parts))
    for (name, attempt), size in feedback.items():
        print(f"  {name} {attempt}: {seconds[(name, attempt)][0]:.1f} s, feedback page {size / 1e3:.0f} kB")


ATTACKS = {  # name -> the body of `attack()`, run as a graded call in the sandbox
    "network, the grader's loopback": "import socket\nsocket.create_connection(('127.0.0.1', {port}), 2)",
    "network, the outside (1.1.1.1:80)": "import socket\nsocket.create_connection(('1.1.1.1', 80), 2)",
    "the gradebook (read)": "open({gradebook!r}, 'rb').read()",
    "the gradebook (write)": "open({gradebook!r}, 'ab').write(b'x')",
    "the course directory (list source/)": "import os\nreturn os.listdir({source!r})",
    "the course's library (write)": "open({library!r}, 'w').write('import os')",
    "a fork bomb": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
    "an endless loop": "while True:\n    pass",
    "10 GB allocation": "return len(bytearray(10 * 2**30))",
}


def try_attacks(request_s: float) -> list[tuple[str, str, float]]:
    """(attack, what stopped it, seconds) for each of ATTACKS, in one sandbox (restarted as needed)."""
    course = ROOT / "notebooks" / "assignments"
    gradebook = course / "gradebook.db"
    made = not gradebook.exists()
    gradebook.touch()  # so that "not there" means the sandbox, not a missing file
    server = socket.create_server(("127.0.0.1", 0))
    where = {"port": server.getsockname()[1], "gradebook": str(gradebook), "source": str(course / "source"),
             "library": str(ROOT / "course_lib" / "x.py")}  # fmt: skip
    found = []
    try:
        with server, sandbox.Sandbox(sandbox.Limits(request_s=request_s)) as box:
            for attack, body in ATTACKS.items():
                code = "def attack():\n" + "".join(
                    f"    {line}\n" for line in body.format(**where).splitlines()
                )
                box.exec(code)
                start = time.perf_counter()
                try:
                    value = box.call("attack")
                    stopped = f"NOT BLOCKED: returned {str(value)[:60]}"
                except sandbox.StudentError as err:
                    stopped = f"{err.ename}: {err.evalue[:70]}"
                found.append((attack, stopped, time.perf_counter() - start))
    finally:
        if made:
            gradebook.unlink()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="autogrades of the solution and untouched")
    parser.add_argument("--assignments", nargs="*", default=ASSIGNMENTS, choices=ASSIGNMENTS)
    parser.add_argument("--request-s", type=float, default=10.0, help="the sandbox's wall clock per call")
    parser.add_argument("--skip-attacks", action="store_true", help="only the autograde table and times")
    args = parser.parse_args()
    if reason := sandbox.unavailable():
        raise SystemExit(f"error: no grading sandbox here: {reason}")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; uid {os.getuid()}")
    if not args.skip_attacks:
        print(f"\nwhat the sandbox blocks (a graded call, wall clock limit {args.request_s:g} s):")
        for attack, stopped, seconds in try_attacks(args.request_s):
            print(f"| {attack} | {stopped} | {seconds:.1f} s |")
    scores, seconds, feedback = grade_everything(args.assignments, args.repeats)
    print_scores(args.assignments, scores)
    print_times(args.assignments, seconds, feedback)
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
