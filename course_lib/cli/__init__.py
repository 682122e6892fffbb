"""Command line: ``python -m course_lib <command> [flags]``.

Each command NAME lives in its own module, ``cli/NAME_command.py``, with two functions,
``NAME_arguments(parser)`` and ``NAME_command(args) -> int``; this file only wires them together, so
adding a command is one line in COMMANDS. Try ``python -m course_lib train --help``.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib
import os
import re
import signal
import sys
import threading
from collections.abc import Callable

import course_lib.schedules  # noqa: F401  (registers every schedule by name in the shelf's registry)
from course_lib.shelf.errors import CourseError

# command name -> one-line help; the command lives in course_lib/cli/NAME_command.py
COMMANDS: dict[str, str] = {
    "shelf": "list the files a student reads beside the lessons, in reading order",
    "train": "train the toy transformer (reference or pipelined)",
    "schedule": "print a schedule's per-device orders (text or PyTorch CSV)",
    "simulate": "simulate a schedule: time, bubble and memory per device",
    "tp": "tensor vs pipeline parallelism: message counts, latency sweep, measured TP",
    "plan": "plan a run: layouts (t, p, d, b, schedule, v), fastest step first",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m course_lib", description=as_help(__doc__.splitlines()[0])
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    formatter = argparse.RawDescriptionHelpFormatter  # --help shows each module's docstring as written
    for name, help_text in COMMANDS.items():
        module = importlib.import_module(f"course_lib.cli.{name}_command")
        description = as_help(module.__doc__)
        command = sub.add_parser(name, help=help_text, description=description, formatter_class=formatter)
        getattr(module, f"{name}_arguments")(command)
        command.set_defaults(_run=getattr(module, f"{name}_command"))
    from course_lib.cli.flags import state_bounds  # loaded by the commands above already

    state_bounds(parser)  # every number flag's --help says what it accepts
    return parser


def as_help(docstring: str | None) -> str:
    """A module's docstring as a terminal shows it: the reStructuredText marks (``code``, *stress*,
    a paragraph's closing ``::``) dropped, every line and example kept as written."""
    text = re.sub(r"``(.+?)``", r"\1", docstring or "")
    text = re.sub(r"(?<![\w*])\*(\S[^*\n]*?)\*(?![\w*])", r"\1", text)
    return re.sub(r"::$", ":", text, flags=re.M)


def main(argv: list[str] | None = None) -> int:
    def parse_and_run() -> int | None:  # the parser imports every command: a Ctrl-C there is one line too
        args = build_parser().parse_args(argv)
        return args._run(args)

    return report_errors(parse_and_run)


_OUTPUT_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EBADF, errno.EFBIG, errno.EROFS)


class Terminated(BaseException):
    """SIGTERM arrived (``kill``, a scheduler's time limit): unwinds like Ctrl-C, so that every rank
    process is stopped and every temporary file removed on the way out."""


def _terminate(signum: int, frame: object) -> None:
    raise Terminated


def report_errors(command: Callable[[], int | None]) -> int:
    """Run `command` as a shell user expects: its exit code; bad input (CourseError, exit 2), a
    failed rank of the distributed engine (exit 1), Ctrl-C (exit 130), SIGTERM (exit 143) and an output
    that cannot be written (a full disk, a closed stdout: exit 1) as one line on stderr, not a
    traceback; and a reader that went away (``... | head``) as a quiet exit 1."""
    if sys.stdout is None:  # started with stdout closed (>&-): refuse before any work
        print("error: standard output is closed; redirect it (> file, > /dev/null) instead", file=sys.stderr)
        return 2
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminate) if main_thread else None
    try:
        return _run_reporting(command)
    finally:
        if main_thread:  # None: a handler set outside Python, which Python cannot put back
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def _run_reporting(command: Callable[[], int | None]) -> int:
    try:
        code = int(command() or 0)
        sys.stdout.flush()  # inside the try: output still buffered meets a closed pipe here
        return code
    except BrokenPipeError:
        _quiet_stdout()
        return 1
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)  # on a line of its own, after a progress bar
        return 130
    except Terminated:
        print("\nterminated (SIGTERM)", file=sys.stderr)
        return 143  # 128 + SIGTERM, as a shell reports a process the signal ended
    except CourseError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # a full disk, a vanished folder: what was written so far stays
        if not (err.filename or err.errno in _OUTPUT_ERRORS):
            raise  # not an output's failure: its traceback is the report
        where = f" ({err.filename})" if err.filename else " while writing the output"
        print(f"error: {err.strerror or err}{where}", file=sys.stderr)
        _quiet_stdout()
        return 1
    except Exception as err:
        from course_lib.shelf.launcher import DistributedError  # here: it loads torch.distributed

        if not isinstance(err, DistributedError):
            raise
        print(f"error: {err}", file=sys.stderr)
        return 1


def _quiet_stdout() -> None:
    """The Python docs' recipe (signal module, "Note on SIGPIPE"): point stdout at devnull so that the
    interpreter's last flush at exit does not raise again."""
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
