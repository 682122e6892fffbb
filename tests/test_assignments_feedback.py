"""What a feedback page may show, and the fast tests of the tools that decide it.

``tests/test_assignments.py`` autogrades every assignment (the solution, the untouched student version, a
wrong submission) with ``recorded_answers`` on, which keeps every value the checks compare a student's
answer with: the graded answers, visible and hidden, as the grader computes them. Its feedback test then
reads each page as a student does (``visible_text``) and asks ``near_answers`` for the numbers the page
shows that the student did not have before (``what_the_student_had``) and that lie within 10% of a graded
answer: there must be none. The tests below try these tools on made-up pages, so that a leak would be
caught, and a version or a checksum is not taken for one.
"""

from __future__ import annotations

import contextlib
import html
import json
import re
from pathlib import Path

from test_assignments_cases import cells, grade_info

from course_lib import grading


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


def test_a_number_near_a_graded_answer_is_caught_and_one_the_student_had_is_not():
    page = "idle_fraction(4, 8): your answer is too high. The right one is 0.2766, not 0.35."
    assert near_answers(page, had="idle_fraction(4, 8)", answers={3 / 11}) == [0.2766]
    assert near_answers(page, had="0.2766 printed by your cell", answers={3 / 11}) == []
    assert near_answers("a hidden case fails: too low, by three to ten times", "", {3 / 11, 4.0}) == []


def test_versions_checksums_and_digits_in_words_are_not_numbers():
    text = "torch 2.13.0+cpu, checksum 65e0db443f62, cell a5_test_states, stage a1b2: 1.5e3 s, -2, 10%"
    assert numbers(text) == {1500.0, -2.0, 10.0}


def test_recorded_answers_keeps_what_the_checks_compare_with():
    with recorded_answers(set()) as answers:
        with contextlib.suppress(AssertionError):
            grading.number("x", 0.5, expected=0.25)
        grading.numbers("held", [4, 3], [4, 3], rel_tol=0)
        with contextlib.suppress(AssertionError):
            grading.close_to_best("step", 2.0, 1.0, within=0.1, higher_is_better=False)
    assert answers == {0.25, 4.0, 3.0, 1.0}
    assert grading.verdict.__module__ == "course_lib.exercises"  # put back
