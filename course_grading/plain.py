"""Plain data across the sandbox's wall: what a student's function may hand the grader, as JSON.

A graded answer crosses from the student's sandboxed process to the grader's as text, never as a live
object: numbers (exact int, float, bool), strings, None, lists, tuples, dicts with string keys, and the
course's own value types (a Schedule and its Actions, a WanPlan, a Layout, ...), rebuilt field by field
by their own constructors on the grader's side. Nothing else can come back: no pickle, no object with
methods of the student's (an ``__eq__`` that always agrees, a ``__float__`` that reads the caller's
frame), no reference into the student's process.

    text = dumps(my_schedule)       # in the sandbox
    schedule = loads(text)          # in the grader: a fresh Schedule, or PlainDataError
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import importlib
import json
import math
from typing import Any

MAX_ITEMS = 200_000  # every value counted once: a schedule of p = 64, m = 512 is about 65,000
MAX_DEPTH = 32
MAX_CHARS = 20_000_000


class PlainDataError(ValueError):
    """A value that cannot cross the wall (the message says which part and why)."""


# The course's value types that may cross, by class name: found in the library by name
# (course_grading.names), wherever its layout puts them this term
TYPES = ("Action", "Kind", "Schedule", "WanPlan", "WanProblem", "Layout", "Link", "LayerProfile")


@functools.lru_cache(maxsize=1)
def _registry() -> dict[str, type]:
    from course_grading.names import module_of

    return {name: getattr(importlib.import_module(module_of(name)), name) for name in TYPES}


def _number(value: Any) -> Any:
    """numpy's and torch's scalars become Python numbers (read in this process, the sandbox's)."""
    kind = type(value).__module__.split(".")[0]
    if kind in ("numpy", "torch") and hasattr(value, "item"):
        value = value.item()
    return value


def encode(value: Any, depth: int = 0, budget: list[int] | None = None) -> Any:
    """`value` as JSON-ready data, tagged where JSON has no type of its own."""
    budget = budget if budget is not None else [MAX_ITEMS]
    budget[0] -= 1
    if budget[0] < 0 or depth > MAX_DEPTH:
        raise PlainDataError(
            f"too large or too deep to hand back (at most {MAX_ITEMS} values, depth {MAX_DEPTH})"
        )
    value = _number(value)
    kind = type(value)
    if value is None or kind in (bool, int, str):
        return value
    if kind is float:
        return value if math.isfinite(value) else {"$": "float", "v": repr(value)}
    if kind is list:
        return [encode(v, depth + 1, budget) for v in value]
    if kind is tuple:
        return {"$": "tuple", "v": [encode(v, depth + 1, budget) for v in value]}
    if kind is dict:
        if not all(type(k) is str for k in value):
            raise PlainDataError("a dict handed back must have string keys")
        return {"$": "dict", "v": {k: encode(v, depth + 1, budget) for k, v in value.items()}}
    registered = _registry()
    if registered.get(kind.__name__) is kind:  # exactly the course's type, not a subclass of it
        if isinstance(value, enum.Enum):
            return {"$": kind.__name__, "v": value.value}
        fields = {
            f.name: encode(getattr(value, f.name), depth + 1, budget) for f in dataclasses.fields(value)
        }
        return {"$": kind.__name__, "v": fields}
    raise PlainDataError(
        f"a {kind.__name__} cannot be handed to the grader: return numbers, strings, lists, tuples, dicts "
        f"or the course's own types ({', '.join(sorted(registered))})"
    )


def decode(data: Any, depth: int = 0) -> Any:
    """The value `encode` made, rebuilt with this process's own types (their checks run again)."""
    if depth > MAX_DEPTH:
        raise PlainDataError(f"nested deeper than {MAX_DEPTH}")
    if data is None or type(data) in (bool, int, float, str):
        return data
    if type(data) is list:
        return [decode(v, depth + 1) for v in data]
    if type(data) is not dict or set(data) != {"$", "v"}:
        raise PlainDataError(f"not plain data: {str(data)[:80]!r}")
    tag, inner = data["$"], data["v"]
    if tag == "float" and inner in ("inf", "-inf", "nan"):
        return float(inner)
    if tag == "tuple" and type(inner) is list:
        return tuple(decode(v, depth + 1) for v in inner)
    if tag == "dict" and type(inner) is dict:
        return {k: decode(v, depth + 1) for k, v in inner.items()}
    kind = _registry().get(tag)
    if kind is None:
        raise PlainDataError(f"unknown type {tag!r}")
    if issubclass(kind, enum.Enum):
        return kind(inner)
    if type(inner) is not dict:
        raise PlainDataError(f"{tag}: expected its fields")
    try:
        return kind(**{k: decode(v, depth + 1) for k, v in inner.items()})
    except (TypeError, ValueError) as err:  # the type's own checks refused the fields
        raise PlainDataError(f"{tag} could not be rebuilt: {err}") from None


def dumps(value: Any) -> str:
    return json.dumps(encode(value))


def loads(text: str) -> Any:
    if len(text) > MAX_CHARS:
        raise PlainDataError(f"{len(text)} characters: more than the {MAX_CHARS} a value may take")
    try:
        data = json.loads(text)
    except ValueError as err:  # also ints of more than 4,300 digits
        raise PlainDataError(f"not JSON: {err}") from None
    return decode(data)
