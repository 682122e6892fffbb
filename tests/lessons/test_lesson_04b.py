"""Lesson 04b (TP or PP, once the bubble and 1F1B's memory are known): the step times it compares, from the
library's cost model and presets (course_lib/lessons/tp_or_pp.py), its widget, and its text against its
committed outputs."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from support.committed import output_text, source

from course_lib.lessons.tp_or_pp import first_m_pp_wins, on_link
from course_lib.network import PRESETS
from course_lib.tp.cost import Scenario, crossover_latency, tp_step


@pytest.mark.parametrize(
    ("preset", "first_m"),
    [("nvlink4", 24), ("nvlink5", 35), ("ib-xdr", 8), ("ib-ndr", 4), ("100gbe", 1), ("transatlantic", 1)],
)
def test_the_m_where_pp_overtakes_tp_moves_with_the_link(preset, first_m):
    assert first_m_pp_wins(preset) == first_m


def test_on_nvlink_tp_wins_at_small_m_and_pp_at_large_m():
    tp8, pp8 = on_link("nvlink4", 8)
    tp128, pp128 = on_link("nvlink4", 128)
    assert tp8 < pp8 and pp128 < tp128
    assert (tp8, pp8) == pytest.approx((4.4, 6.3), abs=0.05)


def test_crossover_latency_falls_as_m_grows():
    bandwidth = PRESETS["nvlink4"].link.bandwidth_Bps
    scenarios = [replace(Scenario.h200_70b_training(8, m), bandwidth_Bps=bandwidth) for m in (8, 16, 24)]
    crossings = [crossover_latency(sc) for sc in scenarios]
    assert crossings == pytest.approx([64.0e-6, 22.7e-6, 8.9e-6], abs=0.1e-6)
    # from m = 24 on, PP is faster at NVLink's own preset latency
    assert crossings[2] < PRESETS["nvlink4"].link.latency_s


# ---- the what-if widget (course_lib/widgets/tp_what_if.py) --------------------------------------------
def test_what_if_redraws_once_per_change_and_its_chart_matches_the_controls():
    from course_lib.widgets.tp_what_if import DECODE, tp_what_if

    box = tp_what_if()
    sliders = [box.devices_slider, box.m_slider]
    assert all(not s.continuous_update for s in sliders)  # a drag sends one value, when the mouse lets go
    drawn = []
    box.image.observe(lambda change: drawn.append(change["new"]), names="value")
    box.devices_slider.value = 16
    assert len(drawn) == 1 and "16 devices, m=8" in box.text
    nvlink = PRESETS["nvlink4"].link
    sixteen = replace(Scenario.h200_70b_training(16, 8), bandwidth_Bps=nvlink.bandwidth_Bps)
    tp = tp_step(sixteen, nvlink.latency_s)
    assert f"TP {tp.total_s * 1e3:.2f} ms" in box.text
    box.what_dropdown.value = DECODE
    assert len(drawn) == 2 and box.m_slider.disabled and "m=" not in box.text  # m does nothing in decode
    box.what_dropdown.value = "training step"
    assert not box.m_slider.disabled and "m=8" in box.text


# ---- the lesson's text against its committed outputs ----------------------------------------------
LESSON = "04b_tp_or_pp"


def _pp_wins_from() -> dict[str, int]:
    """Section 1's table, as committed: preset -> the first m at which PP wins."""
    rows = {}
    for line in output_text(LESSON, "7ea0b665").splitlines():
        if m := re.match(r"(\S+)\s.*m = (\d+)$", line):
            rows[m.group(1)] = int(m.group(2))
    return rows


def test_the_recap_and_section_1_say_what_the_table_shows():
    wins = _pp_wins_from()
    assert len(wins) == len(PRESETS)
    assert wins == {name: first_m_pp_wins(name) for name in PRESETS}  # the committed table is the library's
    recap, sec1 = source(LESSON, "a4b00006"), source(LESSON, "f2333f30")
    # "TP wins on NVLink 4 up to m = 23 ... InfiniBand NDR from m = 4, across a metro from m = 2 and across
    # an ocean from m = 1": the first m at which PP wins, minus one for "up to"
    assert f"NVLink 4 up to m = {wins['nvlink4'] - 1}" in recap
    assert f"InfiniBand NDR from m = {wins['ib-ndr']}" in recap
    assert f"across a metro from m = {wins['metro']}" in recap
    assert wins["transatlantic"] == wins["us-coast-to-coast"] == 1 and "across an ocean from m = 1" in recap
    assert "at any m" not in recap
    assert f"up to m = {wins['nvlink4'] - 1}\n(NVLink 5: {wins['nvlink5'] - 1})" in sec1
    fabric = max(wins[name] for name in ("ib-ndr", "ib-xdr", "100gbe", "400gbe"))
    assert f"TP loses from m = {fabric} or sooner" in sec1
    nv = PRESETS["nvlink4"].link.bandwidth_Bps
    fewer = sorted(nv / PRESETS[n].link.bandwidth_Bps for n in ("ib-ndr", "ib-xdr", "100gbe", "400gbe"))
    assert f"carry {fewer[0]:g} to {fewer[-1]:g} times less" in sec1


def test_the_hop_latency_and_section_2_numbers_are_the_printed_ones():
    hop = re.search(r"at 1 us per hop instead, PP wins from m = (\d+)", output_text(LESSON, "24aa3765"))
    said = f"At 1 µs per hop PP wins from m = {hop.group(1)} instead of {_pp_wins_from()['nvlink4']}"
    assert said in source(LESSON, "d1e2f3a4")
    bubble = re.search(r"m=  8: bubble ([\d.]+)%", output_text(LESSON, "d4e5f6a8")).group(1)
    assert f"is {float(bubble):.0f}% at p = 8, m = 8" in source(LESSON, "c3d4e5f6")
