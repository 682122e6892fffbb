"""Lesson 04b's question: on a given link preset, is TP's or PP's step the shorter, and from which m does
PP win? The 70B-class training step of ``Scenario.h200_70b_training`` with the preset's bandwidth, priced at
the preset's latency by the alpha-beta model of ``course_lib.tp.cost``.

    from course_lib.lessons.tp_or_pp import first_m_pp_wins, on_link
    on_link("nvlink4", 8)            # (TP step s, PP step s) at m = 8, 8 devices
    first_m_pp_wins("nvlink4")       # the smallest m at which PP's step is the shorter
"""

from __future__ import annotations

from dataclasses import replace

from course_lib.network import PRESETS
from course_lib.shelf.errors import require
from course_lib.tp.cost import Scenario, pp_step, tp_step


def on_link(name: str, microbatches: int, devices: int = 8) -> tuple[float, float]:
    """(TP step, PP step) in seconds for the lesson's 70B-class step on preset `name`."""
    require(name in PRESETS, f"no link preset {name!r}; there are: {', '.join(PRESETS)}")
    link = PRESETS[name].link
    sc = replace(Scenario.h200_70b_training(devices=devices, microbatches=microbatches),
                 bandwidth_Bps=link.bandwidth_Bps)  # fmt: skip
    return tp_step(sc, link.latency_s).total_s, pp_step(sc, link.latency_s).total_s


def first_m_pp_wins(name: str, devices: int = 8, m_max: int = 1024) -> int | None:
    """The smallest m (up to `m_max`) at which PP's step is shorter than TP's on preset `name`, or None."""
    require(m_max >= 1, f"m_max must be >= 1, got {m_max}")
    for m in range(1, m_max + 1):
        tp, pp = on_link(name, m, devices)
        if pp < tp:
            return m
    return None
