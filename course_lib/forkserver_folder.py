"""The forkserver's pymp-* folder, removed when the server ends (fault machinery beside the shelf's launcher).

The launcher (``course_lib/shelf/launcher.py``) starts its ranks from a forkserver, whose socket lives in
the launching process's multiprocessing folder, ``pymp-*`` in the temp folder. The launcher removes that
folder when it exits normally. A launcher killed between runs (a Jupyter kernel shut down at once, kill -9)
never does, and no rank is left to do it. The server outlives it by a moment, so the server does it: the
launcher's PRELOAD names this module, the server imports it first thing, and here it registers the
clean-up and turns SIGTERM (Jupyter's way of ending a kernel's process group) into a normal exit.
Imported anywhere else, it does nothing. Tests: tests/test_stopping.py, tests/engines/test_engine_launch.py.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import time


def _remove_launchers_folder() -> None:
    """At the forkserver's exit, which follows its launcher's, however that died: remove the launcher's
    multiprocessing folder, where the server's socket is. A launcher killed between runs (a kernel shut
    down at once, kill -9) has no rank left to remove it, and its own clean-up never ran."""
    if _ENDED_BY_SIGNAL:  # a SIGTERM to the whole group ends the launcher too, a moment after the server
        deadline = time.monotonic() + SIGNAL_WAIT_S
        while not _launcher_gone() and time.monotonic() < deadline:
            time.sleep(0.02)
    if not _launcher_gone():  # stopped by a launcher that goes on, or signalled alone beside one: the
        return  # launcher unlinks its socket itself, and may start a new server in the same folder
    address = getattr(sys.modules["multiprocessing.forkserver"]._forkserver, "_forkserver_address", None)
    folder = os.path.dirname(address) if isinstance(address, str) else ""
    if os.path.basename(folder).startswith("pymp-"):
        # its own socket, then the folder only if that leaves it empty: a process forked from the launcher
        # shares its folder (multiprocessing caches the path), and may have started a server of its own
        with contextlib.suppress(OSError):
            os.unlink(address)
        with contextlib.suppress(OSError):
            os.rmdir(folder)


_LAUNCHER = os.getppid()  # the server's parent: the launcher that started it
PF_EXITING = 0x4  # a task's flag (/proc/<pid>/stat, field 9) from the moment it starts to exit


def _launcher_gone() -> bool:
    """Whether the launcher has died or is dying. The server's alive-pipe closes early in the launcher's
    exit, before it becomes a zombie or the server is handed to another parent, so its exiting flag is
    read too; a launcher that stopped the server on purpose waits for it, alive and not exiting."""
    if os.getppid() != _LAUNCHER:
        return True
    try:
        with open(f"/proc/{_LAUNCHER}/stat") as file:
            fields = file.read().rsplit(")", 1)[1].split()
    except FileNotFoundError:  # reaped already; or no /proc (not Linux): keep the folder there
        return sys.platform == "linux"
    except (OSError, IndexError):  # unreadable: it may live
        return False
    return fields[0] in ("Z", "X") or int(fields[6]) & PF_EXITING != 0


def _in_forkserver() -> bool:
    """Whether this module is being preloaded by the forkserver (its ``main`` is on the stack)."""
    server = sys.modules.get("multiprocessing.forkserver")
    frame = sys._getframe()
    while server is not None and frame is not None and frame.f_code is not server.main.__code__:
        frame = frame.f_back
    return server is not None and frame is not None


_ENDED_BY_SIGNAL = False
SIGNAL_WAIT_S = 2.0  # how long a signalled server waits for its launcher to go before it leaves the folder


def _end_server(signum: int, frame: object) -> None:
    global _ENDED_BY_SIGNAL
    _ENDED_BY_SIGNAL = True
    raise SystemExit(0)  # the server's loop ends, and atexit runs (a signal's default would skip it)


if _in_forkserver():  # its forked ranks end with os._exit: this runs in the server alone
    atexit.register(_remove_launchers_folder)
    # Jupyter's shutdown of a kernel that is slow to exit SIGTERMs its process group, server included
    signal.signal(signal.SIGTERM, _end_server)
