"""What a feedback page may show: the graded answers recorded while autograde runs, and the numbers a page
adds near them."""

from __future__ import annotations

import contextlib
import html
import json
import re
from pathlib import Path

import course_assignments as grading
from support.assignments import cells, grade_info


@contextlib.contextmanager
def recorded_answers(answers: set[float]):
    """While the block runs, every value a check compares a student's answer with (``grading.number``'s
    expected, through ``verdict``; ``close_to_best``'s best) is added to `answers`: the graded answers,
    visible and hidden, as the checks compute them in this (the grader's) process."""
    real_verdict, real_best = grading.verdict, grading.close_to_best

    def verdict(answer, expected, *args, **kwargs):
        answers.add(float(expected))
        return real_verdict(answer, expected, *args, **kwargs)

    def close_to_best(name, value, best, *args, **kwargs):
        answers.add(float(best))
        return real_best(name, value, best, *args, **kwargs)

    grading.verdict, grading.close_to_best = verdict, close_to_best
    try:
        yield answers
    finally:
        grading.verdict, grading.close_to_best = real_verdict, real_best


# a number standing alone: not the digits inside a word, a checksum (65e0db...) or an id
NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)*(?:[eE][-+]?\d+)?(?![\w])")


def numbers(text: str) -> set[float]:
    """Every number in `text` (a version such as 2.13.0 is not one)."""
    return {float(n) for n in NUMBER.findall(text) if n.count(".") <= 1}


def near(value: float, answers: set[float], within: float = 0.10) -> bool:
    return any(abs(value - a) <= within * abs(a) for a in answers)


def near_answers(page_text: str, had: str, answers: set[float]) -> list[float]:
    """The numbers in `page_text` that are not in `had` and lie within 10% of one of `answers`."""
    return sorted(n for n in numbers(page_text) - numbers(had) if near(n, answers))


def what_the_student_had(course: Path, name: str, student: str) -> str:
    """What the student saw before any feedback: the whole student version (text, metadata, points), their
    own cells as graded (their code, what it printed in the sandbox), and what the instructor's cells
    that are not tests print (the same whenever the student runs their notebook)."""
    (released,) = (course / "release" / name).glob("*.ipynb")
    (autograded,) = (course / "autograded" / student / name).glob("*.ipynb")
    had = [c for c in cells(autograded) if c["cell_type"] == "code" and not grade_info(c).get("grade")]
    return released.read_text() + json.dumps(had)


def own_lines(course: Path, name: str, student: str) -> set[str]:
    """The lines of the student's own cells (a solution may share a line with a hidden test)."""
    (autograded,) = (course / "autograded" / student / name).glob("*.ipynb")
    own = [c for c in cells(autograded) if c["cell_type"] == "code" and not grade_info(c).get("locked")]
    return {line.strip() for c in own for line in "".join(c["source"]).splitlines()}


def visible_text(page: str) -> str:
    """What a reader of an nbconvert HTML page sees: tags (and the code highlighter's spans) removed."""
    page = re.sub(r"<(style|script)[^>]*>.*?</\1>", "", page, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", "", page))


def outputs_text(page: str) -> str:
    """The text of the cells' outputs (streams and errors) in an nbconvert HTML page."""
    output = r'<div class="output_subarea output_(?:stream|error)[^>]*>\s*<pre>(.*?)</pre>'
    blocks = re.findall(output, page, re.S)
    return visible_text("\n".join(blocks))
