"""Plain and latency-aware 1F1B over a slow link: measured on real processes, beside the simulation.

Lesson 06 shows two behaviours in the simulator (formulas in ``course_lib/schedules/latency_aware.py``):
plain 1F1B pays every bit of link latency L; ceil(2L / (t_f + t_b)) more micro-batches in flight per
link keep each device's idle time within the flush bound.

This module runs both for real: one process per stage (the distributed engine), a link with injected
latency between them, plain 1F1B at several L and the latency-aware variant with k = 1, 2, ... extra
micro-batches at one of those L, all in ONE launch (starting processes is the slow part). The
simulation beside each run replays the op costs measured in it (source "measured compute + simulated
links"), and the formula and the bound use the costs measured in that same run (on a shared
machine an op's time depends on what else runs)::

    from course_lib.lessons.wan_measured import WanExperiment, run_wan_experiment
    res = run_wan_experiment(WanExperiment(n_layers=32, latencies_s=(0.0, 0.02, 0.04)))  # ~20 s
    print(res.table())                 # measured vs simulated vs formula, per run
    res.plot_gantt()                   # plain and latency-aware: measured above simulated

Or from the shell: ``python bench/bench_wan.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import mean, median

from course_lib.costs import StageCosts, costs_from
from course_lib.errors import require
from course_lib.lessons.scale_out import replay
from course_lib.links import Link
from course_lib.reference import TrainConfig
from course_lib.schedules.builders import build_schedule
from course_lib.schedules.ir import Schedule
from course_lib.schedules.latency_aware import (
    extra_in_flight,
    flush_bound,
    latency_aware_1f1b,
    plain_1f1b_step,
)
from course_lib.timeline import Timeline


@dataclass(frozen=True)
class WanExperiment:
    """What to run. The link latency should be comparable to or larger than t_f + t_b of a stage, so the
    effect stands well above the noise of a shared machine; the defaults suit 2 CPU cores."""

    n_layers: int = 32  # transformer blocks (embedding and head come on top)
    p: int = 2  # stages = processes
    m: int = 8  # micro-batches of one sequence each
    seq_len: int = 32
    latencies_s: tuple[float, ...] = (0.0, 0.02, 0.04)  # plain 1F1B at each
    # latency-aware 1F1B at this one (one of latencies_s): 2L over t_f + t_b must stay below m, so
    # that the needed k fits in the batch on a fast machine as well as on a loaded one
    aware_latency_s: float = 0.02
    extras: tuple[int, ...] | None = None  # k for the latency-aware runs; None: 1 up to the deepest useful
    steps: int = 3  # the first is warm-up and left out of every median
    threads: int = 1  # torch threads per process
    timeout_s: float = 60.0

    def check(self) -> None:
        require(self.p >= 2, f"p must be >= 2 (a link needs two stages), got {self.p!r}")
        require(self.steps >= 2, f"steps must be >= 2 (the first is warm-up), got {self.steps!r}")
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
    measured: list[Timeline]  # one per step after the warm-up (source "measured")
    simulated: Timeline  # the schedule replayed with this run's measured costs and the link
    costs: StageCosts = field(repr=False)  # medians of this run's spans, per stage
    losses: list[float] = field(default_factory=list)  # training loss per step (every run trains)

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

    def table(self) -> str:
        """Plain 1F1B against the formula, then latency-aware against the flush bound (times in ms)."""
        e, ms = self.experiment, 1e3
        lines = [
            f"p={e.p}, m={e.m}, {e.n_layers} blocks, one sequence of {e.seq_len} tokens per micro-batch; "
            f"all runs: t_f = {self.t_f * ms:.1f} ms, t_b = {self.t_b * ms:.1f} ms per stage",
            "",
            "plain 1F1B: the step's latency part = measured step - (m+p-1)(t_f+t_b) of that run",
            "     L   t_f+t_b   measured  simulated*   latency part: measured  formula*",
        ]
        lines += [
            f"{r.latency_s * ms:6.1f} {(r.t_f + r.t_b) * ms:9.1f} {r.step_s * ms:10.1f} "
            f"{r.simulated.makespan * ms:11.1f} {r.latency_part_s * ms:24.1f} "
            f"{r.formula_latency_part_s() * ms:8.1f}"
            for r in self.plain
        ]
        lines += [
            "",
            f"latency-aware 1F1B at L = {e.aware_latency_s * ms:.1f} ms: needed k = ceil(2L/(t_f+t_b)) = "
            f"{self.needed_extra}; bound* per run",
            "  k   measured step  simulated*   worst idle: measured  simulated*   bound   peak in flight",
        ]
        lines += [
            f"{r.extra:3d} {r.step_s * ms:15.1f} {r.simulated.makespan * ms:11.1f} "
            f"{r.worst_idle_s * ms:22.1f} {r.simulated_worst_idle_s * ms:11.1f} "
            f"{r.bound_s() * ms:7.1f}   {r.peak_inflight}"
            for r in [self.plain_at(e.aware_latency_s), *self.aware]
        ]
        return "\n".join([
            *lines,
            "* simulated: the schedule replayed with the op costs measured in that run, links simulated",
            "* formula: plain 1F1B's latency part 2L[(p-1) + floor((m-1)(p-1)/p)], whatever the costs",
            "* bound: the flush bound (p-1)(t_f+t_b) + 2 sum(L) with the slowest stage's t_f+t_b, plus"
            " m x (slowest - own) for a faster device",
        ])  # fmt: skip

    def plot_gantt(self, fig=None):
        """Plain and latency-aware 1F1B at aware_latency_s: measured above simulated, one time axis."""
        import matplotlib.pyplot as plt

        from course_lib.plots import plot_timeline

        runs = [self.plain_at(self.experiment.aware_latency_s), self.aware_run()]
        pairs = [(r, tl) for r in runs for tl in (r.measured[-1], r.simulated)]
        extent = max(tl.makespan for _, tl in pairs)
        fig = fig or plt.figure(figsize=(10, 1.5 * len(pairs) + 0.8 * len(pairs)))
        axes = fig.subplots(len(pairs), 1)
        for ax, (r, tl) in zip(axes, pairs, strict=True):
            kind = "measured" if tl.source == "measured" else "simulated from measured costs"
            label = "plain 1F1B" if r.extra == 0 else f"latency-aware 1F1B, k={r.extra}"
            plot_timeline(
                tl, ax=ax, extent_s=extent,
                title=f"{label}, L = {r.latency_s * 1e3:.0f} ms: {kind} · step {tl.makespan * 1e3:.0f} ms",
            )  # fmt: skip
        fig.tight_layout()
        return fig

    def plot_summary(self, fig=None):
        """Left: plain 1F1B's step against L (measured, simulated, formula). Right: the worst device's
        idle against k at aware_latency_s (measured, simulated), with the flush bound and the needed k."""
        import matplotlib.pyplot as plt

        fig = fig or plt.figure(figsize=(11, 3.6))
        left, right = fig.subplots(1, 2)
        e, ms = self.experiment, 1e3
        lat = [r.latency_s * ms for r in self.plain]
        left.plot(lat, [r.latency_part_s * ms for r in self.plain], "o", label="measured")
        left.plot(lat, [(r.simulated.makespan - r.compute_s) * ms for r in self.plain], "x",
                  label="simulated (measured costs)")  # fmt: skip
        fine = [x / 20 * max(lat) for x in range(21)]
        left.plot(fine, [plain_1f1b_step(e.p, e.m, 0, 0, x / ms) * ms for x in fine], "-",
                  label="formula 2L[(p-1)+floor((m-1)(p-1)/p)]")  # fmt: skip
        left.set(xlabel="one-way link latency L (ms)", ylabel="step - (m+p-1)(t_f+t_b) (ms)")
        left.set_title("plain 1F1B: latency is paid, not hidden", fontsize=10)
        left.legend(fontsize=8)
        runs = [self.plain_at(e.aware_latency_s), *self.aware]
        ks = [r.extra for r in runs]
        right.plot(ks, [r.worst_idle_s * ms for r in runs], "o-", label="measured")
        right.plot(ks, [r.simulated_worst_idle_s * ms for r in runs], "x", label="simulated (measured costs)")
        right.plot(ks, [r.bound_s() * ms for r in runs], "--", color="0.3", label="flush bound (+ imbalance)")
        k = self.needed_extra
        right.axvline(k, linestyle=":", color="0.3", label=f"ceil(2L/(t_f+t_b)) = {k}")
        right.set(xlabel="extra micro-batches in flight per link, k (0 = plain 1F1B)",
                  ylabel="worst device's idle (ms)")  # fmt: skip
        right.set_title(f"latency-aware 1F1B at L = {e.aware_latency_s * ms:.0f} ms", fontsize=10)
        right.legend(fontsize=8)
        fig.tight_layout()
        return fig


def _link(latency_s: float) -> Link | None:
    return Link(latency_s=latency_s) if latency_s > 0 else None


def run_wan_experiment(e: WanExperiment = WanExperiment(), progress: bool = False) -> WanMeasurement:
    """Run plain 1F1B at each latency, then latency-aware 1F1B at aware_latency_s for each k, all in one
    launch of p processes; return the measurements beside the replays."""
    from course_lib.engines.distributed import launch, make_spec

    e.check()
    jobs = [(build_schedule("1f1b", e.p, e.m), lat, 0) for lat in e.latencies_s]
    jobs += [(latency_aware_1f1b(e.p, e.m, k), e.aware_latency_s, k) for k in e.extra_values()]
    cfg = e.config()
    specs = [make_spec(cfg, s, links=_link(lat), threads=e.threads, timeout_s=e.timeout_s, track_memory=False)
             for s, lat, _ in jobs]  # fmt: skip
    runs = []
    for (sched, lat, k), result in zip(jobs, launch(specs, progress), strict=True):
        measured = result.timelines[1:]
        simulated = replay(measured, sched, links=_link(lat), skip_warmup=0)
        runs.append(WanRun(sched, lat, k, measured, simulated, costs_from(measured), list(result.losses)))
    pooled = costs_from([tl for r in runs for tl in r.measured])
    n = len(e.latencies_s)
    return WanMeasurement(e, runs[:n], runs[n:], mean(pooled.f), mean(pooled.i))
