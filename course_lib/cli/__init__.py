"""Command line: ``python -m course_lib <command> ...``.

Each command lives in its own module with two functions, ``add_arguments(parser)`` and
``run(args) -> int``; this file only wires them together, so adding a command is one line in
COMMANDS. Try ``python -m course_lib train --help``.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from course_lib.errors import CourseError

# command name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("course_lib.cli.train", "train the toy transformer (reference or pipelined)"),
    "schedule": ("course_lib.cli.schedule", "print a schedule's per-device orders (text or PyTorch CSV)"),
    "simulate": ("course_lib.cli.simulate", "simulate a schedule: time, bubble and memory per device"),
    "tp": ("course_lib.cli.tp", "tensor vs pipeline parallelism: message counts, latency sweep, measured TP"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m course_lib", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module_name, help_text) in COMMANDS.items():
        module = importlib.import_module(module_name)
        command = sub.add_parser(name, help=help_text, description=module.__doc__)
        module.add_arguments(command)
        command.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args._run(args) or 0)
    except CourseError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
