"""Lesson 04c's rank function, for the tests of the harness and of its grader: the body of the lesson's
%%writefile cell (the instructor's solution), and a file that holds a changed copy of it."""

from __future__ import annotations

import json
from pathlib import Path

from support.paths import REPO_ROOT

LESSON = REPO_ROOT / "notebooks" / "04c_write_the_pipeline.ipynb"


def lesson_function() -> str:
    """The body of the lesson's %%writefile cell: the rank function the student reads and changes."""
    for cell in json.loads(LESSON.read_text())["cells"]:
        src = "".join(cell["source"])
        if cell["cell_type"] == "code" and src.startswith("%%writefile"):
            return src.split("\n", 1)[1]
    raise AssertionError("lesson 04c has no %%writefile cell")


def written(tmp_path: Path, name: str, source: str) -> Path:
    """`source` as the module `name`.py in `tmp_path`, which the ranks import by path."""
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    return path
