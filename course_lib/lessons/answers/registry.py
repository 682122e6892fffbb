"""One exercise of a lesson: a stable key ("03.1" = lesson 03, exercise 1), a title, how the library computes
its answer from the question's inputs, and a hint that names the idea, never the formula or the number."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from course_lib.shelf.errors import CourseError, require


@dataclass(frozen=True)
class Exercise:
    key: str
    title: str  # printed beside the verdict: what is asked, with its inputs
    solve: Callable[..., float]  # called with `given` and the measured values; returns the expected answer
    hint: str
    given: dict = field(default_factory=dict)  # the question's inputs, by the names `solve` takes
    measured: tuple[str, ...] = ()  # values the notebook measured and passes to check, by name
    rel_tol: float = 0.02

    def expected(self, **measured: object) -> float:
        """The answer, computed now; a missing or unexpected measured value is refused by name."""
        missing = sorted(set(self.measured) - set(measured))
        extra = sorted(set(measured) - set(self.measured))
        require(not missing, f"exercise {self.key} needs the measured value(s) {missing}: pass them to check")
        require(
            not extra, f"exercise {self.key} takes no {extra}; it takes {list(self.measured) or 'nothing'}"
        )
        return self.solve(**self.given, **measured)


EXERCISES: dict[str, Exercise] = {}


def add(key: str, title: str, solve: Callable[..., float], hint: str, **options) -> None:
    """Register exercise `key` (options: given, measured, rel_tol)."""
    require(key not in EXERCISES, f"exercise {key} is registered twice")
    EXERCISES[key] = Exercise(key, title, solve, hint, **options)


def exercise(key: object) -> Exercise:
    """The registered exercise `key`, or a CourseError listing the keys there are."""
    if not isinstance(key, str) or key not in EXERCISES:
        raise CourseError(f"no exercise {key!r}; registered: {', '.join(sorted(EXERCISES))}")
    return EXERCISES[key]


def first_m(holds: Callable[[int], bool], limit: int = 10_000) -> int:
    """The smallest m >= 1 for which `holds(m)`; a CourseError if none is found up to `limit`."""
    found = next((m for m in range(1, limit + 1) if holds(m)), None)
    require(found is not None, f"no m up to {limit} satisfies the exercise's condition")
    return found


def whole_number(value: float) -> int:
    """A count computed in floating point (199.99999999999997 ms of 50 ms waits) as the integer it is, so that
    check asks for it exactly; a CourseError if it is not close to one."""
    require(abs(value - round(value)) < 1e-6 * max(1.0, abs(value)), f"{value} is not a whole number")
    return int(round(value))
