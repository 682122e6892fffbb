"""Issue 6, measured: plain and latency-aware 1F1B on real processes with an injected slow link.

The distributed engine takes a built Schedule (the latency-aware one carries its extra count per link).
One launch runs plain 1F1B at L = 0, 40, 80 ms and latency-aware 1F1B at 40 ms for k = 1..5, each run
three times, taking turns; every number asserted is measured, against the formula and the flush bound
from the measured op costs. Print the table:
``.venv/bin/pytest -s tests/lessons/test_wan_measured.py -k table``.

The suite must pass on a loaded machine, where two processes share 2 cores with other work. So:
- every op is paced (``make_spec(pace_s=)``): the real op runs, then the rank sleeps out a fixed slot of
  10 ms (forward) or 20 ms (backward), so a stage's cost does not depend on the load; the toy's 2
  blocks per stage take a few ms, inside the slot on a busy machine;
- every margin grows with the noise measured in the run itself (the range of its repeats), on top of
  a small fixed allowance for messages, Python and a rank woken late;
- the formula is checked on the growth from 40 to 80 ms (320 ms), where the fixed cost of each exposed
  crossing cancels;
- latency-aware against plain 1F1B compares per-rank idle, from the spans.
"""

from __future__ import annotations

import pickle

import pytest

from course_lib.lessons.wan_measured import WanExperiment, WanRun, run_wan_experiment
from course_lib.schedules.latency_aware import latency_aware_1f1b
from course_lib.shelf.costs import Link
from course_lib.shelf.distributed_engine import make_spec
from course_lib.shelf.errors import CourseError
from course_lib.shelf.first_schedules import build_schedule
from course_lib.shelf.reference import TrainConfig
from course_lib.shelf.schedule import Action, Kind, Schedule
from course_lib.shelf.simulator import StageCosts, simulate

TINY = dict(n_layers=6, d_model=16, n_heads=2, seq_len=16, batch_size=8, steps=1)
# what a measured run pays beyond the model on a quiet machine: 10-20 ms of messages and Python per
# step, and sleeps that overshoot
NOISE_REL, NOISE_S = 0.10, 0.025


def spread_s(run) -> float:
    """The noise of one run: how far apart its measured steps are (max - min of their makespans).
    A median of steps that differ by this much can be off by as much."""
    steps = [tl.makespan for tl in run.measured]
    return max(steps) - min(steps)


def best_idle_s(run, device: int) -> float:
    """The device's idle in the run's least disturbed step."""
    return min(tl.idle(device) for tl in run.measured)


def test_a_repeat_counts_its_least_disturbed_step():
    # on paced ops the load only adds time: of a repeat's two steps the fastest is its value, so one late
    # step (here 3x slower) spoils neither the repeat's value nor the range across repeats
    sched = build_schedule("1f1b", 2, 8)
    quick, late = (simulate(sched, StageCosts.fused(f=f, b=2 * f)) for f in (0.010, 0.030))
    paced = StageCosts(f=[0.01, 0.01], i=[0.02, 0.02], w=[0.0, 0.0])
    run = WanRun(sched, 0.0, 0, [late, quick, quick, quick, quick, late], quick, paced,
                 steps_per_repeat=2)  # fmt: skip
    assert run.latency_part_spread.values == pytest.approx((quick.makespan - run.compute_s,) * 3)
    assert run.latency_part_spread.range == 0


# ---- a built Schedule goes to the engine, checked before any process starts ----------------------
def test_a_built_schedule_makes_a_spec_that_pickles():
    sched = latency_aware_1f1b(2, 8, extra_per_link=3)
    spec = make_spec(TrainConfig(**TINY, microbatches=8), sched, links=Link(0.03))
    assert (spec.ranks, spec.virtual, spec.schedule.n_stages) == (2, 1, 2)
    assert spec.schedule is sched and spec.links == (Link(0.03),)
    back = pickle.loads(pickle.dumps(spec))  # spawn sends the spec to every process
    assert back.schedule.orders == sched.orders
    # names still work, and a name and the schedule it builds give the same spec
    by_name = make_spec(TrainConfig(**TINY, microbatches=8), "latency-aware-1f1b", 3)
    assert by_name.schedule.orders == latency_aware_1f1b(3, 8, 1).orders
    interleaved = make_spec(TrainConfig(**TINY, microbatches=4), build_schedule("interleaved-1f1b", 2, 4, 2))
    assert (interleaved.ranks, interleaved.virtual) == (2, 2)


def _deadlock() -> Schedule:
    """Device 0 waits for a gradient before it sends the forward that produces it."""
    orders = [
        [Action(0, Kind.B, 0), Action(0, Kind.F, 0)],
        [Action(1, Kind.F, 0), Action(1, Kind.B, 0)],
    ]
    return Schedule("broken", 2, 1, orders, [0, 1])


@pytest.mark.parametrize(
    "schedule, kwargs, words",
    [
        (latency_aware_1f1b(2, 4, 1), dict(stages=3), ["stages=3", "2 devices"]),
        (latency_aware_1f1b(2, 4, 1), dict(virtual=2), ["virtual=2", "1 stages per device"]),
        (latency_aware_1f1b(2, 4, 1), dict(cfg_m=8), ["m=4", "8"]),
        (latency_aware_1f1b(3, 4, 1), dict(partition=[4, 4]), ["[4, 4]", "3"]),
        (latency_aware_1f1b(2, 4, 1), dict(links=[Link(), Link()]), ["has 2 entries", "1 stage boundar"]),
        (_deadlock(), dict(cfg_m=1), ["broken"]),
        (latency_aware_1f1b(2, 4, 1), dict(pace_s=(0.01,)), ["pace_s", "(0.01,)"]),
        (latency_aware_1f1b(2, 4, 1), dict(pace_s=(0.01, -1)), ["pace_s", "-1"]),
        (build_schedule("zb-h1", 2, 4), dict(pace_s=(0.01, 0.02)), ["fused backward", "zb-h1"]),
    ],
)
def test_a_bad_built_schedule_is_refused_with_the_value_named(schedule, kwargs, words):
    m = kwargs.pop("cfg_m", schedule.n_microbatches)
    cfg = TrainConfig(**(TINY | dict(batch_size=8 if m != 1 else 1)), microbatches=m)
    with pytest.raises(CourseError) as err:
        make_spec(cfg, schedule, **kwargs)
    for word in words:
        assert word in str(err.value), (word, str(err.value))


# ---- the two behaviours, measured --------------------------------------------------------------
EXPERIMENT = WanExperiment(extras=(1, 2, 3, 4, 5))  # shorter than lesson 06 (L = 0, 40, 160 ms, 3 steps)


@pytest.fixture(scope="module")
def wan():
    return run_wan_experiment(EXPERIMENT)


@pytest.mark.processes
@pytest.mark.timeout(300)
def test_table(wan):
    print("\n" + wan.table())
    assert len(wan.plain) == 3 and [r.extra for r in wan.aware] == [1, 2, 3, 4, 5]
    assert all(len(r.measured) == EXPERIMENT.repeats * (EXPERIMENT.steps - 1) for r in wan.plain + wan.aware)
    # every run trains the same model on the same batches: the schedule changes the timing only
    for r in wan.plain + wan.aware:
        assert r.losses == pytest.approx(wan.plain[0].losses, rel=1e-5), r.schedule.name
        assert all(tl.source == "measured" for tl in r.measured)
        assert r.simulated.source == "measured compute + simulated links"


@pytest.mark.processes
@pytest.mark.timeout(300)
def test_paced_ops_take_their_slot(wan):
    # never shorter than the slot (the pacing works); longer by a late wake-up, or where a very busy
    # machine (a load of 14 on 2 cores was seen) stretched the real op past its slot: at most 2x here
    f_slot, b_slot = EXPERIMENT.pace_s
    for r in wan.plain + wan.aware:
        for f, i in zip(r.costs.f, r.costs.i, strict=True):
            assert f_slot <= f <= 2 * f_slot and b_slot <= i <= 2 * b_slot, (r.extra, r.latency_s, f, i)


@pytest.mark.processes
@pytest.mark.timeout(300)
def test_plain_1f1b_step_grows_with_latency_as_the_formula_says(wan):
    for r in wan.plain:
        # the formula 2L[(p-1) + floor((m-1)(p-1)/p)] = 8L at p=2, m=8
        assert r.formula_latency_part_s() == pytest.approx(8 * r.latency_s)
        # the latency is paid, not hidden: measured step - (m+p-1)(t_f+t_b) of that run is at least
        # the formula's (on top come a few ms per exposed crossing, and the load)
        least = 0.9 * r.formula_latency_part_s() - spread_s(r)
        assert r.latency_part_s >= least, (r.latency_s, r.latency_part_s)
        # and the replay of the run's own costs is never above what was measured (beyond noise)
        assert r.simulated.makespan <= r.step_s + NOISE_REL * r.step_s + NOISE_S + spread_s(r)
    # the slope: from 40 to 80 ms the step grows by 8 x 40 ms
    slope = wan.effects()[0]
    assert slope.expected_s == pytest.approx(8 * 0.04)
    margin = 0.15 * slope.expected_s + slope.spread_s
    assert abs(slope.measured_s - slope.expected_s) <= margin, (slope, margin)


@pytest.mark.processes
@pytest.mark.timeout(300)
def test_latency_aware_idle_stays_within_the_flush_bound(wan):
    k = wan.needed_extra
    assert k == 3, k  # ceil(2 x 40 ms / 30 ms): the slots fix t_f + t_b
    L = wan.experiment.aware_latency_s
    aware, plain = wan.aware_run(), wan.plain_at(L)
    assert aware.extra == k
    # the built schedule really ran: device 0 holds 2 + k micro-batches (plain 1F1B: 2)
    assert aware.peak_inflight == [2 + k, 1] and plain.peak_inflight == [2, 1]
    # the needed k keeps each device's idle within the flush bound of the run's own costs; more
    # micro-batches in flight than needed do too (they cost memory, not time)
    for r in [r for r in wan.aware if r.extra >= k]:
        for d in range(2):
            bound = r.bound_s(d) * (1 + NOISE_REL) + NOISE_S + spread_s(r)
            assert best_idle_s(r, d) <= bound, (r.extra, d, best_idle_s(r, d), bound)
    # plain 1F1B at the same L idles far longer: it pays 2L on 4 round trips, the latency-aware one
    # on 1 (expected gap about 6L; asserted 3L)
    assert plain.worst_idle_s > aware.worst_idle_s + 3 * L, (plain.worst_idle_s, aware.worst_idle_s)
