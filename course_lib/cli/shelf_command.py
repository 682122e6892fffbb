"""``python -m course_lib shelf``: the files a student reads beside the lessons, in reading order.

Each line: the file's path, its line count, the lessons it serves, and what it holds. Both come from the
first line of the file's docstring, which ends with the lessons in brackets, "(lessons 02-04)", so the
student who opens the file reads the same. The reading order is the table SHELF below, the one place it
is kept; lines and descriptions are read off the files, so they cannot drift. A name in the table with no
file yet is skipped (the shelf may be mid-rename); a file of the shelf missing from the table is
listed last, so nothing on the shelf goes unshown (tests/test_layout.py keeps the table whole).

Try::

    python -m course_lib shelf
    python -m course_lib shelf --json
"""

from __future__ import annotations

import argparse
import ast
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from course_lib.cli.flags import print_json
from course_lib.input_files import read_input

SHELF_DIR = Path(__file__).resolve().parent.parent / "shelf"

# Reading order (file names in course_lib/shelf/). Edit here when the shelf moves.
SHELF: tuple[str, ...] = (
    "errors.py",  # the course's error and the checks at every door
    "schedule.py",  # the IR: actions per device, the one rule for dependencies and messages
    "first_schedules.py",  # naive, GPipe, 1F1B, and the registry
    "validate.py",  # the one check any schedule passes, and the one order actions run in
    "costs.py",  # stage costs and links: the simulator's inputs
    "timeline.py",  # what every chart and bubble figure reads
    "simulator.py",  # the plain event loop
    "model.py",  # the toy transformer, its data, how it is cut into stages
    "reference.py",  # the ground truth
    "stage.py",  # a stage's runtime
    "local_engine.py",
    "p2p.py",  # the sends and receives
    "rank_loop.py",  # the distributed engine's rank loop
    "run_spec.py",
    "distributed_engine.py",
    "launcher.py",
)
# the docstring's first line ends "(lessons 02-04, 06)" or "(all lessons)"
LESSONS = re.compile(r"\s*\((?:lessons? ([^()]+)|(all) lessons)\)\.?\s*$")


@dataclass(frozen=True)
class ShelfFile:
    path: str  # relative to the repository root
    lines: int
    lessons: str
    holds: str  # the docstring's first paragraph, on one line, without its "(lessons ...)"


def shelf_files(shelf_dir: Path = SHELF_DIR, order: tuple[str, ...] = SHELF) -> list[ShelfFile]:
    """The shelf's files in reading order: the table's files that exist, then any file not in it."""
    listed = [name for name in order if (shelf_dir / name).is_file()]
    unlisted = sorted(p.name for p in shelf_dir.glob("*.py") if p.name not in {*order, "__init__.py"})
    return [_describe(shelf_dir / name) for name in listed + unlisted]


def _describe(path: Path) -> ShelfFile:
    """The file's lines, and its docstring's first paragraph split into what it holds and its lessons
    ("?" where it names none)."""
    text = read_input(path, "shelf file", 2**20).decode("utf-8")  # the course's own source: kilobytes
    doc = ast.get_docstring(ast.parse(text)) or ""
    first_paragraph = " ".join(doc.split("\n\n")[0].split())
    found = LESSONS.search(first_paragraph)
    lessons = (found.group(1) or found.group(2)) if found else "?"
    holds = first_paragraph[: found.start()] + "." if found else first_paragraph
    relative = path.relative_to(path.parent.parent.parent).as_posix()  # course_lib/shelf/NAME.py
    return ShelfFile(relative, len(text.splitlines()), lessons, holds)


def shelf_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the list as JSON")


def shelf_command(args: argparse.Namespace) -> int:
    files = shelf_files()
    if args.json:
        print_json({"files": [asdict(f) for f in files], "lines": sum(f.lines for f in files)})
        return 0
    width = max((len(f.path) for f in files), default=0)
    said = max((len(f.lessons) for f in files), default=0)
    print(f"{'file':<{width}}  lines  {'lessons':<{said}}  holds")
    for f in files:
        print(f"{f.path:<{width}}  {f.lines:>5}  {f.lessons:<{said}}  {f.holds}")
    print(f"{len(files)} files, {sum(f.lines for f in files):,} lines")
    return 0
