"""The instructor's guide (notebooks/assignments/README.md, "The instructor's flow"), run as written.

The guide's bash block is read from a fresh clone of this repository and run command by command with
nbgrader's own commands: generate, release, a student (alice) who fetches, works and submits with her own
id, collect, a second student (bob) handed in through an LMS download and zip_collect, autograde (in the
sandbox), feedback generated, released and fetched back by alice, grades exported. The one step a person
does, alice's work, is her copying in the solution after she fetched the assignment.
"""

from __future__ import annotations

import csv
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_assignments_cases import sandbox_or_skip

ROOT = Path(__file__).resolve().parent.parent
pytest.importorskip("nbgrader", reason="nbgrader is in the dev extra: pip install -e '.[dev]'")
pytestmark = [pytest.mark.processes, pytest.mark.timeout(600)]


def guide_commands(readme: Path) -> list[str]:
    """The commands of the guide's bash block, one per entry (comments and blank lines dropped)."""
    text = readme.read_text()
    flow = text[text.index("## The instructor's flow") :]
    block = re.search(r"```bash\n(.*?)```", flow, re.S).group(1)
    return [line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_the_guide_runs_as_written_from_a_fresh_clone(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    sandbox_or_skip()
    clone, home = tmp_path / "pipeline-course", tmp_path / "home"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    (clone / ".venv").symlink_to(Path(sys.prefix).resolve())  # `make setup`'s environment, not rebuilt here
    home.mkdir()
    commands = guide_commands(clone / "notebooks" / "assignments" / "README.md")
    fetch = next(i for i, c in enumerate(commands) if c.startswith("nbgrader fetch_assignment"))
    solution = clone / "notebooks/assignments/source/a03_bubble/bubble.ipynb"
    commands.insert(fetch + 1, f"cp {solution} a03_bubble/bubble.ipynb  # alice's work")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "NBGRADER"))}
    env |= {"HOME": str(home), "COURSE": str(clone), "PYTHONPATH": str(clone)}
    env |= {f"JUPYTER_{k}_DIR": str(tmp_path / k.lower()) for k in ("CONFIG", "DATA", "RUNTIME")}
    script = "set -e\n" + "".join(f"echo '+ {c[:60]}'\n{c}\n" for c in commands)
    run = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=540)
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
        ["git", "status", "--porcelain"], cwd=clone, capture_output=True, text=True
    ).stdout
    assert status.split("\n")[:-1] == ["?? .venv"]  # everything nbgrader wrote is git-ignored
