"""The simulator against the closed-form results of the papers (REFERENCES.md lists them), plus links.

Grid: p in 1..16 and m in 1..64, sampled (edges included) so the file runs in a few seconds.
"""

from __future__ import annotations

import pytest

from course_lib.cli.simulate_command import timeline_summary
from course_lib.shelf.costs import Link, StageCosts
from course_lib.shelf.errors import CourseError
from course_lib.shelf.first_schedules import build_schedule
from course_lib.shelf.schedule import (
    Action,
    Kind,
    Schedule,
    consumer_of,
    dependencies,
    inputs_of,
    key_of,
    messages,
    producer_of,
)
from course_lib.shelf.simulator import simulate
from course_lib.shelf.timeline import MEASURED_COMPUTE, SIMULATED

PS = [1, 2, 3, 4, 5, 8, 11, 16]
MS = [1, 2, 3, 4, 7, 8, 16, 31, 64]
GRID = [(p, m) for p in PS for m in MS]


@pytest.mark.parametrize("name", ["gpipe", "1f1b"])
def test_idle_fraction_equals_gpipe_formula(name):
    # equal costs, free links: idle share of the step = (p-1)/(m+p-1), on every device and overall
    for p, m in GRID:
        tl = simulate(build_schedule(name, p, m), StageCosts(1.0, 1.0, 1.0))
        expected = (p - 1) / (m + p - 1)
        assert tl.bubble_fraction == pytest.approx(expected, abs=1e-12), (name, p, m)
        for d in range(p):
            assert tl.idle_fraction(d) == pytest.approx(expected, abs=1e-12), (name, p, m, d)
        assert tl.makespan == pytest.approx((m + p - 1) * 3.0)  # f + (b + w) = 3 per micro-batch


def test_formula_holds_for_unequal_forward_and_backward():
    tl = simulate(build_schedule("1f1b", 6, 10), StageCosts(f=1.0, i=1.5, w=0.5))
    assert tl.bubble_fraction == pytest.approx(5 / 15)
    assert tl.makespan == pytest.approx(15 * 3.0)


@pytest.mark.parametrize("v", [2, 3, 4])
def test_interleaved_idle_is_one_over_v_of_1f1b(v):
    # each device does the same total work: its v virtual stages cost 1/v of a full stage each
    for p in [2, 3, 4, 8, 16]:
        for m in [p, 2 * p, 4 * p]:
            one = simulate(build_schedule("1f1b", p, m), StageCosts(1.0, 1.0, 1.0))
            inter = simulate(
                build_schedule("interleaved-1f1b", p, m, virtual=v), StageCosts(1 / v, 1 / v, 1 / v)
            )
            for d in range(p):
                assert inter.busy(d) == pytest.approx(one.busy(d))
                assert inter.idle(d) == pytest.approx(one.idle(d) / v), (p, m, v, d)


def test_interleaved_with_fewer_microbatches_than_devices_does_not_get_the_full_gain():
    # recorded, not a law: with m < p the warm-up cannot fill the pipe and the 1/v gain shrinks
    p, m, v = 8, 4, 2
    one = simulate(build_schedule("1f1b", p, m))
    inter = simulate(build_schedule("interleaved-1f1b", p, m, virtual=v), StageCosts(0.5, 0.5, 0.5))
    assert one.idle(0) == pytest.approx(21.0)
    assert inter.idle(0) == pytest.approx(16.5)  # not 10.5


def test_zb_h1_has_one_third_of_1f1b_idle_time():
    for p in [2, 3, 4, 5, 8, 16]:
        for m in [p, p + 1, 2 * p, 64]:
            one = simulate(build_schedule("1f1b", p, m), StageCosts(1.0, 1.0, 1.0))
            zb = simulate(build_schedule("zb-h1", p, m), StageCosts(1.0, 1.0, 1.0))
            for d in range(p):
                assert one.idle(d) == pytest.approx(3 * (p - 1))  # (p-1)(T_F + T_B + T_W)
                assert zb.idle(d) == pytest.approx(one.idle(d) / 3), (p, m, d)  # (p-1)(T_F + T_B - T_W)


def test_1f1b_holds_at_most_p_where_gpipe_holds_m():
    for p, m in GRID:
        one = simulate(build_schedule("1f1b", p, m))
        gp = simulate(build_schedule("gpipe", p, m))
        assert one.peak_inflight(0) == min(p, m), (p, m)
        assert gp.peak_inflight(0) == m, (p, m)
        for d in range(p):
            assert one.peak_inflight(d) == min(p - d, m)


def test_peak_stash_bytes_follow_inflight_count():
    tl = simulate(build_schedule("gpipe", 3, 5), boundary_bytes=100)
    # without stash sizes, a stage is charged the boundary tensor it receives: a lower bound
    assert tl.stash_bytes == [100, 100, 100] and tl.stash_is_lower_bound
    assert [tl.peak_stash_bytes(d) for d in range(3)] == [500, 500, 500]
    tl = simulate(build_schedule("1f1b", 3, 5), boundary_bytes=[10, 20], stash_bytes=[7, 8, 9])
    assert tl.boundary_bytes == [10, 20] and not tl.stash_is_lower_bound
    assert [tl.peak_stash_bytes(d) for d in range(3)] == [21, 16, 9]


@pytest.mark.parametrize("p", [2, 3, 4, 8, 16])
@pytest.mark.parametrize("m", [1, 4, 16])
def test_link_latency_adds_at_least_2_p_minus_1_latencies_to_gpipe(p, m):
    latency = 0.7
    free = simulate(build_schedule("gpipe", p, m))
    slow = simulate(build_schedule("gpipe", p, m), links=Link(latency_s=latency))
    assert slow.makespan >= free.makespan + 2 * (p - 1) * latency - 1e-9
    # GPipe with equal costs: exactly the fill and the drain each cross p-1 links once
    assert slow.makespan == pytest.approx(free.makespan + 2 * (p - 1) * latency)


def test_one_slow_boundary_among_free_ones():
    links = [Link(), Link(latency_s=5.0), Link()]
    tl = simulate(build_schedule("gpipe", 4, 2), links=links)
    assert tl.makespan == pytest.approx(simulate(build_schedule("gpipe", 4, 2)).makespan + 10.0)


def test_bandwidth_serialises_messages_but_latency_pipelines():
    # p=2, f=1: device 0 finishes 0F0 at 1 and 0F1 at 2; each activation needs 3 s on the wire.
    link = Link(latency_s=10.0, bandwidth_Bps=100.0)
    tl = simulate(build_schedule("gpipe", 2, 2), StageCosts.fused(f=1.0, b=1.0), 300, link)
    fwd = sorted((t for t in tl.transfers if t.action.kind is Kind.F), key=lambda t: t.start)
    assert [(t.start, t.end) for t in fwd] == [(1.0, 14.0), (4.0, 17.0)]  # 2nd waits for the wire
    starts = {str(s.action): s.start for s in tl.spans}
    assert starts["1F0"] == 14.0 and starts["1F1"] == 17.0  # not 14 + 13: latency overlapped
    assert all(t.nbytes == 300 for t in tl.transfers)
    assert len(tl.transfers) == 4  # 2 activations forward, 2 gradients back


def test_opposite_directions_do_not_share_a_wire():
    link = Link(latency_s=0.0, bandwidth_Bps=1.0)
    tl = simulate(build_schedule("1f1b", 2, 4), StageCosts.fused(f=1.0, b=1.0), 1, link)
    by_wire: dict[tuple[int, int], list] = {}
    for t in tl.transfers:
        by_wire.setdefault((t.src_device, t.dst_device), []).append(t)
    for transfers in by_wire.values():  # within one direction no two messages overlap on the wire
        transfers.sort(key=lambda t: t.start)
        for a, b in zip(transfers, transfers[1:], strict=False):
            assert b.start >= a.start + 1.0 - 1e-12
    assert set(by_wire) == {(0, 1), (1, 0)}


def test_same_device_dependencies_are_free():
    # p=1 with 2 virtual stages: stage 0 -> stage 1 never leaves device 0, so the link is not used
    s = build_schedule("interleaved-1f1b", 1, 4, virtual=2)
    tl = simulate(s, boundary_bytes=10**9, links=Link(latency_s=100.0, bandwidth_Bps=1.0))
    assert tl.makespan == pytest.approx(simulate(s).makespan)
    assert tl.transfers == []


def test_per_stage_costs_and_slowest_stage_sets_the_pace():
    f = [1.0, 1.0, 3.0, 1.0]
    tl = simulate(build_schedule("gpipe", 4, 16), StageCosts.fused(f=f, b=f))
    assert tl.makespan >= 16 * (3.0 + 3.0)
    assert tl.busy(2) == pytest.approx(16 * 6.0)
    assert min(range(4), key=tl.idle) == 2  # the slow stage is never starved


def test_deadlock_names_device_and_action():
    orders = [
        [Action(0, Kind.F, 0), Action(0, Kind.B, 0)],
        [Action(1, Kind.B, 0), Action(1, Kind.F, 0)],  # backward before its own forward
    ]
    bad = Schedule("hand-written", 2, 1, orders, [0, 1])
    with pytest.raises(CourseError) as err:
        simulate(bad)
    text = str(err.value)
    assert "device 1" in text and "1B0" in text and "deadlock" in text


def test_cross_device_deadlock():
    orders = [
        [Action(0, Kind.F, 0), Action(0, Kind.B, 0), Action(0, Kind.F, 1), Action(0, Kind.B, 1)],
        [Action(1, Kind.F, 1), Action(1, Kind.B, 1), Action(1, Kind.F, 0), Action(1, Kind.B, 0)],
    ]
    with pytest.raises(CourseError, match="device 0"):
        simulate(Schedule("crossed", 2, 2, orders, [0, 1]))


def test_bad_inputs_say_what_is_wrong():
    s = build_schedule("1f1b", 4, 4)
    with pytest.raises(CourseError, match="3 entries but the schedule has 4 stages"):
        simulate(s, StageCosts(f=[1, 2, 3]))
    with pytest.raises(CourseError, match="2 entries but the pipeline has 3 stage boundaries"):
        simulate(s, links=[Link(), Link()])
    with pytest.raises(CourseError, match="boundary_bytes must be a finite number >= 0"):
        simulate(s, boundary_bytes=-1)
    with pytest.raises(CourseError, match="stash_bytes has 2 entries but the schedule has 4 stages"):
        simulate(s, stash_bytes=[1, 2])
    with pytest.raises(CourseError, match="StageCosts.w must be a finite number >= 0"):
        simulate(s, StageCosts(w=-1.0))
    moved = build_schedule("1f1b", 2, 2)
    moved.orders[0].append(moved.orders[1].pop())
    with pytest.raises(CourseError, match="lives on device 1"):
        simulate(moved)
    twice = build_schedule("1f1b", 2, 2)
    twice.orders[0].append(twice.orders[0][0])
    with pytest.raises(CourseError, match="0F0 appears 2 times"):
        simulate(twice)
    with pytest.raises(CourseError, match="unknown timeline source"):
        simulate(s, source="guessed")


def test_dependencies_producers_and_consumers_are_one_rule():
    # dependencies() is inputs_of() on Actions; consumer_of() is producer_of() read backwards
    for name, p, m, v in [("1f1b", 3, 4, 1), ("zb-h1", 3, 4, 1), ("interleaved-1f1b", 2, 4, 2)]:
        s = build_schedule(name, p, m, virtual=v)
        for a in s.actions():
            rule = inputs_of(a.stage, a.kind.value, a.microbatch, s.n_stages, s.split_backward)
            assert [key_of(d) for d in dependencies(a, s)] == [k for k in rule if k is not None], (name, a)
            if (producer := producer_of(a, s)) is not None:
                assert consumer_of(producer, s) == a, (name, a)
        assert sum(consumer_of(a, s) is not None for a in s.actions()) == 2 * (s.n_stages - 1) * m


@pytest.mark.parametrize(
    "name,p,m,v",
    [("gpipe", 3, 4, 1), ("1f1b", 4, 8, 1), ("zb-h1", 3, 6, 1), ("latency-aware-1f1b", 4, 8, 1),
     ("interleaved-1f1b", 2, 4, 2), ("interleaved-1f1b", 3, 6, 3), ("interleaved-1f1b", 1, 4, 2)],
)  # fmt: skip
def test_transfers_are_the_messages_the_schedule_derives(name, p, m, v):
    # the simulator's routes come from schedule.message_of: one transfer per message, same ends
    s = build_schedule(name, p, m, virtual=v)
    tl = simulate(s, boundary_bytes=5, links=Link(latency_s=0.5))
    sent = sorted((str(t.action), t.src_device, t.dst_device, t.nbytes) for t in tl.transfers)
    assert sent == sorted((str(msg.producer), msg.src, msg.dst, 5) for msg in messages(s))


def test_fused_backward_costs_i_plus_w():
    s = build_schedule("1f1b", 3, 4)
    fused = simulate(s, StageCosts.fused(f=1.0, b=3.0))
    assert fused.makespan == pytest.approx(simulate(s, StageCosts(f=1.0, i=2.0, w=1.0)).makespan)
    assert {span.duration for span in fused.spans if span.action.kind is Kind.B} == {3.0}


def test_timeline_carries_source_and_summary():
    tl = simulate(build_schedule("interleaved-1f1b", 2, 4, virtual=2), boundary_bytes=[1, 2, 3])
    assert (tl.n_devices, tl.n_stages, tl.n_microbatches, tl.boundary_bytes) == (2, 4, 4, [1, 2, 3])
    tl = simulate(build_schedule("1f1b", 3, 6), source=MEASURED_COMPUTE)
    assert tl.source == MEASURED_COMPUTE
    tl = simulate(build_schedule("1f1b", 3, 6))
    assert tl.source == SIMULATED
    summary = timeline_summary(tl)
    assert summary["source"] == SIMULATED and summary["makespan"] == pytest.approx(24.0)
    assert [d["peak_inflight_microbatches"] for d in summary["per_device"]] == [3, 2, 1]
    assert all(d["busy"] + d["idle"] == pytest.approx(24.0) for d in summary["per_device"])


def test_zb_h1_peak_memory_is_1f1b_peak():
    # counting activations as held until W: every device reaches p, the first device's 1F1B peak
    for p, m in [(2, 4), (4, 8), (8, 32)]:
        zb = simulate(build_schedule("zb-h1", p, m))
        one = simulate(build_schedule("1f1b", p, m))
        assert [zb.peak_inflight(d) for d in range(p)] == [p] * p
        assert max(zb.peak_inflight(d) for d in range(p)) == one.peak_inflight(0) == p


def test_timeline_index_follows_appended_spans():
    tl = simulate(build_schedule("1f1b", 2, 2))
    assert tl.makespan == pytest.approx(9.0)
    last = tl.spans_of(0)[-1]
    tl.spans.append(type(last)(0, Action(0, Kind.F, 5), 20.0, 21.0))
    assert tl.makespan == pytest.approx(21.0) and tl.busy(0) == pytest.approx(7.0)


def test_the_shelf_simulates_alone_and_names_the_module_that_registers_the_rest():
    # a fresh interpreter: the shelf's simulator imports nothing of course_lib outside the shelf (no
    # fast path, no rooms), runs 1F1B through its loop, and says where the other schedules come from
    import subprocess
    import sys

    code = """
import sys
from course_lib.shelf.errors import CourseError
from course_lib.shelf.first_schedules import build_schedule
from course_lib.shelf.simulator import simulate
print(simulate(build_schedule("1f1b", 4, 8)).bubble_fraction)
try:
    build_schedule("zb-v", 4, 8)
except CourseError as err:
    print(err)
print(sorted(m for m in sys.modules if m.startswith("course_lib.") and not m.startswith("course_lib.shelf")
             and m != "course_lib.moved_modules"))  # the package installs its finder for old paths
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    bubble, refusal, outside = out.splitlines()
    assert float(bubble) == pytest.approx(3 / 11)
    assert "unknown schedule 'zb-v'" in refusal and "import course_lib.schedules" in refusal
    assert outside == "[]"
