"""The simulator's send rule (``simulate(sends=...)``): a send that overlaps compute, the default, against
one that holds its device until the message's last byte is in."""

from __future__ import annotations

import pytest

from course_lib.schedules.latency_aware import latency_aware_1f1b
from course_lib.shelf.costs import Link, StageCosts
from course_lib.shelf.errors import CourseError
from course_lib.shelf.first_schedules import build_schedule
from course_lib.shelf.schedule import Kind
from course_lib.shelf.simulator import simulate, simulate_named


def test_send_overlaps_compute():
    # the sender does not wait for its message: device 0's forwards run back to back
    tl = simulate(build_schedule("gpipe", 2, 3), links=Link(latency_s=50.0))
    d0 = [s for s in tl.spans_of(0) if s.action.kind is Kind.F]
    assert [(s.start, s.end) for s in d0] == [(0.0, 1.0), (1.0, 2.0), (2.0, 3.0)]


def test_a_blocking_send_holds_its_device_until_the_last_byte_is_in():
    # GPipe, p = 2, f = 1, L = 0.5, 2 bytes at 4 B/s: each forward of device 0 waits 0.5 + 0.5 s
    link = Link(latency_s=0.5, bandwidth_Bps=4.0)
    tl = simulate(build_schedule("gpipe", 2, 3), links=link, boundary_bytes=2, sends="blocking")
    d0 = [s for s in tl.spans_of(0) if s.action.kind is Kind.F]
    assert [(s.start, s.end) for s in d0] == [(0.0, 1.0), (2.0, 3.0), (4.0, 5.0)]
    assert tl.makespan > simulate(build_schedule("gpipe", 2, 3), links=link, boundary_bytes=2).makespan


@pytest.mark.parametrize("name", ["gpipe", "1f1b", "zb-h1"])
def test_blocking_sends_cost_nothing_on_free_links(name):
    schedule = build_schedule(name, 4, 8)
    blocked = simulate(schedule, StageCosts(1.0, 1.0, 0.5), sends="blocking")
    assert blocked.spans == simulate(schedule, StageCosts(1.0, 1.0, 0.5)).spans


def test_blocking_sends_undo_what_extra_microbatches_in_flight_hide():
    # p = 2, m = 8, t_f + t_b = 30 ms, L = 40 ms: k = 3 more in flight hide the link only if sends overlap
    costs, link = StageCosts.fused(f=0.01, b=0.02), Link(latency_s=0.04)
    plain = simulate(build_schedule("1f1b", 2, 8), costs, links=link)
    aware = simulate(latency_aware_1f1b(2, 8, 3), costs, links=link)
    held = simulate(latency_aware_1f1b(2, 8, 3), costs, links=link, sends="blocking")
    assert aware.makespan == pytest.approx(0.35) and plain.makespan == pytest.approx(0.59)
    assert held.makespan == pytest.approx(0.63)  # worse than plain 1F1B with overlapped sends
    # plain 1F1B at p = 2 waits the round trip anyway: blocking adds one latency, the last gradient's
    blocked_plain = simulate(build_schedule("1f1b", 2, 8), costs, links=link, sends="blocking")
    assert blocked_plain.makespan == pytest.approx(plain.makespan + 0.04)


@pytest.mark.parametrize("bad", ["eager", "Blocking", None, 1])
def test_a_bad_sends_is_refused_with_the_choices(bad):
    with pytest.raises(CourseError, match=r"sends must be one of 'overlapped', 'blocking', got"):
        simulate(build_schedule("1f1b", 2, 2), sends=bad)
    with pytest.raises(CourseError, match="sends must be one of"):
        simulate_named("1f1b", 2, 2, sends=bad)
