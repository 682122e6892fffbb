"""A student's `git pull` of a later course commit, into a clone whose lab/ they have used: no conflict,
no tracked file changed by their work, and `make lab-refresh` (kit.build(refresh=True)) brings the new
lessons in beside what they wrote. All local: a bare repository and two commits in a temporary folder.

Running every lesson changes no tracked file either: `make notebooks` runs every lesson (nbval) and
then compares `git status` with what it was before (the Makefile's `notebooks` target)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from support.paths import REPO_ROOT

from course_assignments import kit

ROOT = REPO_ROOT
LESSONS = ("00_welcome.ipynb", "03_gpipe.ipynb")  # two real lessons: one the student edits, one not
pytestmark = [
    pytest.mark.processes,  # it runs git
    pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed"),
]


def git(cwd: Path, *args: str) -> str:
    """Run git with no user or system configuration but a name to commit with; its stdout."""
    env = os.environ | {
        "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0",
        "GIT_AUTHOR_NAME": "course", "GIT_AUTHOR_EMAIL": "course@example.org",
        "GIT_COMMITTER_NAME": "course", "GIT_COMMITTER_EMAIL": "course@example.org",
    }  # fmt: skip
    done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"git {' '.join(args)} failed in {cwd}:\n{done.stdout}{done.stderr}"
    return done.stdout


def executed(notebook: Path, note: str) -> None:
    """What running a lesson and JupyterLab's autosave leave: outputs in every code cell."""
    nb = json.loads(notebook.read_text())
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": [note]}]
    notebook.write_text(json.dumps(nb, indent=1))


def test_git_pull_of_a_later_commit_into_a_clone_with_a_used_lab_works(tmp_path, monkeypatch):
    # the assignments' student versions come from nbgrader (tests/course/test_make_lab.py); lessons only here
    monkeypatch.setattr(kit, "released", lambda course: {})
    upstream, bare, student = tmp_path / "upstream", tmp_path / "course.git", tmp_path / "student"
    (upstream / "notebooks").mkdir(parents=True)
    shutil.copy(ROOT / ".gitignore", upstream / ".gitignore")  # the course's own: lab/ is ignored
    for name in LESSONS:
        shutil.copy(ROOT / "notebooks" / name, upstream / "notebooks" / name)
    git(upstream, "init", "-q", "-b", "main")
    git(upstream, "add", ".")
    git(upstream, "commit", "-q", "-m", "the course")
    git(tmp_path, "clone", "-q", "--bare", str(upstream), str(bare))
    git(tmp_path, "clone", "-q", str(bare), str(student))

    # the student: `make lab`, runs both lessons, edits one, keeps notes and a file a lesson wrote
    lab = student / "lab"
    assert sorted(kit.build(lab, root=student)) == [f"added {name}" for name in LESSONS]
    for name in LESSONS:
        executed(lab / name, "ran it")
    edited = lab / "03_gpipe.ipynb"
    edited.write_text(edited.read_text().replace("GPipe", "GPipe (mine)", 1))
    (lab / "notes.txt").write_text("my notes")
    (lab / ".ipynb_checkpoints").mkdir()
    (lab / ".ipynb_checkpoints" / "03_gpipe-checkpoint.ipynb").write_text("{}")
    assert git(student, "status", "--porcelain") == ""  # nothing the student did is tracked

    # the course moves on: a fix to lesson 03 and one to lesson 00
    for name in LESSONS:
        lesson = upstream / "notebooks" / name
        lesson.write_text(lesson.read_text().replace("pipeline", "pipeline (fixed)", 1))
    git(upstream, "commit", "-q", "-am", "a later commit")
    git(upstream, "push", "-q", str(bare), "main")

    git(student, "pull", "-q")
    assert git(student, "rev-parse", "HEAD") == git(upstream, "rev-parse", "HEAD")
    assert git(student, "status", "--porcelain") == ""
    lines = kit.build(lab, refresh=True, root=student)  # `make lab-refresh`
    new = {name: (upstream / "notebooks" / name).read_bytes() for name in LESSONS}
    # lesson 00 was only run: its cells are the course's, so the new version replaces it (outputs are
    # the student's to make again); lesson 03 was edited: kept, and the new version lands beside it
    ran_only = [name for name in LESSONS if name != edited.name]
    assert sorted(lines) == sorted(
        [f"updated {name}" for name in ran_only]
        + [f"kept your {edited.name}; the course's new version is {edited.stem}.updated.ipynb"]
    )
    assert "GPipe (mine)" in edited.read_text()
    assert (lab / f"{edited.stem}.updated.ipynb").read_bytes() == new[edited.name]
    assert all((lab / name).read_bytes() == new[name] for name in ran_only)
    assert (lab / "notes.txt").read_text() == "my notes"
    assert git(student, "status", "--porcelain") == ""
