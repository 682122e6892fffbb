"""Rank functions for the tests of lesson 04c's harness and of its grader, read from the files that hold
them: the lesson's worked example (its %%writefile cell: GPipe, all forwards then all backwards) and
assignment a04c's solution (1F1B, the instructor's), and a file that holds a changed copy of either."""

from __future__ import annotations

import json
import re
from pathlib import Path

from support.paths import REPO_ROOT

LESSON = REPO_ROOT / "notebooks" / "04c_write_the_pipeline.ipynb"
LESSON_FUNCTION = "all_forward_all_backward"  # the name the lesson's file defines (run with function=)
ASSIGNMENT = REPO_ROOT / "notebooks" / "assignments" / "source" / "a04c_write_the_pipeline"
MARKER = re.compile(r"^\s*### (BEGIN|END) SOLUTION\n", re.M)


def lesson_function() -> str:
    """The body of the lesson's %%writefile cell: the GPipe rank function the student reads and changes."""
    for cell in json.loads(LESSON.read_text())["cells"]:
        src = "".join(cell["source"])
        if cell["cell_type"] == "code" and src.startswith("%%writefile"):
            return src.split("\n", 1)[1]
    raise AssertionError("lesson 04c has no %%writefile cell")


def solution_function() -> str:
    """Assignment a04c's solution as a module: ``one_f_one_b`` (1F1B), with the imports the release's cells
    give it and the solution markers taken out."""
    (notebook,) = ASSIGNMENT.glob("*.ipynb")
    for cell in json.loads(notebook.read_text())["cells"]:
        src = "".join(cell["source"])
        if cell["cell_type"] == "code" and src.startswith("def one_f_one_b("):
            return "import torch\nimport torch.distributed as dist\n\n\n" + MARKER.sub("", src) + "\n"
    raise AssertionError("assignment a04c has no cell that defines one_f_one_b")


def written(tmp_path: Path, name: str, source: str) -> Path:
    """`source` as the module `name`.py in `tmp_path`, which the ranks import by path."""
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    return path
