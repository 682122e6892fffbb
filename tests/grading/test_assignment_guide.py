"""The instructor's guide (notebooks/assignments/README.md, "The instructor's flow"), run as written.

The guide's bash block is read from a fresh clone of this repository and run command by command with
nbgrader's own commands: generate, release, a student (alice) who fetches, works and submits with her own
id, collect, a second student (bob) handed in through an LMS download and zip_collect, autograde (in the
sandbox), feedback generated, released and fetched back by alice, grades exported. The one step a person
does, alice's work, is her copying in the solution after she fetched the assignment.

It runs once, as a normal user: the user running the tests, or, when that is root, a normal user made
here (``useradd``, removed afterwards), so that the sandbox runs bubblewrap the unprivileged way (a user
namespace), as an instructor's does. Root's way (bwrap makes the namespaces, the worker becomes
``nobody``) is what test_assignments.py's autograde runs when the suite is root, so a second run of the
guide as root would check nothing new; it runs as root only where no normal user can be had. Where the
Python environment sits under a folder that user cannot enter (root's home), it is shown to them in a
private mount namespace of this test's own (``unshare -m``), nothing else.
"""

from __future__ import annotations

import contextlib
import csv
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.assignments import sandbox_or_skip
from support.paths import REPO_ROOT

ROOT = REPO_ROOT
pytest.importorskip("nbgrader", reason="nbgrader is in the dev extra: pip install -e '.[dev]'")
pytestmark = [pytest.mark.processes, pytest.mark.timeout(600)]


def guide_commands(readme: Path) -> list[str]:
    """The commands of the guide's bash block, one per entry (comments and blank lines dropped)."""
    text = readme.read_text()
    flow = text[text.index("## The instructor's flow") :]
    block = re.search(r"```bash\n(.*?)```", flow, re.S).group(1)
    return [line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]


INSTRUCTOR = "pipeline-course-instructor"  # the normal user the guide is followed as when the tests are root


def _runs_as(user: str, *command: str) -> bool:
    return subprocess.run(["runuser", "-u", user, "--", *command], capture_output=True).returncode == 0


class NoNormalUser(Exception):
    """Why the guide cannot be followed as a normal user here (it is then followed as root)."""


def _reachable(user: str) -> list[str]:
    """The command prefix that shows `user` this Python environment: none when they can run it, else
    a private mount namespace where the folder they cannot enter (root's 0700 home) is replaced by one
    holding only the environment's folder. Raises NoNormalUser with the reason where neither works."""
    python = str(Path(sys.prefix).resolve() / "bin" / "python")  # the environment's (its link kept)
    interpreter = Path(sys.executable).resolve()  # the file that link ends at
    if _runs_as(user, python, "-c", "import torch, nbgrader"):
        return []
    closed = [a for a in reversed(interpreter.parents) if not _runs_as(user, "test", "-x", str(a))]
    if not closed:
        raise NoNormalUser(f"{user} can enter every folder of {interpreter}, but cannot import torch with it")
    blocked = closed[0]
    kept = blocked / interpreter.relative_to(blocked).parts[0]  # the one folder in it the user needs
    if shutil.which("unshare") is None:
        raise NoNormalUser(f"{user} cannot enter {blocked} (where this Python lives); there is no unshare")
    mount = (
        'set -e; spare="$(mktemp -d)"; mount --rbind "$1" "$spare"; mount -t tmpfs -o mode=755 tmpfs "$2"; '
        'mkdir -p "$1"; mount --rbind "$spare" "$1"; shift 2; exec "$@"'
    )
    prefix = ["unshare", "-m", "--propagation", "private", "bash", "-c", mount, "_", str(kept), str(blocked)]
    probe = subprocess.run([*prefix, "runuser", "-u", user, "--", python, "-c", "import torch, nbgrader"],
                           capture_output=True, text=True)  # fmt: skip
    if probe.returncode:
        why = probe.stderr.strip()[-200:]
        raise NoNormalUser(f"{user} cannot enter {blocked}, nor see it in a mount namespace: {why}")
    return prefix


@contextlib.contextmanager
def instructor(tmp_path: Path) -> Iterator[tuple[Path, list[str], str | None]]:
    """(a folder to work in, the command prefix that runs as the instructor, who to chown it to): this
    user when it is not root, else a normal user made here, else (none can be had) root, saying why."""
    if os.getuid() != 0:
        yield tmp_path, [], None
        return
    if not (shutil.which("useradd") and shutil.which("runuser")):
        print("the guide runs as root: useradd or runuser is missing, no normal user can be made")
        yield tmp_path, [], None
        return
    made = subprocess.run(["id", INSTRUCTOR], capture_output=True).returncode != 0
    if made:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/bash", INSTRUCTOR], check=True)
    # not under pytest's temp folder, which the user cannot enter (root's, mode 0700); removed below
    folder = Path(tempfile.mkdtemp(prefix="guide-", dir=os.environ.get("TMPDIR", "/tmp")))
    try:
        try:
            prefix = _reachable(INSTRUCTOR)
        except NoNormalUser as why:
            print(f"the guide runs as root: {why}")
            prefix = None
        if prefix is None:
            yield tmp_path, [], None
        else:
            yield folder, [*prefix, "runuser", "-u", INSTRUCTOR, "--"], INSTRUCTOR
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        if made:
            subprocess.run(["userdel", INSTRUCTOR], capture_output=True)


def test_the_guide_runs_as_written_from_a_fresh_clone(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    sandbox_or_skip()
    with instructor(tmp_path) as (folder, as_instructor, owner):
        _follow_the_guide(folder, as_instructor, owner)


def _follow_the_guide(tmp_path: Path, as_instructor: list[str], owner: str | None) -> None:
    clone, home = tmp_path / "pipeline-course", tmp_path / "home"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    (clone / ".venv").symlink_to(Path(sys.prefix).resolve())  # `make setup`'s environment, not rebuilt here
    home.mkdir()
    if owner:
        subprocess.run(["chown", "-R", f"{owner}:", str(tmp_path)], check=True)
    commands = guide_commands(clone / "notebooks" / "assignments" / "README.md")
    fetch = next(i for i, c in enumerate(commands) if c.startswith("nbgrader fetch_assignment"))
    solution = clone / "notebooks/assignments/source/a03_bubble/bubble.ipynb"
    commands.insert(fetch + 1, f"cp {solution} a03_bubble/bubble.ipynb  # alice's work")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "NBGRADER"))}
    env |= {"HOME": str(home), "COURSE": str(clone), "PYTHONPATH": str(clone)}
    env |= {f"JUPYTER_{k}_DIR": str(tmp_path / k.lower()) for k in ("CONFIG", "DATA", "RUNTIME")}
    script = "set -e\n" + "".join(f"echo '+ {c[:60]}'\n{c}\n" for c in commands)
    command = [*as_instructor, "env", *(f"{k}={v}" for k, v in env.items()), "bash", "-c", script]
    run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=540)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    course = clone / "notebooks" / "assignments"
    with (course / "grades.csv").open() as f:
        scores = {
            r["student_id"]: float(r["score"]) for r in csv.DictReader(f) if r["assignment"] == "a03_bubble"
        }
    assert scores == {"alice": 10.0, "bob": 0.0}
    assert (course / "exchange" / "pipeline-parallelism" / "inbound").is_dir()  # the exchange lives here
    (page,) = (home / "alice" / "a03_bubble" / "feedback").glob("*/bubble.html")  # alice got hers back
    assert "HIDDEN TESTS" not in page.read_text()
    (bobs,) = (course / "feedback" / "bob" / "a03_bubble").glob("*.html")
    assert "not written yet" in bobs.read_text()
    status = subprocess.run(
        ["git", "-c", "safe.directory=*", "status", "--porcelain"], cwd=clone, capture_output=True, text=True
    ).stdout
    assert status.split("\n")[:-1] == ["?? .venv"]  # everything nbgrader wrote is git-ignored
