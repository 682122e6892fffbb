"""The simulator's fast path (``course_lib.fast_simulator``) against the shelf's loop (``simulator.play``).

Every registered schedule, on a grid of sizes, under costs and links that make messages queue for
bandwidth, overlap latency, and tie (zero-cost W), with every value of the `sends` option: the two
must give exactly the same spans and transfers, and refuse the same schedules with the same words.
"""

from __future__ import annotations

import pytest

import course_lib.schedules  # noqa: F401  (every schedule in the registry)
from course_lib.fast_simulator import _offsets, fast_play
from course_lib.shelf.costs import FREE, Link, StageCosts, per_boundary
from course_lib.shelf.errors import CourseError
from course_lib.shelf.first_schedules import SCHEDULES, build_schedule
from course_lib.shelf.schedule import Action, Kind, Schedule, inputs_of
from course_lib.shelf.simulator import SENDS, play, simulate
from course_lib.shelf.validate import ScheduleError, check

SIZES = [(1, 1), (1, 4), (2, 2), (2, 5), (3, 6), (4, 8), (8, 16)]
COSTS = [StageCosts(1.0, 1.0, 1.0), StageCosts(f=0.5, i=1.25, w=0.0)]
LINKS = [None, Link(latency_s=0.3, bandwidth_Bps=4.0)]  # 2 bytes below: 0.5 s on the wire


def _both(schedule: Schedule, costs: StageCosts, links: Link | None, sends: str = "overlapped") -> tuple:
    n_bounds = schedule.n_stages - 1
    nbytes = per_boundary(2, n_bounds, "boundary_bytes", 0)
    wires = per_boundary(links, n_bounds, "links", FREE)
    share = costs.per_virtual_stage(schedule.stages_per_device)
    blocking = sends == "blocking"
    return play(schedule, share, nbytes, wires, blocking), fast_play(schedule, share, nbytes, wires, blocking)


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
                (ref_spans, ref_sent), (spans, sent) = _both(schedule, costs, links, sends)
                assert len(spans) == len(ref_spans) == len(schedule.actions())
                assert _sorted(spans) == _sorted(ref_spans), (name, p, m, costs, links)
                assert _sorted(sent) == _sorted(ref_sent), (name, p, m, costs, links)
                checked += 1
    assert checked >= 4, f"{name}: only {checked} sizes built"


def test_bandwidth_queue_is_the_same_in_both():
    # 1F1B p=2 m=4 with a slow wire: the activations queue behind each other on device 0's wire
    schedule = build_schedule("1f1b", 2, 4)
    (ref, ref_sent), (fast, sent) = _both(schedule, StageCosts(0.1, 0.1, 0.1), Link(0.0, 1.0))
    ups = sorted((t.start, t.end) for t in sent if t.src_device == 0)
    assert ups == sorted((t.start, t.end) for t in ref_sent if t.src_device == 0)
    assert all(b[0] >= a[0] + 2.0 for a, b in zip(ups, ups[1:], strict=False))  # 2 bytes at 1 B/s


def test_both_see_the_same_deadlock():
    orders = [
        [Action(0, Kind.F, 0), Action(0, Kind.B, 0), Action(0, Kind.F, 1), Action(0, Kind.B, 1)],
        [Action(1, Kind.F, 1), Action(1, Kind.B, 1), Action(1, Kind.F, 0), Action(1, Kind.B, 0)],
    ]
    crossed = Schedule("crossed", 2, 2, orders, [0, 1])
    for fast in (False, True):
        with pytest.raises(ScheduleError, match="device 0") as refused:
            simulate(crossed, fast=fast)
        assert refused.value.problems == check(crossed)


@pytest.mark.parametrize("fast", [False, True])
def test_simulate_refuses_what_the_validator_refuses_in_its_words(fast):
    # a missing W holds nobody up, so only the bookkeeping can see it: both paths must still refuse it
    schedule = build_schedule("zb-h1", 3, 4)
    schedule.orders[2].remove(Action(2, Kind.W, 3))
    problems = check(schedule)
    assert problems == ["2W3 (stage 2's weight gradient for micro-batch 3) is missing: device 2 holds "
                        "stage 2 and must run it once"]  # fmt: skip
    with pytest.raises(ScheduleError) as refused:
        simulate(schedule, fast=fast)
    assert refused.value.problems == problems
    wrong_kind = build_schedule("1f1b", 2, 2)
    wrong_kind.orders[1][1] = Action(1, Kind.I, 0)
    with pytest.raises(ScheduleError) as refused:
        simulate(wrong_kind, fast=fast)
    assert refused.value.problems == check(wrong_kind) != []


def test_lesson_sizes_run_the_loop_and_larger_ones_the_fast_path_once_imported(monkeypatch):
    import course_lib.shelf.simulator as simulator

    calls = []
    monkeypatch.setattr(simulator, "_FAST_PATHS", [lambda *args: calls.append(args) or fast_play(*args)])
    simulate(build_schedule("1f1b", 16, 64))
    assert calls == []
    simulate(build_schedule("1f1b", 17, 4))
    simulate(build_schedule("1f1b", 2, 65))
    simulate(build_schedule("1f1b", 2, 2), fast=True)
    assert len(calls) == 3
    simulate(build_schedule("1f1b", 17, 4), fast=False)
    assert len(calls) == 3
    monkeypatch.setattr(simulator, "_FAST_PATHS", [])  # as if course_lib.fast_simulator were absent
    assert simulate(build_schedule("1f1b", 17, 4)).makespan == pytest.approx((4 + 16) * 3.0)
    with pytest.raises(CourseError, match="import course_lib.fast_simulator"):
        simulate(build_schedule("1f1b", 2, 2), fast=True)


def test_memory_grows_with_the_actions_not_with_devices_squared():
    """A wire table of p x p entries made simulate(1F1B, p=333,333) need 10**11 of them (killed for
    memory); per sender, a device keeps only the wires it uses. At p = 5,000: 7 MB, where the table
    alone took 200 MB."""
    import tracemalloc

    schedule = build_schedule("1f1b", 5000, 1)
    tracemalloc.start()
    try:
        simulate(schedule, fast=True)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 40e6, f"{peak / 1e6:.0f} MB"


@pytest.mark.parametrize("split_backward", [False, True])
def test_dependency_offsets_are_the_one_rule(split_backward):
    """The fast path reads a key's inputs as offsets per (stage, kind); they must name the actions
    ``schedule.inputs_of`` names (own input first, then the neighbouring stage's)."""
    n_st, mb = 3, 2
    own, other = _offsets(n_st, split_backward)

    def decode(key: int) -> tuple[int, str, int]:
        rest, code = divmod(key, 4)
        micro, stage = divmod(rest, n_st)
        return stage, "FBIW"[code], micro

    for stage in range(n_st):
        for code, kind in enumerate("FBIW"):
            k = (mb * n_st + stage) * 4 + code
            named = [decode(k + o) for o in (own[k % (4 * n_st)], other[k % (4 * n_st)]) if o]
            rule = [x for x in inputs_of(stage, kind, mb, n_st, split_backward) if x is not None]
            assert named == rule, (stage, kind)
