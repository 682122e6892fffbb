"""The automatic scheduler on a V (two stages per device, stage s and 2p-1-s on device s): valid,
timed as the simulator times it, within its memory limit, never worse than ZB-V, V-Half or V-Min at
their memory, and PyTorch's loader takes its CSV. Trained for real in
tests/autoschedule/test_zero_bubble_frontier_training.py."""

from __future__ import annotations

import pytest
from support.torch_csv import assert_torch_loads

from course_lib.autoschedule import auto_zero_bubble as azb
from course_lib.schedules.controllable_memory import v_half_memory, v_min_memory
from course_lib.schedules.torch_csv import read_csv, write_csv
from course_lib.schedules.torch_orders import torch_schedule
from course_lib.schedules.v_shape import v_placement
from course_lib.shelf.costs import Link, StageCosts
from course_lib.shelf.errors import CourseError
from course_lib.shelf.first_schedules import build_schedule
from course_lib.shelf.schedule import Schedule
from course_lib.shelf.simulator import simulate
from course_lib.shelf.validate import check

# one stage's (F, I, W): each stage is half a device's layers
STAGE_COSTS = [StageCosts(0.5, 0.5, 0.5), StageCosts(1.0, 0.5, 0.25), StageCosts(0.5, 1.0, 0.5)]


def grid():
    for p in (1, 2, 3, 4):
        for m in (1, 2, p, 2 * p + 1):
            for costs in STAGE_COSTS:
                for comm in (0.0, 0.4):
                    yield p, m, costs, comm


def test_every_v_plan_is_valid_within_its_limit_and_timed_as_the_simulator_times_it():
    for p, m, costs, comm in grid():
        for limit in sorted({1, (p + 2) / 2, p, 1.5 * p}):
            pb = azb.problem(p, m, limit, costs, comm, placement="v")
            assert pb.comm[p - 1] == 0.0  # the turn of the V stays on one device
            for sw, plan in azb.heuristic_orders(pb).items():
                sched = Schedule("t", 2 * p, m, plan.orders(), v_placement(p), split_backward=True)
                assert check(sched) == [], (p, m, limit, sw)
                tl = simulate(sched, costs, links=Link(latency_s=comm))
                assert plan.step == pytest.approx(tl.makespan, abs=1e-9), (p, m, limit, sw)
                # memory in micro-batches of a device's layers: one stage's micro-batch counts 1/2
                assert max(tl.peak_inflight(d) for d in range(p)) / 2 <= limit + 1e-9, (p, m, limit)


@pytest.mark.parametrize("name, memory", [("zb-v", lambda p: p), ("v-half", v_half_memory),
                                          ("v-min", v_min_memory)])  # fmt: skip
def test_never_worse_than_the_handcrafted_v_at_its_memory(name, memory):
    for p, m, costs, comm in grid():
        if name != "zb-v" and (p < 3 or m < p):  # V-Min, V-Half: p >= 3 and m >= p only, to keep it short
            continue
        links = Link(latency_s=comm)
        hand = simulate(build_schedule(name, p, m), costs, links=links).makespan
        ours = azb.auto_zero_bubble(p, m, min(memory(p), m), costs, comm, placement="v")
        assert ours.stage_to_device == v_placement(p)
        assert simulate(ours, costs, links=links).makespan <= hand + 1e-9, (p, m, costs, comm)


def test_less_memory_costs_bubble_on_a_v_too():
    p, m, costs = 8, 24, StageCosts(0.5, 0.5, 0.5)
    rates = [simulate(azb.auto_zero_bubble(p, m, limit, costs, placement="v"), costs).bubble_fraction
             for limit in ((p + 4) / 3, (p + 2) / 2, p)]  # fmt: skip
    assert rates[0] > rates[1] > rates[2]
    assert rates[2] == pytest.approx(simulate(build_schedule("zb-v", p, m), costs).bubble_fraction)


def test_bad_placement_is_refused():
    with pytest.raises(CourseError, match="placement must be one of"):
        azb.auto_zero_bubble(4, 8, 4, placement="w")


def test_csv_round_trip_and_torchs_zbv_loader(tmp_path):
    p, m = 2, 4
    ours = azb.auto_zero_bubble(p, m, 1.5, StageCosts(1.0, 0.5, 0.25), 0.3, placement="v")
    write_csv(ours, tmp_path / "back.csv")
    back = read_csv(tmp_path / "back.csv")
    assert back.orders == ours.orders and back.stage_to_device == ours.stage_to_device
    assert_torch_loads(ours, torch_schedule("ScheduleZBVZeroBubble", p, m), tmp_path)
