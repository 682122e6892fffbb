"""The lessons' exercises, looked up by ``course_lib.exercises.check(key, answer)`` so that no expected value
stands in a notebook cell.

Every answer is computed when it is checked, by calling the library (closed forms, the simulator, the
planner) on the question's own inputs; none is typed in. An exercise whose answer depends on what the
notebook measured on this machine names that value in `measured`, and its cell passes it
(``check("13.1", answer, slot_ms=...)``): only where the question is about this machine's own numbers.
"""

from course_lib.lessons.answers import lessons_00_05, lessons_06_10, lessons_11_15  # noqa: F401  registers
from course_lib.lessons.answers.registry import EXERCISES, Exercise, exercise

__all__ = ["EXERCISES", "Exercise", "exercise"]
