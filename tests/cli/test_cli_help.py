"""Every `--help` as a terminal shows it: no reStructuredText marks (double backticks), and the planner's
one-line help says what it lists without "rank" (a process, in this course)."""

from __future__ import annotations

import argparse

from course_lib.cli import COMMANDS, build_parser


def test_no_help_shows_rst_marks():
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {"": parser.format_help()} | {name: commands.choices[name].format_help() for name in COMMANDS}
    assert [name for name, text in helps.items() if "``" in text] == []
    assert "Command line: python -m course_lib <command> [flags]." in helps[""]
    assert "rank" not in COMMANDS["plan"]
