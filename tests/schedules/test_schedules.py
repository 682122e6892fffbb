"""Builders: every schedule is valid over a grid, has the right shape, and bad input is named.

Their bubbles and peak memory are checked against the simulator in test_schedules_closed_forms.py."""

from __future__ import annotations

import pytest

from course_lib.shelf.errors import CourseError
from course_lib.shelf.first_schedules import (
    SCHEDULES,
    build_schedule,
    gpipe,
    naive,
    one_f_one_b,
    resolve_name,
)
from course_lib.shelf.schedule import Action
from course_lib.shelf.validate import check


def grid(name: str):
    info = SCHEDULES[name]
    vs = (info.fixed_virtual,) if info.fixed_virtual else (1, 2, 3) if info.uses_virtual else (1,)
    return [(p, m, v) for p in range(1, 9) for m in range(1, 17) for v in vs]


@pytest.mark.parametrize("name", list(SCHEDULES))
def test_every_builder_is_valid_over_the_grid(name):
    built = rejected = 0
    for p, m, v in grid(name):
        try:
            schedule = build_schedule(name, p, m, v)
        except CourseError:
            rejected += 1
            continue
        built += 1
        assert check(schedule) == [], (name, p, m, v)
        assert schedule.n_devices == p and schedule.n_microbatches == m and schedule.n_stages == p * v
    if name in ("interleaved-1f1b", "interleaved-zb"):  # the same rounds rule
        # PyTorch's rule: m a multiple of max(1, m // p); count the (p, m) pairs that break it, per v
        breaking = sum(1 for p in range(1, 9) for m in range(1, 17) if m % max(1, m // p))
        assert rejected == 3 * breaking and breaking > 0
    elif name == "dualpipe-v":  # m >= 2p, as torch's ScheduleDualPipeV
        assert rejected == sum(1 for p in range(1, 9) for m in range(1, 17) if m < 2 * p)
    else:
        assert rejected == 0


def test_names_are_case_insensitive_and_take_pytorch_class_names():
    assert resolve_name("GPipe") == resolve_name("ScheduleGPipe") == "gpipe"
    assert resolve_name("1F1B") == resolve_name("Schedule1F1B") == resolve_name("PipeDream-Flush") == "1f1b"
    assert resolve_name("Interleaved1F1B") == resolve_name("ScheduleInterleaved1F1B") == "interleaved-1f1b"
    assert resolve_name("ZB-H1") == resolve_name("zbh1") == "zb-h1"
    assert resolve_name("NAIVE") == "naive"


@pytest.mark.parametrize(
    "call, named",
    [
        (lambda: build_schedule("pipedream-2bw", 2, 2), "'pipedream-2bw'"),
        (lambda: build_schedule("gpipe", 0, 2), "got 0"),
        (lambda: build_schedule("1f1b", 4, -3), "got -3"),
        (lambda: build_schedule("1f1b", 4, 2.5), "got 2.5"),
        (lambda: build_schedule("gpipe", 4, 8, virtual=2), "got 2"),
        (lambda: build_schedule("interleaved-1f1b", 3, 7, virtual=2), "m=7"),
        (lambda: build_schedule("interleaved-1f1b", 2, 2, virtual=0), "got 0"),
        (lambda: one_f_one_b(3, 4, warmup=[1, 2]), "warmup must give 3 whole numbers >= 0"),
        (lambda: one_f_one_b(2, 4, warmup=[1, -1]), "got [1, -1]"),
    ],
)
def test_bad_input_names_the_value(call, named):
    with pytest.raises(CourseError) as err:
        call()
    assert named in str(err.value)


def test_interleaved_error_says_why_and_what_works():
    with pytest.raises(CourseError) as err:
        build_schedule("interleaved-1f1b", 3, 7, virtual=2)
    text = str(err.value)
    assert "p=3" in text and "2 rounds" in text and "m=6 or m=8" in text
    for m in (6, 8):
        build_schedule("interleaved-1f1b", 3, m, virtual=2)


def test_small_orders_read_as_in_the_lessons():
    assert build_schedule("naive", 2, 2).to_text() == "device 0: 0F0 0B0 0F1 0B1\ndevice 1: 1F0 1B0 1F1 1B1"
    assert build_schedule("gpipe", 2, 3).orders[0] == [
        Action.parse(a) for a in "0F0 0F1 0F2 0B0 0B1 0B2".split()
    ]
    plain = build_schedule("1f1b", 4, 6).to_text().splitlines()
    assert plain[0] == "device 0: 0F0 0F1 0F2 0F3 0B0 0F4 0B1 0F5 0B2 0B3 0B4 0B5"
    assert plain[3] == "device 3: 3F0 3B0 3F1 3B1 3F2 3B2 3F3 3B3 3F4 3B4 3F5 3B5"
    inter = build_schedule("interleaved-1f1b", 2, 4, virtual=2)
    assert inter.stage_to_device == [0, 1, 0, 1]
    assert (
        str(inter).splitlines()[0]
        == "device 0: 0F0 0F1 2F0 2F1 0F2 2B0 0F3 2B1 2F2 0B0 2F3 0B1 2B2 2B3 0B2 0B3"
    )
    zb = build_schedule("zb-h1", 4, 8)
    assert zb.split_backward
    assert " ".join(map(str, zb.orders[3][:12])) == "3F0 3I0 3F1 3I1 3F2 3I2 3F3 3I3 3W0 3F4 3I4 3W1"


def test_1f1b_takes_a_warm_up_per_device():
    # no warm-up at all is the naive schedule; a deeper one is what latency-aware 1F1B builds
    assert one_f_one_b(4, 6, warmup=[0, 0, 0, 0]).orders == build_schedule("naive", 4, 6).orders
    assert one_f_one_b(4, 6, warmup=[3, 2, 1, 0]).orders == build_schedule("1f1b", 4, 6).orders
    deeper = one_f_one_b(3, 6, warmup=[4, 2, 0])
    assert str(deeper).splitlines()[0] == "device 0: 0F0 0F1 0F2 0F3 0F4 0B0 0F5 0B1 0B2 0B3 0B4 0B5"
    assert check(deeper) == []


@pytest.mark.parametrize("builder", [naive, gpipe, one_f_one_b])
def test_builders_called_directly_refuse_bad_sizes(builder):
    with pytest.raises(CourseError, match="n_devices must be a whole number >= 1, got 0"):
        builder(0, 4)
    with pytest.raises(CourseError, match="n_microbatches must be a whole number >= 1, got 2.5"):
        builder(2, 2.5)
