"""The one exception type the course raises for bad input, and the cap on any message's length.

Every message names the value that was given and what is allowed, so that a student reading it
knows what to change. It subclasses ValueError so ordinary ``except ValueError`` code still works.
"""

MAX_CHARS, MAX_LINES = 2000, 20  # a screenful: a message about a huge answer must not flood the notebook


class CourseError(ValueError):
    """Bad input: the message says which value, and what would be accepted."""


def require(condition: bool, message: str) -> None:
    """Raise CourseError(message) unless condition holds. Use before any work starts."""
    if not condition:
        raise CourseError(message)


def capped(message: str) -> str:
    """`message` cut to MAX_LINES lines and MAX_CHARS characters, saying how much was cut."""
    kept = "\n".join(message.splitlines()[:MAX_LINES])[:MAX_CHARS]
    return message if kept == message else f"{kept}\n... [{len(message) - len(kept):,} characters cut]"
