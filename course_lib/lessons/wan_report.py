"""Lesson 06's measured WAN runs, reported: the table and the two figures (``wan_measured.py`` runs them).

Every measured point is a median with its range over the repeats; the replays and the formula sit beside
it, so that a reader sees how far the effect stands above the noise::

    wan = run_wan_experiment(WanExperiment())
    print(wan_table(wan)); plot_summary(wan); plot_gantt(wan)
"""

from __future__ import annotations

from typing import Any

from course_lib.lessons.repeats import Spread
from course_lib.schedules.latency_aware import plain_1f1b_step

# A wan_measured._WanMeasurement; not imported, not even for type checking: that module calls this one
# (its table() and plot methods), and the floors allow no circle.
_WanMeasurement = Any


def wan_table(wan: _WanMeasurement) -> str:
    """Plain 1F1B against the formula, then latency-aware against the flush bound, then the effects
    against their spread (times in ms; a measured column is the median, [low-high] its range)."""
    e, ms = wan.experiment, 1e3

    def rng(s: Spread) -> str:
        return f"{s.median * ms:6.1f} [{s.low * ms:5.1f}-{s.high * ms:5.1f}]"

    paced = "bare ops" if e.pace_s is None else f"ops paced to {e.pace_s[0] * ms:g}/{e.pace_s[1] * ms:g} ms"
    lines = [
        f"p={e.p}, m={e.m}, {e.n_layers} blocks, one sequence of {e.seq_len} tokens per micro-batch, "
        f"{paced}; "
        f"all runs: t_f = {wan.t_f * ms:.1f} ms, t_b = {wan.t_b * ms:.1f} ms per stage; "
        f"{e.repeats} repeats per point, taking turns, "
        f"each the fastest of its {e.steps - 1} measured step(s)",
        "",
        "plain 1F1B: the step's latency part = measured step - (m+p-1)(t_f+t_b) of that run",
        "     L   t_f+t_b   measured step  simulated*   latency part: measured [range]  formula*",
    ]
    lines += [
        f"{r.latency_s * ms:6.1f} {(r.t_f + r.t_b) * ms:9.1f} {r.step_s * ms:15.1f} "
        f"{r.simulated.makespan * ms:11.1f} {rng(r.latency_part_spread):>32s} "
        f"{r.formula_latency_part_s() * ms:8.1f}"
        for r in wan.plain
    ]
    lines += [
        "",
        f"latency-aware 1F1B at L = {e.aware_latency_s * ms:.1f} ms: needed k = ceil(2L/(t_f+t_b)) = "
        f"{wan.needed_extra}; bound* per run",
        "  k   measured step  simulated*   worst idle: measured [range]  simulated*   bound   peak in flight",
    ]
    lines += [
        f"{r.extra:3d} {r.step_s * ms:15.1f} {r.simulated.makespan * ms:11.1f} "
        f"{rng(r.worst_idle_spread):>30s} {r.simulated_worst_idle_s * ms:11.1f} "
        f"{r.bound_s() * ms:7.1f}   {r.peak_inflight}"
        for r in [wan.plain_at(e.aware_latency_s), *wan.aware]
    ]
    lines += ["", "effect (median - median)                   measured  expected*  spread*  ratio"]
    lines += [
        f"{x.what:42s} {x.measured_s * ms:8.1f} {x.expected_s * ms:10.1f} {x.spread_s * ms:8.1f} "
        f"{x.ratio:6.1f}"
        for x in wan.effects()
    ]
    return "\n".join([
        *lines,
        "* simulated: the schedule replayed with the op costs measured in that run, links simulated",
        "* formula: plain 1F1B's latency part 2L[(p-1) + floor((m-1)(p-1)/p)], whatever the costs",
        "* bound: the flush bound (p-1)(t_f+t_b) + 2 sum(L) with the slowest stage's t_f+t_b, plus"
        " m x (slowest - own) for a faster device",
        "* expected: the formula's difference, or the replays'; spread: the two points' ranges added",
    ])  # fmt: skip


def plot_gantt(wan: _WanMeasurement, fig=None):
    """Plain and latency-aware 1F1B at aware_latency_s: measured above simulated, one time axis."""
    import matplotlib.pyplot as plt

    from course_lib.charts.gantt import plot_timeline

    runs = [wan.plain_at(wan.experiment.aware_latency_s), wan.aware_run()]
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


def _ranged(ax, xs, spreads: list[Spread], label: str) -> None:
    """Medians as dots joined by a line, each repeat's value as a tick, the range as a bar."""
    ms = 1e3
    for x, sp in zip(xs, spreads, strict=True):
        ax.vlines(x, sp.low * ms, sp.high * ms, color="C0", lw=5, alpha=0.35)
        ax.plot([x] * len(sp.values), [v * ms for v in sp.values], "_", color="C0", ms=9)
    ax.plot(xs, [sp.median * ms for sp in spreads], "o-", color="C0", label=label)


def plot_summary(wan: _WanMeasurement, fig=None):
    """Left: plain 1F1B's latency part against L (measured median and range, simulated, formula).
    Right: the worst device's idle against k at aware_latency_s (the same), the flush bound, the needed k."""
    import matplotlib.pyplot as plt

    fig = fig or plt.figure(figsize=(11, 3.8))
    left, right = fig.subplots(1, 2)
    e, ms = wan.experiment, 1e3
    n = e.repeats  # a repeat's value: the fastest of its measured steps
    lat = [r.latency_s * ms for r in wan.plain]
    _ranged(left, lat, [r.latency_part_spread for r in wan.plain], f"measured: median, range of {n} repeats")
    left.plot(lat, [(r.simulated.makespan - r.compute_s) * ms for r in wan.plain], "x", color="C1",
              label="simulated (measured costs)")  # fmt: skip
    fine = [x / 20 * max(lat) for x in range(21)]
    left.plot(fine, [plain_1f1b_step(e.p, e.m, 0, 0, x / ms) * ms for x in fine], "-", color="C2",
              label="formula 2L[(p-1)+floor((m-1)(p-1)/p)]")  # fmt: skip
    left.set(xlabel="one-way link latency L (ms)", ylabel="step - (m+p-1)(t_f+t_b) (ms)")
    left.set_title("plain 1F1B: latency is paid, not hidden", fontsize=10)
    left.set_ylim(bottom=min(0.0, left.get_ylim()[0]))
    left.legend(fontsize=8)
    runs = [wan.plain_at(e.aware_latency_s), *wan.aware]
    ks = [r.extra for r in runs]
    _ranged(right, ks, [r.worst_idle_spread for r in runs], f"measured: median, range of {n} repeats")
    right.plot(ks, [r.simulated_worst_idle_s * ms for r in runs], "x", color="C1",
               label="simulated (measured costs)")  # fmt: skip
    right.plot(ks, [r.bound_s() * ms for r in runs], "--", color="0.3", label="flush bound (+ imbalance)")
    k = wan.needed_extra
    right.axvline(k, linestyle=":", color="0.3", label=f"ceil(2L/(t_f+t_b)) = {k}")
    right.set(xlabel="extra micro-batches in flight per link, k (0 = plain 1F1B)",
              ylabel="worst device's idle (ms)")  # fmt: skip
    right.set_ylim(bottom=0)  # from zero: the ranges are seen against the size of what is measured
    right.set_title(f"latency-aware 1F1B at L = {e.aware_latency_s * ms:.0f} ms", fontsize=10)
    right.legend(fontsize=8)
    paced = "bare ops" if e.pace_s is None else f"ops paced to {e.pace_s[0] * ms:g}/{e.pace_s[1] * ms:g} ms"
    fig.suptitle(f"source: measured, {e.p} processes, injected latency, {paced}", fontsize=9)
    fig.tight_layout()
    return fig
