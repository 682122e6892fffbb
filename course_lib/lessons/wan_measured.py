"""Plain and latency-aware 1F1B over a slow link: measured on real processes, beside the simulation.

Lesson 06 shows two behaviours in the simulator (formulas in ``course_lib/schedules/latency_aware.py``):
plain 1F1B pays every bit of link latency L; ceil(2L / (t_f + t_b)) more micro-batches in flight per
link keep each device's idle time within the flush bound.

This module runs both for real: one process per stage (the distributed engine), a link with injected
latency between them, plain 1F1B at several L and the latency-aware variant with k = 1, 2, ... extra
micro-batches at one of those L, all in ONE launch (starting processes is the slow part), every run
`repeats` times, taking turns, so that each point has a median and a range.

On a shared 2-core laptop an op's wall time depends on what else runs (the other rank, another job),
by more than the effects shown here. So by default every op is **paced**: the real forward or backward
runs, then the rank sleeps out the rest of a fixed slot (``pace_s``, the engine's ``make_spec(pace_s=)``),
and the stage costs what the slot says as long as the real op fits in it (a few blocks: a few ms). The
figures then show the schedule and the link, not the load. ``pace_s=None`` times the bare ops.

The simulation beside each run replays the op costs measured in it (source "measured compute +
simulated links"), and the formula and the bound use the costs measured in that same run::

    from course_lib.lessons.wan_measured import WanExperiment, run_wan_experiment
    res = run_wan_experiment(WanExperiment())   # about 30 s on 2 cores
    print(res.table())                 # measured (median and range) vs simulated vs formula, per run
    res.plot_summary(); res.plot_gantt()

Or from the shell: ``python bench/bench_wan.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import mean, median

from course_lib.lessons.repeats import Effect, Spread
from course_lib.lessons.scale_out import replay
from course_lib.schedules.latency_aware import (
    extra_in_flight,
    flush_bound,
    latency_aware_1f1b,
    plain_1f1b_step,
)
from course_lib.shelf.costs import Link, StageCosts, costs_from
from course_lib.shelf.errors import require
from course_lib.shelf.first_schedules import build_schedule
from course_lib.shelf.reference import TrainConfig
from course_lib.shelf.schedule import Schedule
from course_lib.shelf.timeline import Timeline


@dataclass(frozen=True)
class WanExperiment:
    """What to run. The link latency should be comparable to or larger than t_f + t_b of a stage, so
    that the effect is large; the defaults pace every op to 10 ms forward, 20 ms backward (lesson 06's
    simulated stage), with 4 blocks, whose real ops take a few ms, inside the slots on 2 busy cores."""

    n_layers: int = 4  # transformer blocks (embedding and head come on top)
    p: int = 2  # stages = processes
    m: int = 8  # micro-batches of one sequence each
    seq_len: int = 32
    latencies_s: tuple[float, ...] = (0.0, 0.04, 0.08)  # plain 1F1B at each
    # latency-aware 1F1B at this one (one of latencies_s): 2L over t_f + t_b must stay below m, so
    # that the needed k fits in the batch
    aware_latency_s: float = 0.04
    extras: tuple[int, ...] | None = None  # k for the latency-aware runs; None: 1 up to the deepest useful
    steps: int = 2  # per run; the first is warm-up and left out of every median
    repeats: int = 3  # every run this many times, taking turns: a median and a range per point
    pace_s: tuple[float, float] | None = (0.010, 0.020)  # (forward, backward) slot; None: bare ops
    threads: int = 1  # torch threads per process
    timeout_s: float = 60.0

    def check(self) -> None:
        require(self.p >= 2, f"p must be >= 2 (a link needs two stages), got {self.p!r}")
        require(self.steps >= 2, f"steps must be >= 2 (the first is warm-up), got {self.steps!r}")
        require(
            isinstance(self.repeats, int) and self.repeats >= 1,
            f"repeats must be a whole number >= 1 (3 or more for a range), got {self.repeats!r}",
        )
        require(
            len(self.latencies_s) >= 1 and all(x >= 0 for x in self.latencies_s),
            f"latencies_s must be one or more latencies >= 0 seconds, got {self.latencies_s!r}",
        )
        require(
            self.extras is None or all(isinstance(k, int) and k >= 1 for k in self.extras),
            f"extras must be whole numbers >= 1 (k = 0 is plain 1F1B), got {self.extras!r}",
        )
        require(
            self.aware_latency_s > 0 and self.aware_latency_s in self.latencies_s,
            f"aware_latency_s must be > 0 and one of latencies_s {self.latencies_s} (plain 1F1B runs "
            f"there too, for comparison), got {self.aware_latency_s!r}",
        )

    def extra_values(self) -> tuple[int, ...]:
        # device 0 warms up with (p - 1)(1 + k) forwards; beyond m of them nothing changes
        deepest = max(1, math.ceil(self.m / (self.p - 1)) - 1)
        return self.extras if self.extras is not None else tuple(range(1, deepest + 1))

    def config(self) -> TrainConfig:
        return TrainConfig(
            n_layers=self.n_layers, seq_len=self.seq_len, batch_size=self.m, microbatches=self.m,
            steps=self.steps, eval_batches=1,
        )  # fmt: skip


@dataclass
class WanRun:
    """One run: which schedule, which latency, what was measured and what the replay says."""

    schedule: Schedule
    latency_s: float
    extra: int  # extra micro-batches in flight per link (0: plain 1F1B)
    measured: list[Timeline]  # one per step after the warm-up, of every repeat (source "measured")
    simulated: Timeline  # the schedule replayed with this run's measured costs and the link
    costs: StageCosts = field(repr=False)  # medians of this run's spans, per stage
    losses: list[float] = field(default_factory=list)  # training loss per step (every run trains)
    steps_per_repeat: int = 1  # measured steps of one repeat, consecutive in `measured`

    # Costs are taken per run: on a shared 2-core machine an op is slower when both processes
    # compute at once (no latency) than when they take turns (long latency).
    @property
    def t_f(self) -> float:
        return mean(self.costs.f)  # forward per micro-batch, mean over stages

    @property
    def t_b(self) -> float:
        return mean(self.costs.i)  # 1F1B's backward B runs as one piece: all of it is i

    @property
    def compute_s(self) -> float:
        """(m + p - 1)(t_f + t_b): the step with free links and no overheads."""
        return plain_1f1b_step(self.schedule.n_devices, self.schedule.n_microbatches, self.t_f, self.t_b, 0.0)

    @property
    def latency_part_s(self) -> float:
        """What the measured step pays beyond compute: link latency (and, at L = 0, overheads)."""
        return self.step_s - self.compute_s

    def formula_latency_part_s(self) -> float:
        """2L [(p - 1) + floor((m - 1)(p - 1) / p)]: plain 1F1B's latency part, whatever the costs."""
        return plain_1f1b_step(self.schedule.n_devices, self.schedule.n_microbatches, 0, 0, self.latency_s)

    def bound_s(self, device: int | None = None) -> float:
        """Device `device`'s idle bound with this run's costs (None: the largest over devices).

        The flush bound (p - 1)(t_f + t_b) + 2 sum(L), with the slowest stage's t_f + t_b (a device
        waits for the other stages' work, not its own), plus m (T_slowest - T_device): a faster stage
        waits for the slowest one on every micro-batch, which no schedule avoids. That term is zero for
        equal stages; measured stages differ a little, more when other work slows one process."""
        if device is None:
            return max(self.bound_s(d) for d in range(self.schedule.n_devices))
        s = self.schedule
        per_stage = [f + i + w for f, i, w in zip(self.costs.f, self.costs.i, self.costs.w, strict=True)]
        slot = max(per_stage)
        mine = max(per_stage[st] for st in s.stages_of(device))
        flush = flush_bound(s.n_devices, slot, 0.0, [self.latency_s] * (s.n_devices - 1))
        return flush + s.n_microbatches * (slot - mine)

    @property
    def step_s(self) -> float:
        """Median measured makespan (first action to last, all devices)."""
        return median(tl.makespan for tl in self.measured)

    @property
    def worst_idle_s(self) -> float:
        """The largest idle of any device, each the median over the measured steps."""
        return max(median(tl.idle(d) for tl in self.measured) for d in range(self.schedule.n_devices))

    @property
    def simulated_worst_idle_s(self) -> float:
        return max(self.simulated.idle(d) for d in range(self.simulated.n_devices))

    def per_repeat(self, value) -> Spread:
        """`value` of each measured step, the smallest over the steps of one repeat: one value per repeat.
        On paced ops the load's noise only adds (a rank woken late lengthens a step, nothing shortens
        one), so a repeat's least disturbed step is its fastest: a rank woken late spoils one step, not
        the repeat (a median of two steps would take half of it in). The range across repeats keeps
        what differs between them (with one step per repeat: every step)."""
        values = [value(tl) for tl in self.measured]
        n = self.steps_per_repeat
        return Spread(tuple(min(values[i : i + n]) for i in range(0, len(values), n)))

    @property
    def latency_part_spread(self) -> Spread:
        """Each repeat's latency part: its fastest step's makespan - (m+p-1)(t_f+t_b) of this run."""
        return self.per_repeat(lambda tl: tl.makespan - self.compute_s)

    @property
    def worst_idle_spread(self) -> Spread:
        """Each repeat's largest idle of any device (the smallest over its steps)."""
        return self.per_repeat(lambda tl: max(tl.idle(d) for d in range(tl.n_devices)))

    @property
    def peak_inflight(self) -> list[int]:
        return [self.measured[-1].peak_inflight(d) for d in range(self.schedule.n_devices)]


@dataclass
class WanMeasurement:
    """Every run of one experiment, and the costs measured over all of them."""

    experiment: WanExperiment
    plain: list[WanRun]  # one per latency, in the order given
    aware: list[WanRun]  # one per k, at experiment.aware_latency_s
    t_f: float  # forward per stage and micro-batch: mean over stages of the medians over all runs
    t_b: float  # full backward, the same way

    @property
    def needed_extra(self) -> int:
        """ceil(2L / (t_f + t_b)) with the measured costs: the k that should hide the link."""
        return extra_in_flight(self.experiment.aware_latency_s, self.t_f, self.t_b)

    def aware_run(self, k: int | None = None) -> WanRun:
        """The run with k extra (default: the needed k); if none, the next k above, else the largest."""
        k = self.needed_extra if k is None else k
        above = [r for r in self.aware if r.extra >= k]
        return min(above, key=lambda r: r.extra) if above else max(self.aware, key=lambda r: r.extra)

    def plain_at(self, latency_s: float) -> WanRun:
        return min(self.plain, key=lambda r: abs(r.latency_s - latency_s))

    def effects(self) -> list[Effect]:
        """The two effects the lesson shows: plain 1F1B's latency part from the second largest to the
        largest L (formula: 2L[(p-1) + floor((m-1)(p-1)/p)]; both links slow, so the fixed cost of each
        exposed crossing cancels), and the worst idle that the needed k removes (expected: the replays'
        difference)."""
        lo, hi = self.plain[-2] if len(self.plain) > 1 else self.plain[0], self.plain[-1]
        plain, aware = self.plain_at(self.experiment.aware_latency_s), self.aware_run()
        return [
            Effect.between(
                f"plain 1F1B's latency part, L = {lo.latency_s * 1e3:.0f} -> {hi.latency_s * 1e3:.0f} ms",
                lo.latency_part_spread, hi.latency_part_spread,
                hi.formula_latency_part_s() - lo.formula_latency_part_s(),
            ),
            Effect.between(
                f"worst idle, k = 0 -> {aware.extra} at L = {plain.latency_s * 1e3:.0f} ms",
                aware.worst_idle_spread, plain.worst_idle_spread,  # the fall: k = 0 idles the longer
                plain.simulated_worst_idle_s - aware.simulated_worst_idle_s,
            ),
        ]  # fmt: skip

    def table(self) -> str:
        """Plain 1F1B against the formula, latency-aware against the flush bound, the effects against
        their spread (times in ms; a measured column is the median, [low-high] its range)."""
        from course_lib.lessons.wan_report import wan_table

        return wan_table(self)

    def plot_gantt(self, fig=None):
        """Plain and latency-aware 1F1B at aware_latency_s: measured above simulated, one time axis."""
        from course_lib.lessons.wan_report import plot_gantt

        return plot_gantt(self, fig)

    def plot_summary(self, fig=None):
        """Plain 1F1B's latency part against L; the worst idle against k (median, range, replay, bound)."""
        from course_lib.lessons.wan_report import plot_summary

        return plot_summary(self, fig)


def _link(latency_s: float) -> Link | None:
    return Link(latency_s=latency_s) if latency_s > 0 else None


def run_wan_experiment(e: WanExperiment = WanExperiment(), progress: bool = False) -> WanMeasurement:
    """Run plain 1F1B at each latency, then latency-aware 1F1B at aware_latency_s for each k, every run
    `e.repeats` times taking turns, all in one launch of p processes; the measurements beside the replays."""
    import course_lib.engines  # noqa: F401  (the rooms its runs use: injected links, paced ops)
    from course_lib.shelf.distributed_engine import launch, make_spec

    e.check()
    jobs = [(build_schedule("1f1b", e.p, e.m), lat, 0) for lat in e.latencies_s]
    jobs += [(latency_aware_1f1b(e.p, e.m, k), e.aware_latency_s, k) for k in e.extra_values()]
    cfg = e.config()
    specs = [
        make_spec(cfg, s, links=_link(lat), threads=e.threads, timeout_s=e.timeout_s, track_memory=False,
                  pace_s=e.pace_s)
        for s, lat, _ in jobs
    ]  # fmt: skip
    results = launch(specs * e.repeats, progress)  # A, B, ..., A, B, ...: a busy moment hits all alike
    runs = []
    for j, (sched, lat, k) in enumerate(jobs):
        mine = results[j :: len(jobs)]
        measured = [tl for result in mine for tl in result.timelines[1:]]
        simulated = replay(measured, sched, links=_link(lat), skip_warmup=0)
        costs, losses = costs_from(measured), list(mine[0].losses)
        runs.append(WanRun(sched, lat, k, measured, simulated, costs, losses, steps_per_repeat=e.steps - 1))
    pooled = costs_from([tl for r in runs for tl in r.measured])
    n = len(e.latencies_s)
    return WanMeasurement(e, runs[:n], runs[n:], mean(pooled.f), mean(pooled.i))
