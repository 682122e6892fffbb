"""Issue #24's rule over the committed outputs: a measured figure that carries a lesson's point prints its
effect, its spread and their ratio, and the sentence printed beside it says what that ratio allows (at
least 3x: a result; under 3x: illustrative, or "does not rank"). These tests read the outputs as executed
and committed (no kernel), so a text that a later run contradicts cannot come back unnoticed."""

from __future__ import annotations

import re

import pytest
from support.committed import output_text, source


def _ratio(text: str) -> float:
    """The one "(N.Nx)" or "N.Nx its spread" (Effect.verdict) the verdict prints: effect over spread."""
    found = re.findall(r"\(([\d.]+)x\)|([\d.]+)x its spread", text)
    assert len(found) == 1, text
    return float(found[0][0] or found[0][1])


def test_04_prints_the_bubbles_gap_against_its_spread_and_what_the_schedule_itself_changes():
    text = output_text("04_1f1b", "b4a1f1b2")
    found = re.search(r": ([+-][\d.]+) points against a spread of ([\d.]+) points", text)
    gap, spread = (float(x) for x in found.groups())
    ratio = _ratio(text)
    assert ratio == pytest.approx(abs(gap) / spread, abs=0.15), text  # the printed values are rounded
    verdict = "illustrative (under 3x" if ratio < 3 else "decisive (3x or more)"  # Effect.verdict's words
    assert verdict in text, (ratio, text)
    # the same measured costs replayed under both schedules: the schedule's own part of the gap
    replay = re.search(r"no noise\): GPipe ([\d.]+)%, 1F1B ([\d.]+)%, ([\d.]+) points apart", text)
    assert replay, text
    own = float(replay.group(3))  # uneven stages (embedding, head): a few points, not the formula's zero
    assert abs(float(replay.group(1)) - float(replay.group(2))) == pytest.approx(own, abs=0.15), text
    assert ("the rest of the medians' gap" in text) == (own < abs(gap) / 2), text
    # the text says what is measured, not what the measurement will show
    intro = " ".join(source("04_1f1b", "0a6f9619").split())
    assert "measure on the 80-layer model whether its bubble" in intro


def test_07a_labels_its_single_timed_run_illustrative():
    text = output_text("07a_interleaving", "a7a00007")
    assert "illustrative: one timed run, no spread" in text, text


def test_07b_says_whether_zb_h1s_step_gap_stands_clear_as_its_ratio_allows():
    line = next(x for x in output_text("07b_zero_bubble", "66f98286").splitlines() if "median step is" in x)
    ratio = _ratio(line)
    assert ("decisive (3x or more)" in line) == (ratio >= 3), line
    assert ("illustrative (under 3x, it ranks nothing" in line) == (ratio < 3), line
    # s = (T_I + T_W) / T_B is measured: the text must not say which side of 1 it falls on
    s = float(re.search(r"T_I \+ T_W = ([\d.]+) x T_B", output_text("07b_zero_bubble", "66f98286")).group(1))
    text = " ".join(source("07b_zero_bubble", "ad3c3fb0").split())
    assert "to either side of 1" in text and "makes the split backward as a whole cost more" not in text, s


def test_07c_repeats_every_schedule_and_labels_the_family_figure_by_its_clearest_effect():
    text = output_text("07c_v_shapes", "fam4b02")
    assert "3 runs" in text
    rows = re.findall(r"^(\S+)\s+\d\s+[\d.]+%.*\|\s+(\d+)\s+(\d+)-(\d+)\s*$", text, re.M)
    assert len(rows) == 15, text  # every registered schedule: a median and a range
    assert all(int(lo) <= int(med) <= int(hi) for _, med, lo, hi in rows)
    clearest = next(x for x in text.splitlines() if x.startswith("the clearest effect"))
    ratio = _ratio(clearest)
    assert ("illustrative" in clearest) == (ratio < 3), clearest


def test_08_prints_its_run_time_estimate_instead_of_typing_it():
    assert "tens of seconds" not in source("08_scaling_out", "f0adf9ab")
    assert "prints how long a run takes on this machine" in source("08_scaling_out", "f0adf9ab")
    text = output_text("08_scaling_out", "faf8d6b5")
    found = re.search(r"about (\d+) s on this machine \(estimated: .* took (\d+) s, measured\)", text)
    estimate, launch = found.groups()
    assert 0 < int(estimate) <= int(launch), text  # one run of a launch that ran several
