"""``python -m course_lib shelf``: the shelf's files in reading order, each with its lines, lessons and what
it holds; a name in the table with no file is skipped, a file missing from the table still shown (last)."""

from __future__ import annotations

import json

from course_lib.cli import main
from course_lib.cli.shelf_command import SHELF, shelf_files


def test_the_table_order_is_kept_a_missing_file_skipped_and_an_unlisted_one_shown_last(tmp_path):
    shelf = tmp_path / "course_lib" / "shelf"
    shelf.mkdir(parents=True)
    (shelf / "__init__.py").write_text('"""The shelf."""\n')
    (shelf / "second.py").write_text('"""What the second holds,\nover two lines.\n\nDetails."""\nx = 1\n')
    (shelf / "first.py").write_text('"""The first."""\n')
    (shelf / "stray.py").write_text("y = 2\n")  # no docstring, not in the table
    order = (("first.py", "02"), ("gone.py", "03"), ("second.py", "04"))
    files = shelf_files(shelf, order)
    assert [(f.path, f.lines, f.lessons, f.holds) for f in files] == [
        ("course_lib/shelf/first.py", 1, "02", "The first."),
        ("course_lib/shelf/second.py", 5, "04", "What the second holds, over two lines."),
        ("course_lib/shelf/stray.py", 1, "?", ""),
    ]


def test_the_command_prints_every_file_in_reading_order(capsys):
    assert main(["shelf"]) == 0
    lines = capsys.readouterr().out.splitlines()
    files = shelf_files()
    assert lines[0].split() == ["file", "lines", "lessons", "holds"]
    assert [line.split()[0] for line in lines[1:-1]] == [f.path for f in files]
    assert lines[-1] == f"{len(files)} files, {sum(f.lines for f in files):,} lines"
    listed = [name for name, _ in SHELF if any(f.path.endswith("/" + name) for f in files)]
    assert [f.path.rpartition("/")[2] for f in files][: len(listed)] == listed  # the table's order


def test_json_gives_the_same_rows(capsys):
    assert main(["shelf", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    files = shelf_files()
    assert [row["path"] for row in out["files"]] == [f.path for f in files]
    assert out["lines"] == sum(f.lines for f in files)
    assert all(row["holds"] and row["lines"] > 0 for row in out["files"] if row["lessons"] != "?")
