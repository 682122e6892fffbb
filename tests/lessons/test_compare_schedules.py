"""compare_schedules: the closed forms of lessons 07a-07c, read off the simulator's rows."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest

from course_lib.lessons.compare_schedules import Candidate, compare, format_comparison, plot_comparison
from course_lib.schedules.latency_aware import plain_1f1b_step
from course_lib.shelf.costs import Link


def by_label(rows):
    return {r.label: r for r in rows}


def test_equal_costs_give_the_papers_figures():
    p, m = 4, 8
    rows = by_label(compare(p, m))
    one = rows["1F1B"]
    assert one.idle == pytest.approx((p - 1) * 3)  # (p-1)(T_F + T_B + T_W)
    assert one.bubble == pytest.approx((p - 1) / (m + p - 1))
    assert rows["GPipe"].bubble == pytest.approx(one.bubble)  # same bubble ...
    assert (rows["GPipe"].peak_activations, one.peak_activations) == (m, p)  # ... not the same memory
    zb = rows["ZB-H1"]
    assert zb.idle == pytest.approx(one.idle / 3)  # (p-1)(T_F + T_B - T_W): a third
    assert zb.peak_activations == one.peak_activations  # at 1F1B's memory
    for v in (2, 4):
        inter = rows[f"interleaved 1F1B, v={v}"]
        assert inter.idle == pytest.approx(one.idle / v)  # bubble divided by v
        assert inter.peak_activations == pytest.approx(p * (1 + (p - 1) / (p * v)))  # Korthikanti 4.2.3
        assert inter.messages == 2 * (p * v - 1) * m  # about v times 1F1B's 2(p-1)m
    assert one.messages == 2 * (p - 1) * m
    assert rows["latency-aware 1F1B"].makespan == pytest.approx(one.makespan)  # free links: no gain


def test_latency_counts_and_bad_sizes_become_rows():
    p, m, lat = 4, 8, 1.0
    rows = by_label(compare(p, m, link=Link(latency_s=lat)))
    # t_f = 1, full backward t_b = T_B + T_W = 2
    assert rows["1F1B"].makespan == pytest.approx(plain_1f1b_step(p, m, 1.0, 2.0, lat))
    assert rows["latency-aware 1F1B"].makespan < rows["1F1B"].makespan
    assert rows["interleaved 1F1B, v=4"].makespan > rows["1F1B"].makespan  # more crossings, more latency
    bad = compare(4, 9, [Candidate("interleaved", "interleaved-1f1b", 2)])[0]
    assert bad.makespan is None and "m=9" in bad.error
    text = format_comparison([*compare(4, 8)[:2], bad])
    assert "does not fit" in text and "1F1B" in text


def test_plot_has_a_bar_per_fitting_row():
    fig = plot_comparison(compare(2, 4))
    assert len(fig.axes) == 3
    assert len(fig.axes[0].patches) == len(compare(2, 4))
