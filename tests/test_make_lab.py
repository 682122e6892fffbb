"""The README's first command, for real: `make lab` serves the course on localhost, token required,
with the course's kernel from this checkout's .venv, and without nbgrader's instructor tooling;
`make instructor` serves the assignments' course directory with it."""

from __future__ import annotations

import contextlib
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

ROOT = Path(__file__).resolve().parent.parent
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
def served(target: str, tmp_path: Path):
    """Run `make <target>` on a free port; yield (base URL, token) once it prints its URL; stop it after."""
    port = free_port()
    env = os.environ | {"JUPYTER_RUNTIME_DIR": str(tmp_path / f"runtime-{target}"), "BROWSER": "true"}
    lab = subprocess.Popen(
        ["make", "-s", target, f"LAB_ARGS=--port={port} --no-browser --ServerApp.port_retries=0"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # so the whole group (make and jupyter) can be stopped
    )
    try:
        token, deadline, seen = None, time.monotonic() + 90, []
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


def disabled_lab_extensions(base: str, token: str) -> list[str]:
    """The lab extensions JupyterLab's page config switches off (what the browser will not load)."""
    with urllib.request.urlopen(f"{base}/lab?token={token}", timeout=10) as response:
        page = response.read().decode()
    config = re.search(r'<script id="jupyter-config-data" type="application/json">(.*?)</script>', page, re.S)
    return json.loads(config.group(1)).get("disabledExtensions", [])


@NEEDS_MAKE_AND_VENV[0]
@NEEDS_MAKE_AND_VENV[1]
def test_make_lab_serves_the_notebooks_with_token_authentication_and_no_grader(tmp_path):
    with served("lab", tmp_path) as (base, token):
        api = f"{base}/api/contents"
        assert status(api) == 403  # authentication is on
        assert status(f"{api}?token={token}") == 200
        with urllib.request.urlopen(f"{api}?token={token}", timeout=5) as response:
            names = response.read().decode()
        assert "00_welcome.ipynb" in names and "08_scaling_out.ipynb" in names
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
