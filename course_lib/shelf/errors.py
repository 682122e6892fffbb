"""The course's one error for bad input, and the checks every door runs before any work (all lessons).

Every message names the value that was given and what is allowed, so that a student reading it knows
what to change. :class:`CourseError` subclasses ValueError, so ordinary ``except ValueError`` code works.

A lesson may pass ``4``, ``numpy.int64(4)`` or ``4.0`` where a count is meant. :func:`whole` and
:func:`real` hand back that number as a plain Python int or float, or raise one CourseError naming the
argument, what was given and what is allowed, so that no TypeError from deep inside reaches a student::

    whole("n_devices", numpy.int64(4))      # 4
    whole("n_devices", "4")    # CourseError: n_devices must be a whole number >= 1, got '4' (str)
    real("latency_s", float("inf"))         # CourseError: latency_s must be a finite number >= 0, got inf

The machine's bounds are read here too, once: its cores (:func:`check_threads`), :func:`divisors` for
messages that list what would divide (sqrt(n) steps, so a batch of 10**9 is answered at once), and
:data:`LIMITS`, the largest sizes the course accepts. (Its memory: ``course_lib/engines/memory_fit.py``.)

Files are a door too: every file the course reads goes through :func:`read_file`, which refuses what
is not a regular file of at most `limit` bytes (a FIFO would block forever, /dev/zero never end). Its
fault machinery (naming the kind of file, reading in chunks) is ``course_lib/input_files.py``.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
from collections.abc import Callable
from pathlib import Path

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


def whole(name: str, value: object, low: int | None = 1, high: int | None = None) -> int:
    """`value` as a Python int if it is a whole number (Python or numpy int, or a float such as 4.0)
    in [low, high] (None: no bound); otherwise CourseError naming `name`, the value and the range.
    bool is refused, although Python counts it as an int: ``stages=True`` is a slip, not a count."""
    number = _as_number(value)
    if isinstance(number, float) and math.isfinite(number) and number.is_integer():
        number = int(number)
    if isinstance(number, int):  # math.isfinite(10**400) would overflow: an int needs no such check
        if (low is None or low <= int(number)) and (high is None or int(number) <= high):
            return int(number)
    bounds = ("" if low is None else f" >= {low:,}") + ("" if high is None else f" and <= {high:,}")
    bounds = bounds.replace(" and", "", low is None)  # "<= 9", not "and <= 9", without a low bound
    raise CourseError(f"{name} must be a whole number{bounds}, got {shown(value)}")


def real(name: str, value: object, low: float = 0.0, high: float = math.inf, above: bool = False) -> float:
    """`value` as a Python float if it is a finite number (Python or numpy int or float) >= low (> with
    `above`) and <= high; otherwise CourseError naming `name`, the value and the range."""
    number = _as_number(value)
    if isinstance(number, int):
        number = float(number) if abs(number) < 2**1023 else math.inf  # 10**400: too large for a float
    if number is not None and math.isfinite(number) and low <= number <= high:
        if not (above and number == low):
            return float(number)
    bounds = [f"{'>' if above else '>='} {low:g}"] if low > -math.inf else []
    bounds += [f"<= {high:g}"] if high < math.inf else []
    allowed = " and ".join(["a finite number", *bounds]).replace("number and", "number", 1)
    raise CourseError(f"{name} must be {allowed}, got {shown(value)}")


def wholes(name: str, values: object, low: int | None = 1, high: int | None = None) -> tuple[int, ...]:
    """A list, tuple or numpy array of whole numbers, each checked by :func:`whole` (as ``name[i]``)."""
    listed = hasattr(values, "__len__") and hasattr(values, "__iter__")
    if isinstance(values, (str, bytes, dict)) or not listed:
        raise CourseError(f"{name} must be a list of whole numbers, got {shown(values)}")
    return tuple(whole(f"{name}[{i}]", v, low, high) for i, v in enumerate(values))


def typed_fields(config: object) -> None:
    """Check a dataclass's ``int`` and ``float`` fields as it is made (call it from __post_init__):
    each becomes a Python int or float (numpy's and 4.0 for a count are the same numbers), and anything
    else (2.5 or "4" for a count, text for a rate) is one CourseError naming the field. Frozen or not."""
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if f.type in ("int", int):
            number: object = whole(f.name, value, low=None)
        elif f.type in ("float", float):
            require(is_number(value), f"{f.name} must be a number, got {shown(value)}")
            number = float(_as_number(value))
        else:
            continue
        if type(number) is not type(value) or number != value:
            object.__setattr__(config, f.name, number)


def is_number(value: object) -> bool:
    """A Python or numpy int or float (not bool): what :func:`real` reads."""
    return _as_number(value) is not None


def _as_number(value: object) -> float | int | None:
    """An int or float for Python and numpy numbers (numpy registers its types with ``numbers``), None
    for anything else (bool, str, None, a list, a complex number, a tensor)."""
    if isinstance(value, bool) or type(value).__name__ == "bool_":  # numpy.bool_ is no count either
        return None
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    return None


def shown(value: object) -> str:
    """The value as a message shows it: its repr cut to 60 characters, with its type unless a number."""
    try:
        text = repr(value)
    except ValueError:  # an int of over 4,300 digits, which Python will not print
        text = f"an int of {value.bit_length():,} bits" if isinstance(value, int) else "?"
    text = text if len(text) <= 60 else text[:57] + "..."
    plain = isinstance(value, (int, float)) and not isinstance(value, bool)
    return text if plain else f"{text} ({type(value).__name__})"


def divisors(n: int) -> list[int]:
    """Every divisor of n >= 1, ascending: sqrt(n) trial divisions (10**9: 31,623 of them, milliseconds)."""
    small = [k for k in range(1, math.isqrt(n) + 1) if n % k == 0]
    return small + [n // k for k in reversed(small) if k * k != n]


def cores() -> int:
    """The cores this process may run on (its affinity where the OS says, else all of them)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS has no affinity
        return os.cpu_count() or 1


def check_threads(threads: object, name: str = "threads") -> int | None:
    """torch CPU threads per process: None (the caller's default) or 1 up to 4 x this machine's cores;
    more only oversubscribes, and OpenMP allocates memory per thread (10**9 of them: 216 GB)."""
    if threads is None:
        return None
    try:
        return whole(name, threads, high=4 * cores())
    except CourseError as err:
        raise CourseError(f"{err} (4 x the {cores()} cores here: more threads wait for a core)") from None


TIMEOUT_LIMIT_S = 7 * 24 * 3600  # a week: a timedelta of 1e15 s overflows inside torch.distributed


def check_timeout(value: object) -> float:
    """How long a rank may wait for a silent peer: a finite number of seconds > 0, at most a week."""
    return real("timeout_s", value, high=TIMEOUT_LIMIT_S, above=True)


# The largest sizes the course accepts, refused at once rather than failing minutes later for want of time
# or memory. check_sizes (so every builder), TrainConfig.check and the command line's flags read them.
LIMITS = {
    "actions": 10**6,  # 3*p*m*v (F, I, W): 600k took 12 s to build, validate and simulate on 2 busy cores
    "layers": 1_000,  # lessons: 80; Llama 3 405B: 126; 1,000 toy blocks take 35 s a step on a busy CPU
    "parameters": 10**9,  # 16 B each with AdamW (weights, gradients, two moments): 16 GB
    "lr": 1e3,  # AdamW moves a weight by about lr a step: 1000 already diverges; 1e300 overflows float32
    "seed": 2**63 - 1,  # a signed 64-bit int; torch.manual_seed also takes seed + 12345 (held-out batches)
    # any cost, latency or duration, in seconds: 1e12 s is 31,700 years; a million actions' sum of them
    # stays a finite float with room for the small terms (1e308 overflows the makespan, then bubble is nan)
    "seconds": 1e12,
    "timeout_s": TIMEOUT_LIMIT_S,  # a rank's wait for a silent peer (check_timeout)
    # a training text (read_file below reads it): the shipped corpus is 1 MB; each character becomes an
    # 8-byte token id, so 64 MiB of text is already 0.5 GiB of ids before a model exists
    "data_bytes": 64 * 2**20,
    # counts the command line bounds, each answered at once, stated in --help (cli/flags.py's number):
    "width": 8_192,  # d_model: one block of 8,192 already holds 0.8 billion parameters (12 d^2)
    "seq_len": 2**20,  # tokens per sample; the memory check refuses far less on a laptop, naming the largest
    "batch": 2**20,  # samples per step (and micro-batches, which divide it)
    "steps": 10**6,  # the lessons train 80; a million steps of the smallest toy take days on a CPU
    "stages": 1_024,  # pipeline devices: the layers' limit plus the embedding and the head, rounded up
    "gpus": 10**7,  # the planner's GPUs: sqrt(10**7) steps list their divisors, milliseconds
    "global_batch": 10**9,  # the planner's sequences per step
}


def within_limit(name: str, value: int, what: str) -> None:
    """Refuse `value` (what it counts: `what`) above LIMITS[name], naming the limit."""
    limit = f"the limit of {LIMITS[name]:,} {name} (course_lib.shelf.errors.LIMITS)"
    require(value <= LIMITS[name], f"{what} is {value:,}, over {limit}")


# ---- files: the one door ----

# course_lib/input_files.py puts its read_input here when imported (it names a FIFO, a device or a folder
# before opening it, and reads in chunks); without it, the plain door below
FILE_DOORS: list[Callable[[str | os.PathLike, str, int], bytes]] = []


def read_file(path: str | os.PathLike, what: str, limit: int) -> bytes:
    """The bytes of `path`, refused (naming `what` it is meant to be) unless it is a regular file of at
    most `limit` bytes: the one door every file the course reads passes."""
    if FILE_DOORS:
        return FILE_DOORS[-1](path, what, limit)
    path = Path(path)
    require(path.is_file(), f"{what} {str(path)!r} is not a regular file: give the path of a file")
    size = path.stat().st_size
    require(size <= limit, f"{what} {str(path)!r} holds {size:,} bytes, over the limit of {limit:,} bytes "
            f"for a {what}")  # fmt: skip
    return path.read_bytes()
