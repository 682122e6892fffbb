"""``python -m course_lib shelf``: the shelf's files in reading order, each with its lines, lessons and what
it holds; a name in the table with no file is skipped, a file missing from the table still shown (last)."""

from __future__ import annotations

import json
from pathlib import Path

from course_lib.cli import main
from course_lib.cli.shelf_command import SHELF, shelf_files

REPO = Path(__file__).resolve().parents[2]


def test_the_table_order_is_kept_a_missing_file_skipped_and_an_unlisted_one_shown_last(tmp_path):
    shelf = tmp_path / "course_lib" / "shelf"
    shelf.mkdir(parents=True)
    (shelf / "__init__.py").write_text('"""The shelf."""\n')
    (shelf / "second.py").write_text(
        '"""What the second holds,\nover two (lessons 04c, 08).\n\nDetails."""\nx = 1\n'
    )
    (shelf / "first.py").write_text('"""The first (lesson 02)."""\n')
    (shelf / "third.py").write_text('"""The third (all lessons)."""\n')
    (shelf / "stray.py").write_text("y = 2\n")  # no docstring, not in the table
    order = ("first.py", "gone.py", "second.py", "third.py")
    files = shelf_files(shelf, order)
    assert [(f.path, f.lines, f.lessons, f.holds) for f in files] == [
        ("course_lib/shelf/first.py", 1, "02", "The first."),
        ("course_lib/shelf/second.py", 5, "04c, 08", "What the second holds, over two."),
        ("course_lib/shelf/third.py", 1, "all", "The third."),
        ("course_lib/shelf/stray.py", 1, "?", ""),
    ]


def test_every_shelf_file_says_its_lessons_on_its_first_line():
    """The listing's lessons are the file's own: the docstring's first line ends with them, one line."""
    for f in shelf_files():
        first = (REPO / f.path).read_text().splitlines()[0]
        assert f.lessons != "?" and first.endswith(("lessons).", f"{f.lessons}).")), (f.path, first)
        assert f.holds and len(f.holds) <= 100, f.path


def test_the_command_prints_every_file_in_reading_order(capsys):
    assert main(["shelf"]) == 0
    lines = capsys.readouterr().out.splitlines()
    files = shelf_files()
    assert lines[0].split() == ["file", "lines", "lessons", "holds"]
    assert [line.split()[0] for line in lines[1:-1]] == [f.path for f in files]
    assert lines[-1] == f"{len(files)} files, {sum(f.lines for f in files):,} lines"
    listed = [name for name in SHELF if any(f.path.endswith("/" + name) for f in files)]
    assert [f.path.rpartition("/")[2] for f in files][: len(listed)] == listed  # the table's order


def test_json_gives_the_same_rows(capsys):
    assert main(["shelf", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    files = shelf_files()
    assert [row["path"] for row in out["files"]] == [f.path for f in files]
    assert out["lines"] == sum(f.lines for f in files)
    assert all(row["holds"] and row["lines"] > 0 for row in out["files"] if row["lessons"] != "?")
