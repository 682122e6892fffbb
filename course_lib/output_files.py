"""Files written whole or not at all: a chart, a CSV or a file of the student's lab goes to a temporary
file beside its target, which then replaces the target in one step (``os.replace``, atomic on one
filesystem).

A full disk, a killed process or a failed render therefore leaves the old file as it was, never a
0-byte or half-written one; the temporary file is removed on the way out::

    write_whole("chart.png", lambda file: fig.savefig(file, format="png"))
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


def write_whole(path: str | os.PathLike, write: Callable[[BinaryIO], None]) -> Path:
    """Call `write` with a binary file open beside `path`, then move that file onto `path`; if anything
    fails (an OSError such as ENOSPC included), `path` is untouched and the error goes up."""
    path = Path(path)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())  # on disk before the rename: a crash leaves the old file or the new
        if path.exists():  # keep the permissions the old file had (mkstemp makes 0600)
            os.chmod(temporary, path.stat().st_mode & 0o7777)
        else:
            os.chmod(temporary, 0o666 & ~_umask())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return path


def _umask() -> int:
    """The process's umask (read by setting it, then putting it back: POSIX has no getter)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask
