"""Is this schedule runnable? The validator explains what is wrong, in words (lessons 02-04).

It also holds the one "run a schedule in order" (:func:`execution_order`): the simulator and the local
engine run a schedule's actions in the order it finds, so all three agree on what can run.

Students' hand-written schedules go through here, so every message says which action, on which
device, and why. Three kinds of problem are found:

1. bookkeeping: every (stage, micro-batch) needs its F and its B (or I and W) exactly once, on the
   device that holds the stage; nothing unknown, nothing twice;
2. wrong kind: B in a schedule that splits backward into I + W, or the other way round;
3. deadlock: the devices' orders are *executed* (a device runs its next action once what that action
   needs, by the one rule of ``schedule.inputs_of``, has run); if they get stuck, each stuck device is
   named with the action it can never run and exactly which action it waits for, and where that one is stuck.

Cost: O(A log p) for A actions on p devices (bookkeeping O(A), the execution a heap of at most p turns,
the circle search O(p)), so any size the action limit accepts is checked in seconds: p=333,333, m=1
(666,666 actions) took 3 s of CPU on a busy 2-core machine, where the round-by-round execution was
quadratic in p (115 s at p=10,000).

Try it::

    from course_lib.shelf.first_schedules import build_schedule
    from course_lib.shelf.validate import check, validate, execution_order
    s = build_schedule("1f1b", 4, 8)
    validate(s)                       # silent: the schedule is fine
    s.orders[1][1], s.orders[1][3] = s.orders[1][3], s.orders[1][1]   # 1B0 before 1F1: 2F1 waits for it
    print("\\n".join(check(s)))      # explains the deadlock this causes: devices 1 and 2 wait in a circle
"""

from __future__ import annotations

import heapq
import itertools
from collections import defaultdict

from course_lib.shelf.errors import CourseError, capped
from course_lib.shelf.schedule import Action, Key, Kind, Schedule, dependencies, inputs_of, key_of


class ScheduleError(CourseError):
    """The schedule cannot run as written; ``problems`` lists every reason found."""

    def __init__(self, schedule_name: str, problems: list[str]):
        self.problems = problems
        text = f"schedule {schedule_name!r} has {len(problems)} problem(s):\n  - " + "\n  - ".join(problems)
        super().__init__(capped(text))


_WHAT = {Kind.F: "forward", Kind.B: "backward", Kind.I: "input gradient", Kind.W: "weight gradient"}


def describe(action: Action) -> str:
    """``2B0 (stage 2's backward for micro-batch 0)``: the action and what it means."""
    joiner = "of" if action.kind is Kind.F else "for"
    return f"{action} (stage {action.stage}'s {_WHAT[action.kind]} {joiner} micro-batch {action.microbatch})"


def _expected_kinds(schedule: Schedule) -> tuple[Kind, ...]:
    if getattr(schedule, "forward_only", False):
        return (Kind.F,)
    return (Kind.F, Kind.I, Kind.W) if schedule.split_backward else (Kind.F, Kind.B)


# The checks below key actions by plain tuples (stage, "F", micro-batch), the schedule module's Key:
# hashing those is several times faster than hashing Action objects, which matters at p=64, m=1024.
def _keyed(schedule: Schedule) -> list[list[Key]]:
    return [[key_of(a) for a in order] for order in schedule.orders]


def _action_problems(schedule: Schedule, device: int, action: Action) -> list[str]:
    """What is wrong with `action` sitting in `device`'s order."""
    n_stages, m = schedule.n_stages, schedule.n_microbatches
    if not 0 <= action.stage < n_stages:
        return [
            f"device {device} runs {action}, but stage {action.stage} does not exist "
            f"(stages are 0..{n_stages - 1})"
        ]
    problems = []
    if not 0 <= action.microbatch < m:
        problems.append(
            f"device {device} runs {action}, but micro-batch {action.microbatch} does not exist "
            f"(m={m}, so micro-batches are 0..{m - 1})"
        )
    if action.kind not in _expected_kinds(schedule):
        if getattr(schedule, "forward_only", False):
            why = "this schedule is forward only (inference): it runs no backward"
        elif schedule.split_backward:
            why = "this schedule splits backward into I (input gradient) and W (weight gradient)"
        else:
            why = "this schedule uses full backwards B; I and W need split_backward=True"
        problems.append(f"device {device} runs {action}, a {action.kind.value} action, but {why}")
    home = schedule.stage_to_device[action.stage] if action.stage < len(schedule.stage_to_device) else None
    if home is not None and home != device:
        problems.append(
            f"{action} is in device {device}'s order, but stage {action.stage} lives on device "
            f"{home}; only the device holding a stage's weights can run it"
        )
    return problems


def _bookkeeping(schedule: Schedule, keyed: list[list[Key]]) -> list[str]:
    problems: list[str] = []
    p, n_stages, m = schedule.n_devices, schedule.n_stages, schedule.n_microbatches
    homes = schedule.stage_to_device
    if len(homes) != n_stages:
        problems.append(
            f"stage_to_device has {len(homes)} entries but the schedule has {n_stages} stages; "
            "it needs one device per stage"
        )
    problems += [
        f"stage {stage} is placed on device {device}, but there are only devices 0..{p - 1}"
        for stage, device in enumerate(homes)
        if not 0 <= device < p
    ]
    kinds = _expected_kinds(schedule)
    letters = {kind.value for kind in kinds}
    seen: dict[Key, tuple[int, int]] = {}  # action -> (device, position) where it first appears
    again: dict[Key, list[tuple[int, int]]] = {}  # an action written more than once -> every place
    fine = 0  # actions in place, each counted once: all of them there means none is missing
    for device, order in enumerate(keyed):
        for position, key in enumerate(order):
            first = key not in seen
            if first:
                seen[key] = (device, position)
            else:
                again.setdefault(key, [seen[key]]).append((device, position))
            stage, letter, mb = key
            if 0 <= stage < len(homes) and homes[stage] == device and 0 <= mb < m and letter in letters:
                fine += first
                continue  # the common case: nothing to say
            problems += _action_problems(schedule, device, schedule.orders[device][position])
    for key in (key for key in seen if key in again):  # in the order of their first appearance
        where = ", ".join(f"device {d} position {i}" for d, i in again[key])
        problems.append(
            f"{Action(key[0], Kind(key[1]), key[2])} appears {len(again[key])} times ({where}); each action "
            "must run exactly once"
        )
    if fine == n_stages * len(kinds) * m:
        return problems
    for stage, kind, mb in itertools.product(range(n_stages), kinds, range(m)):
        if (stage, kind.value, mb) not in seen:
            home = homes[stage] if stage < len(homes) else "?"
            problems.append(
                f"{describe(Action(stage, kind, mb))} is missing: device {home} holds stage {stage} "
                "and must run it once"
            )
    return problems


def _run(schedule: Schedule, orders: list[list[Key]]) -> tuple[list[tuple[int, int]], list[int]]:
    """Execute the orders: devices take turns (0, 1, ..., p-1, then again), each running its next
    action if what that action needs has run, until a whole round moves nothing. Returns what ran,
    as (device, position) in that order, and where each device stopped.

    The rounds are not played one by one (p devices x up to p rounds: quadratic, hours at p=333,333).
    An action's turn follows from its needs': device d runs its next action in the first round after
    its previous one in which every need ran before d's turn, that is in round ``r' + (d' >= d)`` for
    a need that ran in round r' on device d'. A heap hands out the turns in order, and a finished
    action wakes the devices waiting for it: O(A log p) for A actions, the same order as the rounds."""
    n_stages, split = schedule.n_stages, schedule.split_backward
    done: dict[Key, tuple[int, int]] = {}  # action -> (round, device) of the turn it ran in
    waiting: dict[Key, list[int]] = defaultdict(list)  # an action not run yet -> devices that need it
    position = [0] * schedule.n_devices
    last_round = [-1] * schedule.n_devices
    heappush, heappop = heapq.heappush, heapq.heappop
    turns: list[tuple[int, int]] = []  # (round, device): a device whose next action can run then

    def offer(device: int) -> None:
        """Queue `device`'s next action if all it needs has run, else wait for the first missing one."""
        order, i = orders[device], position[device]
        if i >= len(order):
            return
        turn = last_round[device] + 1
        for need in inputs_of(*order[i], n_stages, split):  # the one rule (schedule.py)
            if need is None:
                continue
            when = done.get(need)
            if when is None:
                waiting[need].append(device)
                return
            if when[0] + (when[1] >= device) > turn:
                turn = when[0] + (when[1] >= device)
        heappush(turns, (turn, device))

    for device in range(schedule.n_devices):
        offer(device)
    ran: list[tuple[int, int]] = []
    while turns:
        turn, device = heappop(turns)
        key = orders[device][position[device]]
        done.setdefault(key, (turn, device))  # an action written twice counts from its first run
        ran.append((device, position[device]))
        position[device] += 1
        last_round[device] = turn
        for other in waiting.pop(key, ()):
            offer(other)
        offer(device)
    return ran, position


def _deadlock(
    schedule: Schedule, keyed: list[list[Key]], ran: list[tuple[int, int]], position: list[int]
) -> list[str]:
    done = {keyed[d][i] for d, i in ran}
    stuck = [d for d, order in enumerate(schedule.orders) if position[d] < len(order)]
    if not stuck:
        return []
    runner: dict[Action, int] = {}  # the (first) device whose order holds an action
    for device, order in enumerate(schedule.orders):
        for action in order:
            runner.setdefault(action, device)
    problems = []
    waits_on: dict[int, int | None] = {}
    for device in stuck:
        action = schedule.orders[device][position[device]]
        reasons = []
        waits_on[device] = None
        for need in dependencies(action, schedule):
            if key_of(need) in done:
                continue
            other = runner.get(need)
            if other is None:
                reasons.append(f"it needs {describe(need)}, which no device runs")
                continue
            waits_on[device] = other
            blocker = schedule.orders[other][position[other]]
            if other == device:
                why = "this same device runs only later in its order"
            elif blocker == need:
                why = f"device {other} cannot run yet either (see device {other})"
            else:
                why = f"device {other} runs only after {blocker}, where device {other} is stuck"
            reasons.append(f"it needs {describe(need)}, which {why}")
        problems.append(f"deadlock: device {device} is stuck at {action}: " + "; ".join(reasons))
    if cycle := _find_cycle(waits_on):
        circle = " -> ".join(f"device {d}" for d in cycle)
        problems.append(
            f"deadlock: devices wait on each other in a circle: {circle}; none of them can ever move"
        )
    return problems


def _find_cycle(waits_on: dict[int, int | None]) -> list[int]:
    """The first circle of devices waiting on each other (a device waiting on itself is none), in
    O(devices): a walk that reaches a device an earlier walk passed ends where that one ended."""
    walked: set[int] = set()
    for start in waits_on:
        path, on_path, device = [], {}, start
        while device is not None and device not in on_path and device not in walked:
            on_path[device] = len(path)
            path.append(device)
            device = waits_on.get(device)
        walked |= on_path.keys()
        if device in on_path and device != path[-1]:
            return path[on_path[device] :] + [device]
    return []


MAX_ACTIONS = 2_000_000  # the most check() reads, about 15 s on a busy laptop: a typo must not take hours


def check(schedule: Schedule) -> list[str]:
    """Every problem with `schedule`, as sentences; an empty list means it is valid."""
    return _checked(schedule)[0]


def validate(schedule: Schedule) -> None:
    """Raise ScheduleError listing every problem, or return quietly if the schedule is valid."""
    if problems := check(schedule):
        raise ScheduleError(getattr(schedule, "name", "?"), problems)


def execution_order(schedule: Schedule) -> list[Action]:
    """Every action of a valid `schedule`, in one order that respects what each needs: the devices'
    turns of ``_run``. The validator, the simulator and the local engine all run a schedule in this
    order (a ScheduleError, with every problem, if it cannot run)."""
    problems, ran = _checked(schedule)
    if problems:
        raise ScheduleError(getattr(schedule, "name", "?"), problems)
    return [schedule.orders[d][i] for d, i in ran]


def _checked(schedule: Schedule) -> tuple[list[str], list[tuple[int, int]]]:
    """(every problem, the (device, position) of each action in the order it ran)."""
    try:  # students' odd input (text for an action, a flat list of actions) gets a message, not a crash
        n, m = schedule.n_stages, schedule.n_microbatches
        whole = type(n) is int and type(m) is int and min(n, m) >= 1  # before 3 * n * m: "4" * 10**9 is huge
        if not (whole and max(3 * n * m, sum(len(order) for order in schedule.orders)) <= MAX_ACTIONS):
            return [
                f"n_stages={n!r}, n_microbatches={m!r}: whole numbers >= 1 are needed, and at most "
                f"{MAX_ACTIONS:,} actions (3 x n_stages x n_microbatches, and in the orders)"
            ], []
        keyed = _keyed(schedule)
        ran, position = _run(schedule, keyed)
        return _bookkeeping(schedule, keyed) + _deadlock(schedule, keyed, ran, position), ran
    except (AttributeError, LookupError, TypeError) as err:
        return [
            f"cannot read this schedule ({type(err).__name__}: {err}): it needs one list of actions per "
            "device, each Action(0, Kind.F, 0) or Action.parse('0F0'), and a device number per stage"
        ], []
