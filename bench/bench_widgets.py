"""Every lesson widget: how long one redraw takes after a new setting, and how many redraws one change
causes (it must be one).

    PYTHONPATH=$PWD .venv/bin/python bench/bench_widgets.py            # every widget
    PYTHONPATH=$PWD .venv/bin/python bench/bench_widgets.py planner    # the ones whose name has "planner"

For each widget, a fixed tour of settings, each one new to the widget (no cache hit), set the way a
mouse release does (one value per control change). Prints the median and the slowest redraw, in wall
clock and in this process's CPU time (on a busy machine the wall clock also counts waiting for a core),
and the redraws per change, counted as changes of the widget's chart. One thread, no browser: the
browser test (tests/browser) covers that a drag sends one value.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable

import torch

Tour = list[tuple[str, object]]  # (control attribute, value), in order


def dashboard() -> tuple[object, str, Tour]:
    from course_lib.widgets.dashboard import pipeline_dashboard

    tour = [("p_slider", 8), ("m_slider", 16), ("schedule_dropdown", "gpipe"), ("m_slider", 32),
            ("schedule_dropdown", "zb-h1"), ("p_slider", 6), ("link_dropdown", "transatlantic"),
            ("schedule_dropdown", "interleaved-1f1b"), ("m_slider", 12), ("p_slider", 3)]  # fmt: skip
    return pipeline_dashboard("1f1b", p=4, m=8, max_p=8, max_m=32), "image", tour


def planner() -> tuple[object, str, Tour]:
    from course_lib.widgets.planner import planner_widget

    tour = [("gpus_dropdown", 512), ("batch_dropdown", 1024), ("choice_dropdown", 1),
            ("gpus_dropdown", 1024), ("model_dropdown", "megatron-18b"), ("batch_dropdown", 256),
            ("choice_dropdown", 2), ("gpus_dropdown", 128)]  # fmt: skip
    # counted as new titles under the chart: two layouts with the same pipeline draw the same PNG
    return planner_widget("megatron-145b", "a100-selene", gpus=256, global_batch=512), "chart_key", tour


def latency_map() -> tuple[object, str, Tour]:
    from course_lib.widgets.latency_map import latency_map as build

    box = build(["Ashburn VA", "Dublin", "Frankfurt", "Singapore"], microbatches=16, nbytes=64 * 2**20)
    tour = [("m_slider", 8), ("m_slider", 32), ("route", 2.1), ("gbps_slider", 10.0), ("m_slider", 24),
            ("route", 1.4), ("gbps_slider", 1.0), ("schedule", "latency-aware-1f1b")]  # fmt: skip
    return box, "output", tour


def tp_what_if() -> tuple[object, str, Tour]:
    from course_lib.widgets.tp_what_if import DECODE
    from course_lib.widgets.tp_what_if import tp_what_if as build

    tour = [("devices_slider", 16), ("m_slider", 32), ("link_dropdown", "ib-ndr"), ("devices_slider", 4),
            ("what_dropdown", DECODE), ("devices_slider", 8), ("link_dropdown", "100gbe"),
            ("what_dropdown", "training step"), ("m_slider", 128)]  # fmt: skip
    return build(), "image", tour


def budget_cuts() -> tuple[object, str, Tour]:
    from course_lib.balance import profile_layers, stage_totals
    from course_lib.shelf.first_schedules import build_schedule
    from course_lib.shelf.model import ModelConfig, build_model
    from course_lib.shelf.simulator import StageCosts, simulate
    from course_lib.widgets.budget_cuts import budget_cuts as build

    prof = profile_layers(build_model(ModelConfig(n_layers=80, vocab_size=2048), seed=0), 2, 32, repeats=1)

    def step_of(part, p):  # lesson 05's simulated_step: summed layer times, F:B = 1:2
        t = stage_totals(prof.time_s, part)
        costs = StageCosts.fused(f=[x / 3 for x in t], b=[2 * x / 3 for x in t])
        return simulate(build_schedule("1f1b", p, 8), costs)

    tour = [("budget_slider", 1.3), ("budget_slider", 1.0), ("p_dropdown", 8), ("budget_slider", 1.5),
            ("p_dropdown", 2), ("budget_slider", 1.2), ("p_dropdown", 4), ("budget_slider", 1.04),
            ]  # fmt: skip
    return build(prof, step_of, p=4, m=8, budget_factor=1.1), "image", tour


WIDGETS: dict[str, Callable[[], tuple[object, str, Tour]]] = {
    "dashboard (lessons 02-04, 07, 08)": dashboard,
    "planner (lesson 09)": planner,
    "latency map (lesson 06)": latency_map,
    "TP what-if (lesson 01)": tp_what_if,
    "budget cuts (lesson 05)": budget_cuts,
}


def measure(build: Callable[[], tuple[object, str, Tour]]) -> tuple[list[float], list[float], list[int]]:
    """Wall ms, CPU ms and chart changes of every change along the widget's tour."""
    box, chart, tour = build()
    changes = [0]
    getattr(box, chart).observe(lambda _change: changes.__setitem__(0, changes[0] + 1), names="outputs"
                                if chart == "output" else "value")  # fmt: skip
    walls, cpus, redraws = [], [], []
    for control, value in tour:
        changes[0] = 0
        wall, cpu = time.perf_counter(), time.process_time()
        getattr(box, control).value = value  # the observer redraws synchronously, as in the kernel
        walls.append((time.perf_counter() - wall) * 1e3)
        cpus.append((time.process_time() - cpu) * 1e3)
        redraws.append(changes[0])
    return walls, cpus, redraws


def main(argv: list[str]) -> int:
    torch.set_num_threads(1)
    print("one redraw after a new setting (measured on this machine, one thread):")
    for name, build in WIDGETS.items():
        if argv and not any(word in name for word in argv):
            continue
        walls, cpus, redraws = measure(build)
        print(
            f"  {name:34s} {len(walls):2d} changes: wall median {statistics.median(walls):4.0f} ms, "
            f"slowest {max(walls):4.0f} ms | CPU median {statistics.median(cpus):4.0f} ms, "
            f"slowest {max(cpus):4.0f} ms | redraws per change {min(redraws)}-{max(redraws)}"
        )
    print("(0 redraws: a setting the widget refused; the last chart stays, with the reason beside it)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
