"""Issue 42: one validation. Every consumer of a schedule refuses exactly what shelf/validate.py refuses,
with its message (each problem it names); and takes what it takes.

The consumers: the simulator's loop and its fast path (course_lib/fast_simulator.py), the local engine
(``resolve_schedule``, which ``make_plan`` calls), the distributed engine and torch interop
(``make_spec``, runner distributed and torch-csv: checked in the parent before any process starts) and
the command line (``schedule --from-csv``). A forward-only schedule (inference, lesson 15) is valid: the
simulators play it, and the engines, which train, refuse it by their own rule, naming it.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

import course_lib.engines.torch_pipelining  # noqa: F401 (adds runner= to make_spec)
import course_lib.fast_simulator  # noqa: F401 (registers the fast path)
from course_lib.cli import main
from course_lib.schedules.torch_csv import to_csv_text
from course_lib.shelf.distributed_engine import make_spec
from course_lib.shelf.errors import CourseError
from course_lib.shelf.first_schedules import build_schedule
from course_lib.shelf.local_engine import resolve_schedule
from course_lib.shelf.reference import TrainConfig
from course_lib.shelf.schedule import Action, Kind, Schedule
from course_lib.shelf.simulator import simulate
from course_lib.shelf.validate import check

M = 4
CFG = TrainConfig(n_layers=4, d_model=16, n_heads=2, seq_len=16, batch_size=8, microbatches=M, steps=1)


def edited(schedule: Schedule, device: int, new_order: list[Action], **changes) -> Schedule:
    orders = [list(o) for o in schedule.orders]
    orders[device] = new_order
    return replace(schedule, orders=orders, **changes)


ONE_F_ONE_B = build_schedule("1f1b", 2, M)
ZB = build_schedule("zb-h1", 2, M)
D0, D1 = ONE_F_ONE_B.orders
FORWARD_ONLY = Schedule(
    "inference",
    2,
    M,
    [[Action(s, Kind.F, mb) for mb in range(M)] for s in range(2)],
    [0, 1],
    forward_only=True,
)
SCHEDULES = {
    "1f1b (valid)": ONE_F_ONE_B,
    "zb-h1 (valid)": ZB,
    "interleaved (valid)": build_schedule("interleaved-1f1b", 2, M, 2),
    "forward only (valid)": FORWARD_ONLY,
    "missing 0B0": edited(ONE_F_ONE_B, 0, [a for a in D0 if str(a) != "0B0"]),
    "0F1 twice": edited(ONE_F_ONE_B, 0, [*D0, Action(0, Kind.F, 1)]),
    "a stage on the wrong device": edited(ONE_F_ONE_B, 0, [*D0, Action(1, Kind.F, 0)]),
    "deadlock: 1B0 before 1F0": edited(ONE_F_ONE_B, 1, [D1[1], D1[0], *D1[2:]]),
    "I and W in a fused schedule": edited(ONE_F_ONE_B, 1, [*D1, Action(1, Kind.W, 0)]),
    "B in a split schedule": edited(ZB, 0, [*ZB.orders[0], Action(0, Kind.B, 0)]),
    "micro-batch out of range": edited(ONE_F_ONE_B, 1, [*D1, Action(1, Kind.F, M)]),
    "stage out of range": edited(ONE_F_ONE_B, 1, [*D1, Action(7, Kind.F, 0)]),
    "text for an action": edited(ONE_F_ONE_B, 1, ["1F0", *D1[1:]]),
    "m as text": replace(ONE_F_ONE_B, n_microbatches="4"),
    "forward only with a B": edited(FORWARD_ONLY, 0, [*FORWARD_ONLY.orders[0], Action(0, Kind.B, 0)]),
}


def answer(call) -> str | None:
    """None if `call` accepted the schedule, else the CourseError's message (any other error fails)."""
    try:
        call()
    except CourseError as err:
        return str(err)
    return None


def assert_same_as_the_validator(schedule: Schedule, said: str | None, consumer: str) -> None:
    problems = check(schedule)
    if not problems:
        assert said is None, f"{consumer} refused a valid schedule: {said}"
    else:
        assert said is not None, f"{consumer} accepted a schedule the validator refuses: {problems}"
        missing = [p for p in problems if p not in said]
        assert not missing, f"{consumer} said {said!r}, not the validator's {missing}"


def test_the_table_holds_valid_and_invalid_schedules():
    valid = [name for name, s in SCHEDULES.items() if not check(s)]
    assert valid == [name for name in SCHEDULES if name.endswith("(valid)")]


@pytest.mark.parametrize("name", list(SCHEDULES))
@pytest.mark.parametrize("fast", [False, True])
def test_the_simulator_and_its_fast_path_refuse_what_the_validator_refuses(name, fast):
    schedule = SCHEDULES[name]
    assert_same_as_the_validator(
        schedule, answer(lambda: simulate(schedule, fast=fast)), f"simulate(fast={fast})"
    )


def test_the_fast_path_plays_forward_only_as_the_loop_does():
    assert simulate(FORWARD_ONLY, fast=True).spans == simulate(FORWARD_ONLY, fast=False).spans


@pytest.mark.parametrize("name", list(SCHEDULES))
def test_the_engines_and_torch_interop_refuse_what_the_validator_refuses(name):
    schedule = SCHEDULES[name]
    consumers = {
        "local engine": lambda: resolve_schedule(CFG, schedule, stages=None),
        "distributed engine": lambda: make_spec(CFG, schedule),
        "torch interop (torch-csv)": lambda: make_spec(CFG, schedule, runner="torch-csv"),
    }
    for consumer, call in consumers.items():
        said = answer(call)
        if getattr(schedule, "forward_only", False) and not check(schedule):  # valid, but no training
            assert said is not None and "is forward only (inference): the engines train" in said, (
                consumer,
                said,
            )
            continue
        assert_same_as_the_validator(schedule, said, consumer)


@pytest.mark.parametrize("name", ["1f1b (valid)", "zb-h1 (valid)", "missing 0B0", "deadlock: 1B0 before 1F0"])
def test_the_command_line_refuses_what_the_validator_refuses(name, tmp_path, capsys):
    schedule = SCHEDULES[name]
    path = tmp_path / "s.csv"
    path.write_text(to_csv_text(schedule))
    code = main(["schedule", "--from-csv", str(path)])
    out, err = capsys.readouterr()
    assert_same_as_the_validator(schedule, err if code else None, "schedule --from-csv")
    assert code in (0, 2) and (code == 0) == (not check(schedule)), (code, err)
