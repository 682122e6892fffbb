"""How long a lesson dashboard takes to redraw after one control changes (simulate + Gantt PNG).

    .venv/bin/python bench/bench_dashboard.py

Walks the p slider, the m slider and the schedule dropdown through a fixed tour and prints the
median, fastest and slowest redraw (wall clock, one thread, no browser: the browser test covers that).
"""

from __future__ import annotations

import statistics
import time

import torch

from course_lib.widgets.dashboard import pipeline_dashboard

TOUR = [(8, 8, "1f1b"), (8, 16, "1f1b"), (4, 16, "gpipe"), (4, 32, "1f1b"), (8, 32, "zb-h1"),
        (2, 8, "naive"), (8, 32, "interleaved-1f1b"), (4, 8, "1f1b")]  # fmt: skip


def main() -> int:
    torch.set_num_threads(1)
    dash = pipeline_dashboard("1f1b", p=4, m=8)
    times = []
    for p, m, schedule in TOUR:
        for control, value in (("p_slider", p), ("m_slider", m), ("schedule_dropdown", schedule)):
            widget = getattr(dash, control)
            if widget.value != value:
                start = time.perf_counter()
                widget.value = value  # the observer re-simulates and redraws synchronously
                times.append(time.perf_counter() - start)
    print(
        f"dashboard redraw after one control change ({len(times)} changes, p up to 8, m up to 32): "
        f"median {statistics.median(times) * 1e3:.0f} ms, fastest {min(times) * 1e3:.0f} ms, "
        f"slowest {max(times) * 1e3:.0f} ms (measured)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
