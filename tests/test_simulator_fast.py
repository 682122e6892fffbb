"""The simulator's fast path (``simulator_fast.play``) against its readable event loop (``_play``).

Every registered schedule, on a grid of sizes, under costs and links that make messages queue for
bandwidth, overlap latency, and tie (zero-cost W), with every value of the `sends` option: the two
must give exactly the same spans and transfers, and agree on which schedules deadlock.
"""

from __future__ import annotations

import pytest

from course_lib.shelf.costs import StageCosts
from course_lib.shelf.errors import CourseError
from course_lib.shelf.links import FREE, Link, per_boundary
from course_lib.shelf.registry import SCHEDULES, build_schedule
from course_lib.shelf.schedule import Action, Kind, Schedule
from course_lib.shelf.simulator import SENDS, _play_fast, _play_reference, _tables, simulate

SIZES = [(1, 1), (1, 4), (2, 2), (2, 5), (3, 6), (4, 8), (8, 16)]
COSTS = [StageCosts(1.0, 1.0, 1.0), StageCosts(f=0.5, i=1.25, w=0.0)]
LINKS = [None, Link(latency_s=0.3, bandwidth_Bps=4.0)]  # 2 bytes below: 0.5 s on the wire


def _both(schedule: Schedule, costs: StageCosts, links: Link | None, sends: str = "overlapped") -> tuple:
    n_bounds = schedule.n_stages - 1
    nbytes = per_boundary(2, n_bounds, "boundary_bytes", 0)
    wires = per_boundary(links, n_bounds, "links", FREE)
    share = costs.per_virtual_stage(schedule.stages_per_device)
    tables = _tables(schedule, share, nbytes, wires)
    blocking = sends == "blocking"
    return _play_reference(schedule, tables, blocking), _play_fast(schedule, tables, blocking)


def _sorted(records: list) -> list:
    return sorted(records, key=lambda r: tuple(str(x) for x in r))


@pytest.mark.parametrize("sends", SENDS)
@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_fast_path_equals_event_loop(name, sends):
    checked = 0
    for p, m in SIZES:
        try:
            schedule = build_schedule(name, p, m)
        except CourseError:  # a size this schedule does not take
            continue
        for costs in COSTS:
            for links in LINKS:
                (ref_spans, ref_sent, ref_done), (spans, sent, done) = _both(schedule, costs, links, sends)
                assert ref_done and done, (name, p, m)
                assert len(spans) == len(ref_spans) == len(schedule.actions())
                assert _sorted(spans) == _sorted(ref_spans), (name, p, m, costs, links)
                assert _sorted(sent) == _sorted(ref_sent), (name, p, m, costs, links)
                checked += 1
    assert checked >= 4, f"{name}: only {checked} sizes built"


def test_bandwidth_queue_is_the_same_in_both():
    # 1F1B p=2 m=4 with a slow wire: the activations queue behind each other on device 0's wire
    schedule = build_schedule("1f1b", 2, 4)
    (ref, ref_sent, _), (fast, sent, _) = _both(schedule, StageCosts(0.1, 0.1, 0.1), Link(0.0, 1.0))
    ups = sorted((t.start, t.end) for t in sent if t.src_device == 0)
    assert ups == sorted((t.start, t.end) for t in ref_sent if t.src_device == 0)
    assert all(b[0] >= a[0] + 2.0 for a, b in zip(ups, ups[1:], strict=False))  # 2 bytes at 1 B/s


def test_both_see_the_same_deadlock():
    orders = [
        [Action(0, Kind.F, 0), Action(0, Kind.B, 0), Action(0, Kind.F, 1), Action(0, Kind.B, 1)],
        [Action(1, Kind.F, 1), Action(1, Kind.B, 1), Action(1, Kind.F, 0), Action(1, Kind.B, 0)],
    ]
    crossed = Schedule("crossed", 2, 2, orders, [0, 1])
    (_, _, ref_done), (_, _, done) = _both(crossed, StageCosts(), None)
    assert not ref_done and not done
    with pytest.raises(CourseError, match="device 0"):
        simulate(crossed)


def test_memory_grows_with_the_actions_not_with_devices_squared():
    """A wire table of p x p entries made simulate(1F1B, p=333,333) need 10**11 of them (killed for
    memory); per sender, a device keeps only the wires it uses. At p = 5,000: 7 MB, where the table
    alone took 200 MB."""
    import tracemalloc

    schedule = build_schedule("1f1b", 5000, 1)
    tracemalloc.start()
    try:
        simulate(schedule)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 40e6, f"{peak / 1e6:.0f} MB"


@pytest.mark.parametrize("split_backward", [False, True])
def test_dependency_offsets_are_the_dependency_keys(split_backward):
    """The fast path reads a key's inputs as offsets per (stage, kind); they must name the same keys
    as ``simulator._dependency_keys`` (own input first, then the neighbouring stage's)."""
    from course_lib.fast_simulator import _offsets
    from course_lib.shelf.simulator import _dependency_keys

    n_st = 3
    own, other = _offsets(n_st, split_backward)
    for k in range(2 * n_st * 4, 3 * n_st * 4):  # every stage and kind of micro-batch 2
        offsets = (own[k % (4 * n_st)], other[k % (4 * n_st)])
        assert [k + o for o in offsets if o] == _dependency_keys(k, n_st, split_backward), k
