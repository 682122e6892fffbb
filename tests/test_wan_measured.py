"""Issue 6, measured: plain and latency-aware 1F1B on real processes with an injected slow link.

The distributed engine takes a built Schedule (the latency-aware one carries its extra count per link).
One launch runs plain 1F1B at L = 0, 20, 40 ms and latency-aware 1F1B at 20 ms for k = 1..7; every
number asserted is measured, against the formula and the flush bound from the measured op costs.
Print the table: ``.venv/bin/pytest -s tests/test_wan_measured.py -k table``.
"""

from __future__ import annotations

import pickle

import pytest

from course_lib.engines.distributed import make_spec
from course_lib.errors import CourseError
from course_lib.lessons.wan_measured import WanExperiment, run_wan_experiment
from course_lib.links import Link
from course_lib.reference import TrainConfig
from course_lib.schedules.builders import build_schedule
from course_lib.schedules.ir import Action, Kind, Schedule
from course_lib.schedules.latency_aware import latency_aware_1f1b

TINY = dict(n_layers=6, d_model=16, n_heads=2, seq_len=16, batch_size=8, steps=1)
# what a measured run may pay beyond the model: 10-20 ms of messages and Python per step here, plus
# sleeps that overshoot and two processes sharing 2 cores with other work
NOISE_REL, NOISE_S = 0.10, 0.025


def within_noise(measured: float, model: float) -> bool:
    return abs(measured - model) <= NOISE_REL * model + NOISE_S


# ---- a built Schedule goes to the engine, checked before any process starts ----------------------
def test_a_built_schedule_makes_a_spec_that_pickles():
    sched = latency_aware_1f1b(2, 8, extra_per_link=3)
    spec = make_spec(TrainConfig(**TINY, microbatches=8), sched, links=Link(0.03))
    assert (spec.ranks, spec.virtual, spec.n_stages) == (2, 1, 2)
    assert spec.build_schedule() is sched and spec.links == (Link(0.03),)
    back = pickle.loads(pickle.dumps(spec))  # spawn sends the spec to every process
    assert back.build_schedule().orders == sched.orders
    # names still work, and a name and the schedule it builds give the same spec
    by_name = make_spec(TrainConfig(**TINY, microbatches=8), "latency-aware-1f1b", 3)
    assert by_name.build_schedule().orders == latency_aware_1f1b(3, 8, 1).orders
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
@pytest.fixture(scope="module")
def wan():
    # 4 steps: the first is warm-up, the medians of the other 3 shrug off one step a busy machine slowed
    e = WanExperiment(n_layers=32, p=2, m=8, latencies_s=(0.0, 0.02, 0.04), aware_latency_s=0.02, steps=4)
    return run_wan_experiment(e)


@pytest.mark.timeout(150)
def test_table(wan):
    print("\n" + wan.table())
    assert len(wan.plain) == 3 and [r.extra for r in wan.aware] == list(range(1, 8))
    # every run trains the same model on the same batches: the schedule changes the timing only
    for r in wan.plain + wan.aware:
        assert r.losses == pytest.approx(wan.plain[0].losses, rel=1e-5), r.schedule.name
        assert all(tl.source == "measured" for tl in r.measured)
        assert r.simulated.source == "measured compute + simulated links"


@pytest.mark.timeout(150)
def test_plain_1f1b_step_grows_with_latency_as_the_formula_says(wan):
    slow = [r for r in wan.plain if r.latency_s > 0]
    for r in slow:
        # the latency part, measured step - (m+p-1)(t_f+t_b) with that run's costs, against the
        # formula 2L[(p-1) + floor((m-1)(p-1)/p)] = 8L at p=2, m=8 (160 ms at 20 ms, 320 ms at 40 ms)
        predicted = r.formula_latency_part_s()
        assert predicted == pytest.approx(8 * r.latency_s)
        assert abs(r.latency_part_s - predicted) <= 0.25 * predicted, (r.latency_s, r.latency_part_s)
        # and the replay of the run's own costs agrees with what was measured
        assert within_noise(r.step_s, r.simulated.makespan), (r.latency_s, r.step_s, r.simulated.makespan)
    # the slope: from 20 to 40 ms the step grows by 8 x 20 ms (the L = 0 run is left out here: its
    # ops are slower, both processes computing at once on 2 cores)
    grown = slow[1].latency_part_s - slow[0].latency_part_s
    predicted = slow[1].formula_latency_part_s() - slow[0].formula_latency_part_s()
    assert abs(grown - predicted) <= 0.25 * predicted, (grown, predicted)
    assert wan.plain[2].step_s > wan.plain[1].step_s > wan.plain[0].step_s


@pytest.mark.timeout(150)
def test_latency_aware_idle_stays_within_the_flush_bound(wan):
    k = wan.needed_extra
    assert 1 <= k <= 7, k  # 2L = 40 ms over t_f + t_b of 10-20 ms a slot on this toy
    L = wan.experiment.aware_latency_s
    aware, plain = wan.aware_run(), wan.plain_at(L)
    assert aware.extra == k
    # the built schedule really ran: device 0 holds 2 + k micro-batches (plain 1F1B: 2)
    assert aware.peak_inflight == [min(2 + k, 8), 1] and plain.peak_inflight == [2, 1]
    for d in range(2):
        assert aware.idle_s(d) <= aware.bound_s(d) * (1 + NOISE_REL) + NOISE_S, (d, aware.idle_s(d))
    # plain 1F1B at the same L idles far longer: it pays 2L on 4 round trips, not 1
    assert plain.worst_idle_s > aware.worst_idle_s + 2 * L
    assert plain.step_s > aware.step_s + 2 * L
    # more micro-batches in flight than needed stay within the bound too (they cost memory, not time)
    deeper = [r for r in wan.aware if r.extra > k]
    for r in deeper:
        for d in range(2):
            assert r.idle_s(d) <= r.bound_s(d) * (1 + NOISE_REL) + NOISE_S, (r.extra, d, r.idle_s(d))
