"""Figures for TP against PP: the latency sweep (model lines) with measured points beside it.

from course_lib.tp.cost import Scenario, sweep
from course_lib.tp.plots import plot_sweep
plot_sweep(sweep(Scenario.h200_70b_training()))
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from course_lib.shelf.errors import require
from course_lib.tp.cost import Sweep
from course_lib.tp.distributed import noise


def plot_sweep(sw: Sweep, marker_s: float | None = None, ax_pair=None):
    """Left: step time against per-hop latency (log-log); right: share of time compute waits."""
    if ax_pair is None:
        _, ax_pair = plt.subplots(1, 2, figsize=(11, 4))
    left, right = ax_pair
    us = sw.alphas_s * 1e6
    left.loglog(us, sw.tp_s, label=f"TP, t={sw.scenario.devices}")
    left.loglog(us, sw.pp_s, label=f"PP, p={sw.scenario.devices}")
    right.semilogx(us, 100 * sw.tp_wait, label="TP: waits for all-reduces")
    right.semilogx(us, 100 * sw.pp_wait, label="PP: bubble + hops")
    for ax in ax_pair:
        if sw.crossover_s:
            x = sw.crossover_s * 1e6
            ax.axvline(x, color="0.4", ls="--", lw=1, label=f"crossover {x:.3g} us")
        if marker_s is not None:
            ax.axvline(marker_s * 1e6, color="black", ls=":", lw=1.5, label=f"you: {marker_s * 1e6:.3g} us")
        ax.set_xlabel("per-hop link latency alpha (us)")
        ax.legend(fontsize=8)
    left.set_ylabel("step time (s)")
    right.set_ylabel("share of time compute waits (%)")
    right.set_ylim(0, 100)
    left.set_title(f"{sw.scenario.name}\nsource: model (alpha-beta)", fontsize=9)
    right.set_title("waiting share\nsource: model (alpha-beta)", fontsize=9)
    return ax_pair


def plot_measured(alphas_s, times_by_alpha: dict, baseline_s: float, slope: float, label: str = "TP",
                  stat: str = "median", ax=None):  # fmt: skip
    """Measured step times against the model line ``baseline + slope * alpha``.

    `slope`: seconds of step time per second of per-hop latency, 2(t-1) * (all-reduces per step) for TP,
    2(p-1) for a GPipe step. Points: `stat` over the repeats (median, or min = least disturbed by other
    programs), error bar = sample std; `baseline_s` is the same statistic measured at alpha = 0.
    Call twice with the same `ax` to put TP and PP side by side."""
    require(stat in ("median", "min"), f"stat must be 'median' or 'min', got {stat!r}")
    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 4))
    pick = np.median if stat == "median" else np.min
    alphas = np.asarray(alphas_s, float)
    value = np.array([pick(times_by_alpha[a]) for a in alphas_s])
    std = np.array([noise(times_by_alpha[a]) for a in alphas_s])
    grid = np.logspace(np.log10(alphas[alphas > 0].min() / 2), np.log10(alphas.max() * 2), 50)
    (line,) = ax.plot(grid * 1e6, 1e3 * (baseline_s + slope * grid), label=f"{label}: model")
    shown = alphas > 0
    ax.errorbar(
        alphas[shown] * 1e6, value[shown] * 1e3, yerr=std[shown] * 1e3, fmt="o", capsize=3,
        color=line.get_color(), label=f"{label}: measured ({stat}, +-1 std)",
    )  # fmt: skip
    ax.set(xscale="log", yscale="log", xlabel="injected per-hop latency alpha (us)", ylabel="step time (ms)")
    ax.set_title(
        "real multi-process runs with injected latency\nsource: measured (points), model (lines)", fontsize=9
    )
    ax.legend(fontsize=8)
    return ax
