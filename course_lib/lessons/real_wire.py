"""Lesson 08: a real, rate-limited wire between two hosts against the simulator and injected links.

``bench/bench_two_hosts.py`` (root, Linux) runs the README's two-host torchrun command on two network
namespaces joined by a veth pair, with the wire limited by ``tc tbf`` to each rate in turn, and saves
``data/two_hosts_tbf.json``. The lesson draws that saved measurement, on any machine:

    from course_lib.lessons.real_wire import load_saved, plot_wire, ratios
    saved = load_saved()
    plot_wire(saved); ratios(saved)      # measured / simulated and measured / injected, per rate
"""

from __future__ import annotations

import json
from pathlib import Path

from course_lib.input_files import read_input
from course_lib.shelf.errors import require

SAVED = Path(__file__).resolve().parents[2] / "data" / "two_hosts_tbf.json"


def load_saved(path: str | Path = SAVED) -> dict:
    """The saved measurement (a clear error if it is missing: the bench script makes it)."""
    path = Path(path)
    make = "sudo .venv/bin/python bench/bench_two_hosts.py"
    require(path.is_file(), f"no saved measurement at {path}: `{make}` makes it (root, Linux)")
    return json.loads(read_input(path, "saved measurement", 2**20))  # the bench writes ~1 kB


def ratios(saved: dict) -> list[tuple[float, float, float]]:
    """Per rate: (Mbit/s, measured / simulated, measured / injected)."""
    return [
        (r["rate_Bps"] * 8e-6, r["measured_s"] / r["simulated_s"], r["measured_s"] / r["injected_s"])
        for r in saved["rows"]
    ]


def plot_wire(saved: dict):
    """Step time against the wire's rate: real wire (measured), simulated link, injected link."""
    import matplotlib.pyplot as plt

    rows = saved["rows"]
    mbit = [r["rate_Bps"] * 8e-6 for r in rows]
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    series = [
        ("measured_s", "o-", "measured: two hosts, a real wire limited by tc tbf"),
        ("simulated_s", "s--", "measured compute + simulated link (one machine's run replayed)"),
        ("injected_s", "^:", "measured: one machine, the engine's injected --bandwidth"),
    ]
    for key, style, label in series:
        ax.plot(mbit, [r[key] for r in rows], style, label=label)
    ax.set_xscale("log", base=2)
    ax.set_xticks(mbit, [f"{m:g}" for m in mbit])
    ax.set(xlabel="wire rate (Mbit/s)", ylabel="step time (s)")
    ax.set_title(f"{saved['what']}\nsaved measurement, {saved['machine'].rsplit(', ', 1)[-1]}", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
