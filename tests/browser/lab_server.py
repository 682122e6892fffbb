"""A throw-away JupyterLab server for the browser tests, and where headless Chromium is.

The server is the student's JupyterLab (the venv's, with its installed extensions such as
ipywidgets' front end), but with a test-only setup: its own random token, a free localhost port, and
temporary runtime/config/data dirs (so the user's settings, kernels and workspaces neither leak in nor
get written to), serving a temporary copy of the notebooks (so autosave never touches the repo).
Whatever happens in a test, teardown stops the server *and* its kernels (which run in sessions of
their own) and fails loudly if a process survives.

The browser is Debian's chromium (/usr/bin/chromium) driven by Playwright's Python API; nothing is
downloaded. `tests/browser/ensure_browser.sh` (run by `make test`) installs it when it can; when it
cannot, these tests skip with its one-line reason.

Try it (starts a server, prints its address, stops it):
    .venv/bin/python tests/browser/lab_server.py
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "artifacts" / "browser"
CHROMIUM = Path(os.environ.get("CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SERVER_START_TIMEOUT_S = 60

# Test-only JupyterLab settings, written into the temporary config dir. windowingMode "none" keeps
# every cell in the page (JupyterLab can otherwise leave off-screen cells out of the DOM);
# autoStartDefaultKernel skips the "Select Kernel" dialog; the notification settings stop the
# news/update pop-up from covering what we screenshot.
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {
        "windowingMode": "none",
        "autoStartDefaultKernel": True,
    },
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "checkForUpdates": False,
        "fetchNews": "false",
    },
}


def skip_reason() -> str | None:
    """Why the browser tests cannot run here, in one line (None: they can)."""
    if not (CHROMIUM.is_file() and os.access(CHROMIUM, os.X_OK)):
        written = ARTIFACTS / "skip_reason.txt"  # ensure_browser.sh's own explanation, if it left one
        if written.is_file():
            return written.read_text().strip()
        return f"{CHROMIUM} is missing; run: bash tests/browser/ensure_browser.sh"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright Python package is missing; run: .venv/bin/pip install -e '.[dev]'"
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def descendants(pid: int) -> set[int]:
    """All live processes below `pid` (kernels start their own session, so killpg would miss them)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            # the command name may hold spaces or parentheses: the parent pid comes after the last ')'
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"  # a zombie has exited; only its parent's wait() is missing


@dataclass
class LabServer:
    """A running JupyterLab: where it is, its token, and the folder it serves."""

    process: subprocess.Popen
    port: int
    token: str
    root: Path
    log: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str) -> str:
        return f"{self.base_url}/{path.lstrip('/')}"

    def api(self, path: str, method: str = "GET") -> object:
        request = urllib.request.Request(
            self.url(f"api/{path}"), method=method, headers={"Authorization": f"token {self.token}"}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read()
        return json.loads(body) if body else None

    def log_tail(self, n: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])


def start_lab(workdir: Path) -> LabServer:
    """Start JupyterLab serving `workdir/notebooks` with a test-only config; wait until it answers."""
    root = workdir / "notebooks"
    env = dict(os.environ)
    for name in ("runtime", "config", "data", "ipython"):
        (workdir / name).mkdir()
    env.update(
        JUPYTER_RUNTIME_DIR=str(workdir / "runtime"),
        JUPYTER_CONFIG_DIR=str(workdir / "config"),  # the venv's etc/jupyter still applies
        JUPYTER_DATA_DIR=str(workdir / "data"),  # the venv's share/jupyter (labextensions) still applies
        IPYTHONDIR=str(workdir / "ipython"),
        JUPYTER_PLATFORM_DIRS="0",
        PYTHONUNBUFFERED="1",
    )
    for name, settings in LAB_SETTINGS.items():
        path = workdir / "config" / "lab" / "user-settings" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(settings))
    port, token = free_port(), secrets.token_hex(16)
    log = workdir / "jupyterlab.log"
    cmd = [
        sys.executable, "-m", "jupyterlab",
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        "--LabApp.news_url=None",
    ]  # fmt: skip
    if os.geteuid() == 0:
        cmd.append("--allow-root")  # CI containers run as root; the server still binds 127.0.0.1 only
    with open(log, "wb") as out:
        process = subprocess.Popen(
            cmd, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    server = LabServer(process, port, token, root, log)
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"JupyterLab exited with {process.returncode}:\n{server.log_tail()}")
        try:
            server.api("status")
            return server
        except OSError:
            time.sleep(0.3)
    stop_lab(server)
    raise RuntimeError(f"JupyterLab did not answer within {SERVER_START_TIMEOUT_S} s:\n{server.log_tail()}")


def stop_lab(server: LabServer) -> list[int]:
    """Shut the server and its kernels down (politely, then by force); returns pids that survived."""
    pids = descendants(server.process.pid)
    if server.process.poll() is None:
        try:
            server.api("shutdown", method="POST")  # also shuts its kernels down
            server.process.wait(timeout=15)
        except (OSError, subprocess.TimeoutExpired):
            pass
    pids |= descendants(server.process.pid)
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
    if server.process.poll() is None:
        os.killpg(server.process.pid, signal.SIGKILL)  # the server's own session only
    server.process.wait(timeout=10)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(alive(pid) for pid in pids):
        time.sleep(0.1)
    return sorted(pid for pid in pids if alive(pid))


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(REPO / "notebooks", Path(tmp) / "notebooks")
        server = start_lab(Path(tmp))
        print("JupyterLab answered at", server.url(f"lab?token={server.token}"), server.api("status"))
        print("processes left after stop:", stop_lab(server))
