"""Nothing a student can open holds a solution (issue 39): no lesson notebook carries a line of an
assignment's solution or hidden tests (``solution_secrets``: its distinctive lines), in a cell's source or
in what the cell printed, and no lesson defines the function assignment a04c grades: lesson 04c works
GPipe's rank through and leaves 1F1B's to the assignment."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.assignments import ASSIGNMENTS, solution_secrets

ROOT = Path(__file__).resolve().parents[2]
LESSONS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def lesson_lines(path: Path) -> set[str]:
    """Every line of the lesson's cells and of their text outputs, stripped."""
    texts = []
    for cell in json.loads(path.read_text())["cells"]:
        texts.append("".join(cell["source"]))
        for output in cell.get("outputs", []):
            texts.append("".join(output.get("text", "")))
            texts.append("".join(output.get("data", {}).get("text/plain", "")))
    return {line.strip() for text in texts for line in text.splitlines()}


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_no_lesson_holds_a_line_of_an_assignments_solution_or_hidden_tests(name):
    secrets = set(solution_secrets(name))
    leaks = {path.name: sorted(secrets & lesson_lines(path)) for path in LESSONS}
    assert not any(leaks.values()), {lesson: lines[:3] for lesson, lines in leaks.items() if lines}


def test_the_lesson_beside_a04c_holds_gpipes_rank_and_no_function_of_the_name_a04c_grades():
    assert "a04c_write_the_pipeline" in ASSIGNMENTS and LESSONS
    for path in LESSONS:
        code = "\n".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"])
        assert "def one_f_one_b(" not in code, path.name
    lesson = (ROOT / "notebooks" / "04c_write_the_pipeline.ipynb").read_text()
    assert "def all_forward_all_backward(rank):" in lesson
