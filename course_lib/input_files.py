"""The file door's fault machinery: a file is checked before it is opened, and read bounded.

A room beside the shelf's one door for files (``course_lib/shelf/errors.py``'s ``read_file``, which
refuses what is not a regular file of at most `limit` bytes): importing this module puts
:func:`read_input` in its place, and the readers outside the shelf (schedule CSVs, the network's
sites, saved measurements, the shelf's own listing) call it directly. The schedules' CSV reader
imports it, so ``course_lib.lesson`` and the command line load it.

A student may name a FIFO (a read that blocks forever), a device such as /dev/zero (a read that never
ends), a folder, or a file far larger than anything the course reads; each gets one CourseError naming
the path and what it is, before a byte is read. A regular file is read in chunks, at most `limit`
bytes (a SIGTERM ends it between chunks), and a path swapped for a FIFO between the check and the
open is refused too::

    read_input("data/corpus.txt", "data file", limit=LIMITS["data_bytes"])   # bytes
    read_input("/dev/zero", "schedule CSV", limit=10**6)
    # CourseError: schedule CSV '/dev/zero' is a character device, not a regular file: ...
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from course_lib.shelf.errors import FILE_DOORS, CourseError

CHUNK = 1 << 20  # bytes per read(): small enough that a signal handler runs between chunks

_KINDS = (  # what stat says a path is, in words
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def kind_of(mode: int) -> str:
    """A file's kind, from its st_mode, in words ("a FIFO (named pipe)"); "a regular file" for a file."""
    return next((words for test, words in _KINDS if test(mode)), "a regular file")


def check_input(path: str | os.PathLike, what: str, limit: int) -> Path:
    """Refuse, without opening it, a `path` that is missing, not a regular file, or over `limit` bytes;
    the message names `what` the file is meant to be, the path, and the limit. Returns it as a Path."""
    path = Path(path)
    try:
        info = os.stat(path)  # follows a link: what a read would open
    except OSError as err:
        raise CourseError(f"cannot read {what} {str(path)!r}: {err.strerror or err}") from None
    if not stat.S_ISREG(info.st_mode):
        raise CourseError(
            f"{what} {str(path)!r} is {kind_of(info.st_mode)}, not a regular file: give the path of a file"
        )
    if info.st_size > limit:
        raise CourseError(
            f"{what} {str(path)!r} holds {info.st_size:,} bytes, "
            f"over the limit of {limit:,} bytes for a {what}"
        )
    return path


def read_input(path: str | os.PathLike, what: str, limit: int) -> bytes:
    """The bytes of `path`, checked by :func:`check_input` first and read in chunks, never more than
    `limit` bytes (a file that grew past it since the check is refused the same way)."""
    path = check_input(path, what, limit)
    # O_NONBLOCK: had the path become a FIFO since the check, opening it must not wait for a writer
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as err:
        raise CourseError(f"cannot read {what} {str(path)!r}: {err.strerror or err}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped between the check and the open
            raise CourseError(f"{what} {str(path)!r} is not a regular file any more: give the path of a file")
        chunks, total = [], 0
        while chunk := os.read(fd, min(CHUNK, limit + 1 - total)):
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise CourseError(f"{what} {str(path)!r} grew past the limit of {limit:,} bytes")
        return b"".join(chunks)
    except OSError as err:
        raise CourseError(f"cannot read {what} {str(path)!r}: {err.strerror or err}") from None
    finally:
        os.close(fd)


if read_input not in FILE_DOORS:
    FILE_DOORS.append(read_input)
