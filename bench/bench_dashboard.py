"""How long a lesson dashboard takes to redraw after one control change (simulate + Gantt PNG).

    .venv/bin/python bench/bench_dashboard.py

Walks the p slider, the m slider and the schedule dropdown through a fixed tour, twice: the first
walk meets every setting for the first time (simulate and draw), the second comes back to settings
already seen (the dashboard's cache). Prints the median and slowest redraw of each walk, in wall clock
and in this process's CPU time (on a shared, busy machine the wall clock also counts waiting for a
core; the CPU time is what the redraw itself costs). One thread, no browser: the browser test
covers that.
"""

from __future__ import annotations

import statistics
import time

import torch

from course_lib.widgets.dashboard import pipeline_dashboard

TOUR = [(8, 8, "1f1b"), (8, 16, "1f1b"), (4, 16, "gpipe"), (4, 32, "1f1b"), (8, 32, "zb-h1"),
        (2, 8, "naive"), (8, 32, "interleaved-1f1b"), (4, 8, "1f1b")]  # fmt: skip


def walk(dash) -> list[tuple[float, float]]:
    """(wall s, CPU s) of every control change along TOUR."""
    times = []
    for p, m, schedule in TOUR:
        for control, value in (("p_slider", p), ("m_slider", m), ("schedule_dropdown", schedule)):
            widget = getattr(dash, control)
            if widget.value != value:
                wall, cpu = time.perf_counter(), time.process_time()
                widget.value = value  # the observer re-simulates and redraws synchronously
                times.append((time.perf_counter() - wall, time.process_time() - cpu))
    return times


def report(label: str, times: list[tuple[float, float]]) -> str:
    walls, cpus = [t[0] * 1e3 for t in times], [t[1] * 1e3 for t in times]
    return (
        f"{label} ({len(times)} changes): wall median {statistics.median(walls):.0f} ms, slowest "
        f"{max(walls):.0f} ms | CPU median {statistics.median(cpus):.0f} ms, slowest {max(cpus):.0f} ms"
    )


def main() -> int:
    torch.set_num_threads(1)
    dash = pipeline_dashboard("1f1b", p=4, m=8)
    print("dashboard redraw after one control change, p up to 8, m up to 32 (measured):")
    print(report("  new settings ", walk(dash)))
    print(report("  seen before  ", walk(dash)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
