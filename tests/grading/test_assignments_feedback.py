"""What a feedback page may show, and the fast tests of the tools that decide it.

``tests/grading/test_assignments.py`` autogrades every assignment (the solution, the untouched student
version, a wrong submission) with ``recorded_answers`` on, which keeps every value the checks compare a
student's answer with: the graded answers, visible and hidden, as the grader computes them. Its feedback
test then reads each page as a student does (``visible_text``) and asks ``near_answers`` for the numbers the
page shows that the student did not have before (``what_the_student_had``) and that lie within 10% of a
graded answer: there must be none. The tests below try these tools on made-up pages, so that a leak would be
caught, and a version or a checksum is not taken for one.
"""

from __future__ import annotations

import contextlib

from support.feedback import (
    near_answers,
    numbers,
    recorded_answers,
)

import course_assignments as grading


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
