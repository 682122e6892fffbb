"""Lesson 03 (GPipe): the claim check quotes its printed (simulated, deterministic) numbers, and the claim is
called what it is, a common misconception, not pinned on one unnamed text (issue #24)."""

from __future__ import annotations

import re

from support.committed import output_text, source

from course_lib.schedules.closed_forms import gpipe_bubble

LESSON = "03_gpipe"


def _printed_rows() -> dict[int, tuple[str, int]]:
    """p -> (bubble at m = 4p as printed, the smallest m below 2.5%)."""
    printed = output_text(LESSON, "746bfa54")
    rows = re.findall(r"p=(\d), m=4p=\s*\d+: bubble ([\d.]+%).*needs m >= (\d+)", printed)
    assert len(rows) == 3, rows
    return {int(p): (share, int(need)) for p, share, need in rows}


def test_the_claim_check_quotes_the_printed_shares_and_the_m_it_needs():
    rows = _printed_rows()
    claim = " ".join(source(LESSON, "f13ae2bb").split())
    assert f"{rows[2][0]} at p=2, **{rows[4][0]} at p=4**, {rows[8][0]} at p=8" in claim
    assert f"(p=4: m ≥ {rows[4][1]})" in claim
    after = " ".join(source(LESSON, "035291cd").split())
    assert f"the formula's {rows[4][0]}" in after
    assert f"you would need {rows[4][1]} micro-batches at p = 4" in after
    # and the library still says so
    assert f"{gpipe_bubble(4, 16):.1%}" == rows[4][0]


def test_the_calculators_own_examples_refute_the_claim_as_the_text_says():
    assert "The claim is a common misconception." in source(LESSON, "e9e7071b")
    printed = output_text(LESSON, "c62796ee")
    shares = {int(m): float(x) / 100 for m, x in re.findall(r"m=\s*(\d+) = .*bubble ([\d.]+)%", printed)}
    assert shares[32] > 3 * 0.025 and shares[128] < 0.025, shares
    text = " ".join(source(LESSON, "dd4744aa").split())
    assert "m = 8p still leaves more than three times 2.5% idle, and only m = 32p gets under it" in text
