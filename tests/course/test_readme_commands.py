"""Every command in README.md's bash blocks runs as written, in a fresh shell after `make lab`.

A fresh shell: PATH without .venv/bin (nothing activated), no torchrun variables. Each command runs in
a folder that links to this checkout's top level, so that files a command writes (``--gantt step.png``)
land there and not in the checkout. The only lines not run are those in SKIPPED, each with its reason.
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest
from support.readme import README, ROOT, bash_commands

# a line starting with one of these is not run here, for the reason given
SKIPPED = {
    "make lab": "opens JupyterLab, a server that runs until stopped",
    "make instructor": "opens JupyterLab, a server that runs until stopped",
    "make test": "runs this whole suite again",
    "make gpu-check": "runs bench/gpu_check.py, for a GPU (tests/course/test_gpu_check.py covers it)",
    "rm -rf .venv": "deletes the environment these tests run in",
    ".venv/bin/python -m pytest": "runs this whole suite again",
    "conda ": "needs conda, which the course does not install",
}
NEEDS_TWO_HOSTS = "HOST0"  # tests/course/test_two_hosts.py runs it on two network namespaces
FRESH_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"




def why_skipped(command: str) -> str | None:
    if NEEDS_TWO_HOSTS in command:
        return "needs two hosts: tests/course/test_two_hosts.py runs it on two network namespaces"
    return next((why for start, why in SKIPPED.items() if command.startswith(start)), None)


COMMANDS = bash_commands(README.read_text())


def test_the_readme_has_commands_and_every_skip_says_why():
    assert len(COMMANDS) >= 10
    ran = [c for c in COMMANDS if why_skipped(c) is None]
    assert any(c.startswith(".venv/bin/torchrun") for c in ran)
    assert all(not c.startswith(("python ", "torchrun ", "pytest ")) for c in ran), "use .venv/bin/..."


@pytest.fixture
def fresh_shell(tmp_path):
    """A folder that looks like the checkout (its top level linked), and a shell's environment with
    nothing activated."""
    for entry in ROOT.iterdir():
        if entry.name != ".git":
            (tmp_path / entry.name).symlink_to(entry)
    drop = ("VIRTUAL_ENV", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
            "MASTER_PORT", "GROUP_RANK", "GROUP_WORLD_SIZE")  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in drop} | {"PATH": FRESH_PATH}
    env["PYTHONPATH"] = str(tmp_path)  # this checkout's course_lib (what `make lab` installs from a clone)
    return tmp_path, env


@pytest.mark.processes
@pytest.mark.timeout(600)
@pytest.mark.parametrize("command", COMMANDS, ids=[c[:70] for c in COMMANDS])
def test_readme_command_runs_as_written(command, fresh_shell):
    reason = why_skipped(command)
    if reason:
        pytest.skip(reason)
    folder, env = fresh_shell
    proc = subprocess.run(["bash", "-c", command], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=540)  # fmt: skip
    tail = f"{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0, f"{command}\nexit {proc.returncode}\n{tail}"
    assert proc.stdout.strip(), f"{command} printed nothing"
    if "--gantt" in command:
        assert (folder / command.split("--gantt ")[1].split()[0]).stat().st_size > 1000


# a command in a lesson's text: python -m ..., python bench/..., torchrun --...
LESSON_COMMAND = re.compile(r"(?<![\w/.-])(python3? (?:-m |bench/)|torchrun --)")


def test_commands_in_the_lessons_text_name_the_course_environment():
    """What a lesson tells the student to type runs from a fresh shell too (from the course's folder)."""
    import json

    bare = []
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] == "markdown":
                text = "".join(cell["source"])
                bare += [f"{path.name}: {m.group(0)}" for m in LESSON_COMMAND.finditer(text)]
    assert not bare, f"write these as .venv/bin/python ... or .venv/bin/torchrun ...: {bare}"
