"""The validator: it finds each kind of mistake and explains it in words a student can act on."""

from __future__ import annotations

import contextlib
import io
import textwrap

import pytest

from course_lib.shelf import validate as validate_module
from course_lib.shelf.errors import CourseError
from course_lib.shelf.first_schedules import SCHEDULES, build_schedule
from course_lib.shelf.schedule import Action, Kind, Schedule, dependencies
from course_lib.shelf.validate import ScheduleError, check, describe, execution_order, validate


def parse_orders(*rows: str) -> list[list[Action]]:
    return [[Action.parse(a) for a in row.split()] for row in rows]


def test_valid_schedule_passes_silently():
    validate(build_schedule("1f1b", 4, 8))
    assert check(build_schedule("zb-h1", 3, 5)) == []


def test_swapped_pair_deadlock_names_devices_actions_and_the_cycle():
    s = build_schedule("1f1b", 4, 8)
    s.orders[1][1], s.orders[1][3] = s.orders[1][3], s.orders[1][1]  # device 1: 1F0 1B0 1F2 1F1 ...
    assert check(s) == [
        "deadlock: device 0 is stuck at 0B0: it needs 1B0 (stage 1's backward for micro-batch 0), "
        "which device 1 cannot run yet either (see device 1)",
        "deadlock: device 1 is stuck at 1B0: it needs 2B0 (stage 2's backward for micro-batch 0), "
        "which device 2 runs only after 2F1, where device 2 is stuck",
        "deadlock: device 2 is stuck at 2F1: it needs 1F1 (stage 1's forward of micro-batch 1), "
        "which device 1 runs only after 1B0, where device 1 is stuck",
        "deadlock: device 3 is stuck at 3F1: it needs 2F1 (stage 2's forward of micro-batch 1), "
        "which device 2 cannot run yet either (see device 2)",
        "deadlock: devices wait on each other in a circle: device 1 -> device 2 -> device 1; "
        "none of them can ever move",
    ]


def test_harmless_swap_is_not_an_error():
    s = build_schedule("1f1b", 4, 8)
    s.orders[1][2], s.orders[1][3] = s.orders[1][3], s.orders[1][2]  # 1B0 one step earlier: still runs
    assert check(s) == []


def test_backward_before_own_forward_on_the_same_device():
    s = Schedule("hand", 2, 1, parse_orders("0F0 0B0", "1B0 1F0"), [0, 1])
    assert check(s) == [
        "deadlock: device 0 is stuck at 0B0: it needs 1B0 (stage 1's backward for micro-batch 0), "
        "which device 1 cannot run yet either (see device 1)",
        "deadlock: device 1 is stuck at 1B0: it needs 1F0 (stage 1's forward of micro-batch 0), "
        "which this same device runs only later in its order",
    ]


def test_missing_action_is_named_with_its_device():
    s = build_schedule("gpipe", 2, 3)
    s.orders[1].remove(Action.parse("1B2"))
    assert check(s) == [
        "1B2 (stage 1's backward for micro-batch 2) is missing: device 1 holds stage 1 and must run it once",
        "deadlock: device 0 is stuck at 0B2: it needs 1B2 (stage 1's backward for micro-batch 2), "
        "which no device runs",
    ]


def test_duplicate_wrong_device_wrong_kind_and_unknown_microbatch():
    s = build_schedule("gpipe", 2, 2)
    s.orders[1].append(Action.parse("1F0"))  # twice on device 1
    s.orders[0].append(Action.parse("1B1"))  # stage 1 on device 0
    s.orders[0].append(Action.parse("0W0"))  # W in a schedule with full backwards
    s.orders[0].append(Action.parse("0F5"))  # micro-batch 5 with m=2
    problems = check(s)
    assert (
        "1F0 appears 2 times (device 1 position 0, device 1 position 4); each action must run exactly once"
        in (problems)
    )
    assert (
        "1B1 is in device 0's order, but stage 1 lives on device 1; only the device holding a stage's "
        "weights can run it" in problems
    )
    assert (
        "device 0 runs 0W0, a W action, but this schedule uses full backwards B; I and W need "
        "split_backward=True" in problems
    )
    assert "device 0 runs 0F5, but micro-batch 5 does not exist (m=2, so micro-batches are 0..1)" in problems


def test_validate_raises_schedule_error_with_every_problem():
    s = build_schedule("zb-h1", 2, 2)
    s.orders[0] = [a for a in s.orders[0] if str(a) != "0W1"]
    with pytest.raises(ScheduleError) as err:
        validate(s)
    assert isinstance(err.value, CourseError)
    assert err.value.problems == [
        "0W1 (stage 0's weight gradient for micro-batch 1) is missing: "
        "device 0 holds stage 0 and must run it once"
    ]
    assert "schedule 'zb-h1' has 1 problem(s)" in str(err.value)


def test_describe():
    assert describe(Action.parse("2I3")) == "2I3 (stage 2's input gradient for micro-batch 3)"


@pytest.mark.parametrize("name", list(SCHEDULES))
def test_execution_order_is_a_valid_global_order(name):
    s = build_schedule(name, 4, 8, 2 if SCHEDULES[name].uses_virtual else 1)
    order = execution_order(s)
    assert sorted(order) == sorted(s.actions())  # everything, once
    seen: set[Action] = set()
    for action in order:  # dependencies first
        assert all(n in seen for n in dependencies(action, s)), action
        seen.add(action)
    for d, device_order in enumerate(s.orders):  # each device's own order is kept
        assert [a for a in order if s.device_of(a.stage) == d] == device_order


def test_execution_order_round_robins_devices():
    assert [str(a) for a in execution_order(build_schedule("1f1b", 2, 2))] == [
        "0F0", "1F0", "0F1", "1B0", "0B0", "1F1", "1B1", "0B1",
    ]  # fmt: skip


def test_execution_order_refuses_a_deadlocked_schedule():
    s = build_schedule("1f1b", 2, 2)
    s.orders[1].reverse()
    with pytest.raises(ScheduleError, match="deadlock: device 1 is stuck at 1B1"):
        execution_order(s)


def test_the_docstring_example_is_a_real_deadlock():
    """Run the module docstring's "Try it" block as a student would paste it."""
    doc = validate_module.__doc__
    block = textwrap.dedent(doc[doc.index("Try it::") + len("Try it::") :])
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(block, {})  # noqa: S102  our own docstring
    circle = "deadlock: devices wait on each other in a circle: device 1 -> device 2 -> device 1"
    assert circle in printed.getvalue()


def test_strings_and_wrong_shapes_get_a_teaching_message_not_an_attribute_error():
    how = "it needs one list of actions per device, each Action(0, Kind.F, 0) or Action.parse('0F0')"
    text = Schedule("mine", 2, 1, [["0F0", "0B0"], ["1F0", "1B0"]], [0, 1])
    flat = Schedule("mine", 1, 1, parse_orders("0F0 0B0")[0], [0])  # type: ignore[arg-type]  # no list per device
    odd_kind = Schedule("mine", 1, 1, [[Action(0, "F", 0), Action(0, Kind.B, 0)]], [0])  # type: ignore[arg-type]
    float_stage = Schedule("mine", 1, 1, [[Action(0.0, Kind.F, 0)]], [0])  # type: ignore[arg-type]
    text_device = Schedule("mine", 1, 1, [parse_orders("0F0 0B0")[0]], ["0"])  # type: ignore[list-item]
    for schedule in (text, flat, odd_kind, float_stage, text_device, [["0F0"]], "0F0 0B0", None):
        (problem,) = check(schedule)  # type: ignore[arg-type]
        assert problem.startswith("cannot read this schedule (") and how in problem, problem
    assert check(text) == [
        "cannot read this schedule (AttributeError: 'str' object has no attribute 'stage'): it needs one "
        "list of actions per device, each Action(0, Kind.F, 0) or Action.parse('0F0'), and a device number "
        "per stage"
    ]
    with pytest.raises(ScheduleError, match="cannot read this schedule"):
        validate("0F0 0B0")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("n_stages", "n_microbatches", "actions"),
    [(1, 10**9, 2), (10**6, 1, 2), (1, 1, 2 * 10**6 + 1), (1, "1", 2)],
)
def test_sizes_beyond_the_limit_are_refused_before_any_work(n_stages, n_microbatches, actions):
    orders = [[Action(0, Kind.F, 0)] * (actions - 1) + [Action(0, Kind.B, 0)]]  # one object many times: cheap
    assert check(Schedule("huge", n_stages, n_microbatches, orders, [0])) == [
        f"n_stages={n_stages!r}, n_microbatches={n_microbatches!r}: whole numbers >= 1 are needed, and at "
        "most 2,000,000 actions (3 x n_stages x n_microbatches, and in the orders)"
    ]


def test_a_long_problem_list_is_capped_in_the_error():
    s = build_schedule("gpipe", 8, 64)
    s.orders = [[] for _ in s.orders]
    with pytest.raises(ScheduleError) as err:
        validate(s)
    assert len(err.value.problems) == 8 * 64 * 2  # every problem is kept for code that reads them
    message = str(err.value)
    assert message.startswith("schedule 'gpipe' has 1024 problem(s)") and len(message.splitlines()) <= 21
    assert message.endswith("characters cut]") and len(message) < 2100
