"""Issue 6, measured: plain and latency-aware 1F1B on real processes with an injected slow link.

The distributed engine takes a built Schedule (the latency-aware one carries its extra count per link).
One launch runs plain 1F1B at L = 0, 20, 80 ms and latency-aware 1F1B at 20 ms for k = 1..7; every
number asserted is measured, against the formula and the flush bound from the measured op costs.
Print the table: ``.venv/bin/pytest -s tests/test_wan_measured.py -k table``.

The suite must pass on a loaded machine, where two processes share 2 cores with other work. So:
- every margin grows with the noise measured in the run itself (how much its steps differ), on top of
  a small fixed allowance for messages and Python; on a quiet machine the steps agree and the margins
  are tight;
- the effects asserted are large against that noise: the formula is checked on the growth from 20 to
  80 ms (480 ms), where the fixed cost of each exposed crossing cancels;
- latency-aware against plain 1F1B compares per-rank idle, from the spans, not the step: on a shared
  CPU the overlapped ranks compete for cores, so the step measures the load as much as the schedule;
- idle is taken from each run's best step: other work only ever adds waiting (a rank waits for a peer
  that was not scheduled), so the least idle of a run is what its schedule does.
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
# what a measured run pays beyond the model on a quiet machine: 10-20 ms of messages and Python per
# step, and sleeps that overshoot
NOISE_REL, NOISE_S = 0.10, 0.025
# what a busy machine (four CPU-bound jobs beside the two ranks on 2 cores) adds to a measured step on top
# of its own replay (1.31x was seen at a load of 6-18); the latency itself is held by the formula checks
LOAD_REL = 1.5


def spread_s(run) -> float:
    """The noise of one run: how far apart its measured steps are (max - min of their makespans).
    A median of steps that differ by this much can be off by as much."""
    steps = [tl.makespan for tl in run.measured]
    return max(steps) - min(steps)


def best_idle_s(run, device: int) -> float:
    """The device's idle in the run's least disturbed step."""
    return min(tl.idle(device) for tl in run.measured)


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
    # 5 steps: the first is warm-up, the medians of the other 4 shrug off a step a busy machine slowed
    # 64 blocks: t_f + t_b stays above 2L / 7 on a quiet machine too (with 32 a fast one needed k = 8)
    e = WanExperiment(n_layers=64, p=2, m=8, latencies_s=(0.0, 0.02, 0.08), aware_latency_s=0.02, steps=5)
    return run_wan_experiment(e)


@pytest.mark.processes
@pytest.mark.timeout(300)
def test_table(wan):
    print("\n" + wan.table())
    assert len(wan.plain) == 3 and [r.extra for r in wan.aware] == list(range(1, 8))
    # every run trains the same model on the same batches: the schedule changes the timing only
    for r in wan.plain + wan.aware:
        assert r.losses == pytest.approx(wan.plain[0].losses, rel=1e-5), r.schedule.name
        assert all(tl.source == "measured" for tl in r.measured)
        assert r.simulated.source == "measured compute + simulated links"


@pytest.mark.processes
@pytest.mark.timeout(300)
def test_plain_1f1b_step_grows_with_latency_as_the_formula_says(wan):
    slow = [r for r in wan.plain if r.latency_s > 0]
    for r in slow:
        # the formula 2L[(p-1) + floor((m-1)(p-1)/p)] = 8L at p=2, m=8 (160 ms at 20 ms, 640 ms at 80 ms)
        predicted = r.formula_latency_part_s()
        assert predicted == pytest.approx(8 * r.latency_s)
        # the latency is paid, not hidden: measured step - (m+p-1)(t_f+t_b) of that run is at least
        # the formula's (on top come a few ms per exposed crossing, and the load)
        assert r.latency_part_s >= 0.75 * predicted - spread_s(r), (r.latency_s, r.latency_part_s)
        # and the replay of the run's own costs agrees with what was measured: never above it (beyond
        # noise), and below it by no more than a loaded machine adds (a rank woken by a message waits
        # for a core: time that is in no span, so in no replayed cost)
        assert r.simulated.makespan <= r.step_s + NOISE_REL * r.step_s + NOISE_S + spread_s(r)
        assert r.step_s <= LOAD_REL * r.simulated.makespan + NOISE_S + spread_s(r), (
            r.latency_s, r.step_s, r.simulated.makespan)
    # the slope: from 20 to 80 ms the step grows by 8 x 60 ms (the L = 0 run is left out here: its
    # ops are slower, both processes computing at once on 2 cores)
    grown = slow[1].latency_part_s - slow[0].latency_part_s
    predicted = slow[1].formula_latency_part_s() - slow[0].formula_latency_part_s()
    margin = 0.25 * predicted + spread_s(slow[0]) + spread_s(slow[1])
    assert abs(grown - predicted) <= margin, (grown, predicted, margin)


@pytest.mark.processes
@pytest.mark.timeout(300)
def test_latency_aware_idle_stays_within_the_flush_bound(wan):
    k = wan.needed_extra
    assert 1 <= k <= 7, k  # 2L = 40 ms over t_f + t_b of 10-40 ms a slot on this toy
    L = wan.experiment.aware_latency_s
    aware, plain = wan.aware_run(), wan.plain_at(L)
    assert aware.extra == k
    # the built schedule really ran: device 0 holds 2 + k micro-batches (plain 1F1B: 2)
    assert aware.peak_inflight == [min(2 + k, 8), 1] and plain.peak_inflight == [2, 1]
    # the needed k keeps each device's idle within the flush bound of the run's own costs; more
    # micro-batches in flight than needed do too (they cost memory, not time)
    for r in [r for r in wan.aware if r.extra >= k]:
        for d in range(2):
            bound = r.bound_s(d) * (1 + NOISE_REL) + NOISE_S + spread_s(r)
            assert best_idle_s(r, d) <= bound, (r.extra, d, best_idle_s(r, d), bound)
    # plain 1F1B at the same L idles far longer: it pays 2L on 4 round trips, the latency-aware one
    # on 1 (expected gap about 6L; asserted 2L)
    plain_idle, aware_idle = (max(best_idle_s(r, d) for d in range(2)) for r in (plain, aware))
    assert plain_idle > aware_idle + 2 * L, (plain_idle, aware_idle)
