"""The three schedules everything else builds on (naive, GPipe, 1F1B) and the sizes any schedule accepts.

Each builder returns a :class:`~course_lib.shelf.schedule.Schedule`: for every device, the list of
actions it runs, in order. A builder only decides the *order*; when each action actually starts is
the simulator's (or an engine's) business, because a device waits for its inputs. The registry of
every schedule, with what derives from it, is ``course_lib/shelf/registry.py``.

Try it::

    from course_lib.shelf.basic_schedules import one_f_one_b
    print(one_f_one_b(4, 8))
"""

from __future__ import annotations

from collections.abc import Sequence

from course_lib.shelf.checks import TIMEOUT_LIMIT_S, shown, whole
from course_lib.shelf.errors import require
from course_lib.shelf.schedule import Action, Kind, Schedule


def F(stage: int, mb: int) -> Action:
    return Action(stage, Kind.F, mb)


def B(stage: int, mb: int) -> Action:
    return Action(stage, Kind.B, mb)


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
    "timeout_s": TIMEOUT_LIMIT_S,  # a rank's wait for a silent peer (checks.check_timeout)
}


def within_limit(name: str, value: int, what: str) -> None:
    """Refuse `value` (what it counts: `what`) above LIMITS[name], naming the limit."""
    limit = f"the limit of {LIMITS[name]:,} {name} (course_lib.shelf.registry.LIMITS)"
    require(value <= LIMITS[name], f"{what} is {value:,}, over {limit}")


def check_sizes(n_devices: int, n_microbatches: int, virtual: int = 1) -> tuple[int, int, int]:
    """Reject sizes no schedule can use or finish, naming the value that was given (build_schedule checks
    them for every builder; the three a lesson calls directly check them too). Returns them as Python
    ints (a numpy int is accepted as the same number)."""
    p, m = whole("n_devices", n_devices), whole("n_microbatches", n_microbatches)
    v = whole("virtual", virtual)
    for label, value in (("n_devices", p), ("n_microbatches", m), ("virtual", v)):
        # 10**5000 cannot even be printed in full: say so before 3*p*m*v is
        require(value < 2**64, f"{label} is {shown(value)}, alone over the limit of {LIMITS['actions']:,} "
                "actions (course_lib.shelf.registry.LIMITS)")  # fmt: skip
    within_limit("actions", 3 * p * m * v, f"3*p*m*v = 3*{p}*{m}*{v}")
    return p, m, v


def naive(n_devices: int, n_microbatches: int) -> Schedule:
    """One micro-batch at a time: F through every stage, B back through every stage, then the next.

    Device d's order is ``dF0 dB0 dF1 dB1 ...``. Because device 0 runs ``0F1`` only after ``0B0``,
    and ``0B0`` needs every later stage's backward, no two devices ever work at the same time.
    """
    n_devices, n_microbatches, _ = check_sizes(n_devices, n_microbatches)
    orders = [[a for mb in range(n_microbatches) for a in (F(d, mb), B(d, mb))] for d in range(n_devices)]
    return Schedule("naive", n_devices, n_microbatches, orders, list(range(n_devices)))


def gpipe(n_devices: int, n_microbatches: int) -> Schedule:
    """GPipe (Huang et al. 2019): every device runs all m forwards, then all m backwards.

    Backwards go in micro-batch order 0, 1, ..., m-1, as torch.distributed.pipelining's ScheduleGPipe
    does. Device 0 holds the activations of all m micro-batches until its first backward.
    """
    n_devices, n_microbatches, _ = check_sizes(n_devices, n_microbatches)
    mbs = range(n_microbatches)
    orders = [[F(d, mb) for mb in mbs] + [B(d, mb) for mb in mbs] for d in range(n_devices)]
    return Schedule("gpipe", n_devices, n_microbatches, orders, list(range(n_devices)))


def one_f_one_b(n_devices: int, n_microbatches: int, warmup: Sequence[int] | None = None) -> Schedule:
    """1F1B, also called PipeDream-Flush (Narayanan et al. 2021): same bubble as GPipe, less memory.

    Device d (of p) works in three phases:

    1. warm-up: ``p - 1 - d`` forwards, enough to fill the pipe below it (or ``warmup[d]``: the
       latency-aware variant passes a deeper one, to keep slow links busy);
    2. steady state: one forward, then one backward, until every forward has run;
    3. cool-down: the backwards still owed.

    So device d never holds more than ``p - d`` micro-batches' activations (device 0: p), where GPipe
    holds m. With m < p - 1 - d the warm-up is simply all m forwards.
    """
    n_devices, n_microbatches, _ = check_sizes(n_devices, n_microbatches)
    p, m = n_devices, n_microbatches
    warmup = [p - 1 - d for d in range(p)] if warmup is None else list(warmup)
    require(
        len(warmup) == p and all(isinstance(w, int) and w >= 0 for w in warmup),
        f"warmup must give {p} whole numbers >= 0 (forwards before the first backward, per device), "
        f"got {warmup!r}",
    )
    orders = []
    for d in range(p):
        warm = min(warmup[d], m)
        order = [F(d, mb) for mb in range(warm)]  # 1. warm-up: forwards only
        for k in range(m - warm):  # 2. steady state: one forward, one backward
            order += [F(d, warm + k), B(d, k)]
        order += [B(d, mb) for mb in range(m - warm, m)]  # 3. cool-down: the backwards still owed
        orders.append(order)
    return Schedule("1f1b", p, m, orders, list(range(p)))
