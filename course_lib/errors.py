"""The one exception type the course raises for bad input.

Every message names the value that was given and what is allowed, so that a student reading it
knows what to change. It subclasses ValueError so ordinary ``except ValueError`` code still works.
"""


class CourseError(ValueError):
    """Bad input: the message says which value, and what would be accepted."""


def require(condition: bool, message: str) -> None:
    """Raise CourseError(message) unless condition holds. Use before any work starts."""
    if not condition:
        raise CourseError(message)
