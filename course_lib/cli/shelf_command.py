"""``python -m course_lib shelf``: the files a student reads beside the lessons, in reading order.

Each line: the file's path, its line count, the lessons it serves, and what it holds (the first
paragraph of its docstring). The reading order is the table SHELF below, the one place it is kept;
lines and descriptions are read off the files, so they cannot drift. A name in the table with no
file yet is skipped (the shelf may be mid-rename); a file of the shelf missing from the table is
listed last, so nothing on the shelf goes unshown (tests/test_layout.py keeps the table whole).

Try::

    python -m course_lib shelf
    python -m course_lib shelf --json
"""

from __future__ import annotations

import argparse
import ast
from dataclasses import asdict, dataclass
from pathlib import Path

from course_lib.cli.flags import print_json
from course_lib.input_files import read_input

SHELF_DIR = Path(__file__).resolve().parent.parent / "shelf"

# Reading order: (file name in course_lib/shelf/, the lessons it serves). Edit here when the shelf moves.
SHELF: tuple[tuple[str, str], ...] = (
    ("errors.py", "all"),  # the course's error and the checks at every door
    ("schedule.py", "02-04"),  # the IR: actions per device, the one rule for dependencies and messages
    ("first_schedules.py", "02-04"),  # naive, GPipe, 1F1B, and the registry
    ("validate.py", "02-04"),  # the one check any schedule passes, and the one order actions run in
    ("costs.py", "02-04, 06"),  # stage costs and links: the simulator's inputs
    ("timeline.py", "02-04"),  # what every chart and bubble figure reads
    ("simulator.py", "02-04"),  # the plain event loop
    ("model.py", "00, 05, 08"),  # the toy transformer, its data, how it is cut into stages
    ("reference.py", "00, 08"),  # the ground truth
    ("stage.py", "04, 08"),  # a stage's runtime
    ("local_engine.py", "04"),
    ("p2p.py", "08"),  # the sends and receives
    ("rank_loop.py", "04, 08"),  # the distributed engine's rank loop
    ("run_spec.py", "08"),
    ("distributed_engine.py", "08"),
    ("launcher.py", "08"),
)


@dataclass(frozen=True)
class ShelfFile:
    path: str  # relative to the repository root
    lines: int
    lessons: str
    holds: str  # the first paragraph of the file's docstring, on one line


def shelf_files(shelf_dir: Path = SHELF_DIR, order: tuple[tuple[str, str], ...] = SHELF) -> list[ShelfFile]:
    """The shelf's files in reading order: the table's files that exist, then any file not in it."""
    listed = [(name, lessons) for name, lessons in order if (shelf_dir / name).is_file()]
    named = {name for name, _ in order}
    unlisted = sorted(p.name for p in shelf_dir.glob("*.py") if p.name not in named | {"__init__.py"})
    return [_describe(shelf_dir / name, lessons) for name, lessons in listed + [(n, "?") for n in unlisted]]


def _describe(path: Path, lessons: str) -> ShelfFile:
    text = read_input(path, "shelf file", 2**20).decode("utf-8")  # the course's own source: kilobytes
    doc = ast.get_docstring(ast.parse(text)) or ""
    first_paragraph = " ".join(doc.split("\n\n")[0].split())
    relative = path.relative_to(path.parent.parent.parent).as_posix()  # course_lib/shelf/NAME.py
    return ShelfFile(relative, len(text.splitlines()), lessons, first_paragraph)


def shelf_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the list as JSON")


def shelf_command(args: argparse.Namespace) -> int:
    files = shelf_files()
    if args.json:
        print_json({"files": [asdict(f) for f in files], "lines": sum(f.lines for f in files)})
        return 0
    width = max((len(f.path) for f in files), default=0)
    print(f"{'file':<{width}}  lines  lessons    holds")
    for f in files:
        print(f"{f.path:<{width}}  {f.lines:>5}  {f.lessons:<9}  {f.holds}")
    print(f"{len(files)} files, {sum(f.lines for f in files):,} lines")
    return 0
