"""The README's first command, for real: `make lab` serves the student's working copy of the course
(course_assignments/kit.py: the lessons and the released assignments, no solution, no hidden test) on
localhost, token required, with the course's kernel from this checkout's .venv, and without nbgrader's
instructor tooling; `make instructor` serves the assignments' course directory with it."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from support.assignments import ASSIGNMENTS, solution_secrets
from support.paths import REPO_ROOT

from course_assignments import kit
from course_assignments.kit import SECRET_MARKERS, build

ROOT = REPO_ROOT
pytestmark = pytest.mark.processes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def status(url: str, wait_s: float = 20.0) -> int:
    """HTTP status of a GET, retrying while the server is still opening its socket."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return response.status
        except urllib.error.HTTPError as err:
            return err.code
        except urllib.error.URLError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


NEEDS_MAKE_AND_VENV = [
    pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed"),
    pytest.mark.skipif(not (ROOT / ".venv" / "bin" / "jupyter").exists(), reason="no .venv: run make setup"),
]


@contextlib.contextmanager
def served(target: str, tmp_path: Path, *make_args: str):
    """Run `make <target>` on a free port; yield (base URL, token) once it prints its URL; stop it after."""
    port = free_port()
    env = os.environ | {"JUPYTER_RUNTIME_DIR": str(tmp_path / f"runtime-{target}"), "BROWSER": "true"}
    env["PYTHONPATH"] = (
        f"{ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}"  # this checkout's course_lib builds the kit
    )
    lab = subprocess.Popen(
        ["make", "-s", target, f"LAB_ARGS=--port={port} --no-browser --ServerApp.port_retries=0", *make_args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # so the whole group (make and jupyter) can be stopped
    )
    try:
        token, deadline, seen = None, time.monotonic() + 180, []  # a first `make lab` builds the kit
        while token is None and time.monotonic() < deadline and lab.poll() is None:
            line = lab.stdout.readline()
            seen.append(line)
            match = re.search(rf"http://127\.0\.0\.1:{port}/lab\?token=(\w+)", line)
            token = match and match.group(1)
        assert token, f"make {target} printed no token URL:\n" + "".join(seen[-20:])
        status(f"http://127.0.0.1:{port}/api/status?token={token}")  # waits until it answers
        yield f"http://127.0.0.1:{port}", token
    finally:
        os.killpg(lab.pid, signal.SIGTERM)
        try:
            lab.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(lab.pid, signal.SIGKILL)
            lab.wait()


def served_files(api: str, token: str, folder: str = "") -> dict[str, str]:
    """{path: text} of every file under `folder` that the server hands out (its own contents API)."""
    with urllib.request.urlopen(f"{api}/{folder}?token={token}&content=1", timeout=10) as response:
        listing = json.load(response)
    files = {}
    for entry in listing["content"]:
        if entry["type"] == "directory":
            files |= served_files(api, token, entry["path"])
        else:
            with urllib.request.urlopen(f"{api}/{entry['path']}?token={token}&content=1", timeout=10) as r:
                content = json.load(r)["content"]
            files[entry["path"]] = content if isinstance(content, str) else notebook_text(content)
    return files


def notebook_text(notebook: dict) -> str:
    """A notebook's cells' sources and outputs, as text (what a reader of it sees)."""
    parts = []
    for cell in notebook["cells"]:
        parts.append(cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"]))
        parts += [json.dumps(out) for out in cell.get("outputs", [])]
    return "\n".join(parts)


def disabled_lab_extensions(base: str, token: str) -> list[str]:
    """The lab extensions JupyterLab's page config switches off (what the browser will not load)."""
    with urllib.request.urlopen(f"{base}/lab?token={token}", timeout=10) as response:
        page = response.read().decode()
    config = re.search(r'<script id="jupyter-config-data" type="application/json">(.*?)</script>', page, re.S)
    return json.loads(config.group(1)).get("disabledExtensions", [])


@NEEDS_MAKE_AND_VENV[0]
@NEEDS_MAKE_AND_VENV[1]
def test_make_lab_serves_the_student_kit_with_token_authentication_and_no_grader(tmp_path):
    kit = tmp_path / "lab"
    with served("lab", tmp_path, f"LAB_DIR={kit}") as (base, token):
        api = f"{base}/api/contents"
        assert status(api) == 403  # authentication is on
        assert status(f"{api}?token={token}") == 200
        files = served_files(api, token)
        assert "00_welcome.ipynb" in files and "08_scaling_out.ipynb" in files
        assignments = sorted(p for p in files if p.startswith("assignments/"))
        assert [p.split("/")[1] for p in assignments] == ASSIGNMENTS  # one student version each
        for path, text in files.items():  # everything the student's lab can open
            assert not any(marker in text for marker in SECRET_MARKERS), path
        for path in assignments:
            assert "raise NotImplementedError()" in files[path], path
            name = path.split("/")[1]
            lines = {line.strip() for line in files[path].splitlines()}
            leaked = [line for line in solution_secrets(name) if line in lines]
            assert not leaked, f"{path} holds solution or hidden-test lines: {leaked[:3]}"
        assert status(f"{api}/..%2Fnotebooks?token={token}") in (400, 404)  # nothing above the kit
        assert_course_kernel_is_this_checkouts(f"{base}/api/kernelspecs?token={token}")
        # students see no nbgrader: no menu or Create Assignment panel, no formgrader behind them
        assert "@jupyter/nbgrader" in disabled_lab_extensions(base, token)
        assert status(f"{base}/formgrader?token={token}") == 404


@NEEDS_MAKE_AND_VENV[0]
@NEEDS_MAKE_AND_VENV[1]
def test_make_instructor_serves_the_course_directory_with_nbgrader(tmp_path):
    with served("instructor", tmp_path) as (base, token):
        assert "@jupyter/nbgrader" not in disabled_lab_extensions(base, token)
        assert status(f"{base}/formgrader?token={token}") == 200
        with urllib.request.urlopen(f"{base}/api/contents?token={token}", timeout=5) as response:
            names = response.read().decode()
        assert "nbgrader_config.py" in names and "source" in names


def assert_course_kernel_is_this_checkouts(kernelspecs_url: str) -> None:
    """The kernel the lessons ask for runs this checkout's .venv python (not another clone's, even if
    an older checkout left a kernel of the same name in ~/.local)."""
    wanted = json.loads((ROOT / "notebooks" / "00_welcome.ipynb").read_text())["metadata"]["kernelspec"]
    with urllib.request.urlopen(kernelspecs_url, timeout=5) as response:
        specs = json.load(response)["kernelspecs"]
    assert wanted["name"] in specs, f"no kernel {wanted['name']!r}; JupyterLab offers {sorted(specs)}"
    spec = specs[wanted["name"]]["spec"]
    assert spec["display_name"] == wanted["display_name"]
    python = Path(spec["argv"][0])
    assert python.name.startswith("python") and python.parent.resolve() == (ROOT / ".venv" / "bin").resolve()


@pytest.fixture(scope="module")
def released_once():
    """The assignments' student versions, made by nbgrader once (kit.released: about 10 s of CPU) for the
    kits these tests build; `make lab` above makes its own."""
    return kit.released()


@pytest.fixture
def kit_from_released_once(released_once, monkeypatch):
    monkeypatch.setattr(kit, "released", lambda course=kit.COURSE: dict(released_once))


def test_the_kit_is_built_once_and_a_refresh_keeps_the_students_work(tmp_path, kit_from_released_once):
    kit = tmp_path / "lab"
    assert build(kit)  # first run: every file added
    assert build(kit) == []  # a second `make lab` changes nothing
    lesson, untouched = kit / "03_gpipe.ipynb", kit / "04_1f1b.ipynb"
    lesson.write_text(lesson.read_text().replace("GPipe", "GPipe (my notes)", 1))  # the student's edit
    untouched.write_text("an older version of the course")
    manifest = json.loads((kit / ".kit.json").read_text())
    manifest["04_1f1b.ipynb"] = hashlib.sha256(untouched.read_bytes()).hexdigest()  # as built back then
    (kit / ".kit.json").write_text(json.dumps(manifest))
    lines = build(kit, refresh=True)
    assert "GPipe (my notes)" in lesson.read_text()  # kept
    assert (kit / "03_gpipe.updated.ipynb").read_bytes() == (
        ROOT / "notebooks" / "03_gpipe.ipynb"
    ).read_bytes()
    assert untouched.read_bytes() == (ROOT / "notebooks" / "04_1f1b.ipynb").read_bytes()  # replaced
    kept = "kept your 03_gpipe.ipynb; the course's new version is 03_gpipe.updated.ipynb"
    assert sorted(lines) == [kept, "updated 04_1f1b.ipynb"]
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(RuntimeError, match="is not a student kit"):
        build(tmp_path / "other")


def test_running_a_lesson_in_the_kit_changes_no_tracked_file(tmp_path, kit_from_released_once):
    """What a student does in `make lab`: run a lesson (as nbconvert would) and save it. The saved
    notebook is the kit's copy; `git status` of the checkout is what it was. The lesson is 04c, which
    writes files (its %%writefile cells) and starts ranks, in 15 s (lesson 00 trains for 20 s more, and
    nbval and the browser tests run it already)."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    import nbformat
    from nbclient import NotebookClient

    def status() -> str:
        return subprocess.run(
            ["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True
        ).stdout

    kit, before = tmp_path / "lab", status()
    build(kit)
    lesson = kit / "04c_write_the_pipeline.ipynb"
    notebook = nbformat.read(lesson, as_version=4)
    NotebookClient(
        notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(kit)}}
    ).execute()
    nbformat.write(notebook, lesson)  # as JupyterLab's autosave would
    assert lesson.read_bytes() != (ROOT / "notebooks" / lesson.name).read_bytes()  # it did run
    assert status() == before
