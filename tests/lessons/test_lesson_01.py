"""The numbers lesson 01 (TP against PP, what needs no bubble) builds its argument on, from the library, and
its text against its committed outputs. The step time against m, which needs the bubble, is lesson 04b's
(tests/lessons/test_lesson_04b.py)."""

from __future__ import annotations

import re

from support.committed import output_text, source

from course_lib.tp.accounting import Workload, comparison_rows


def test_tp_moves_280_gib_per_device_per_step_against_1_gib_for_pp():
    rows = comparison_rows(Workload(80, 8192, 4096, 8, 2), 8)
    rows = {r.scheme: r for r in rows if r.what == "training step"}
    assert rows["TP"].bytes_per_device == 280 * 2**30
    assert rows["PP"].bytes_per_device == 1 * 2**30


# ---- the lesson's text against its committed outputs ----------------------------------------------
LESSON = "01_tensor_vs_pipeline"


def test_section_5_says_the_bytes_and_times_it_prints():
    printed, text = output_text(LESSON, "d4e5f6a7"), source(LESSON, "c3d4e5f6")
    tp_gib, nv_s = re.search(r"NVLink 4\s+TP (\d+) GiB:\s+([\d.]+) s", printed).groups()
    ib_s = re.search(r"InfiniBand NDR\s+TP \d+ GiB:\s+([\d.]+) s", printed).group(1)
    assert f"TP sends {tp_gib} GiB per device per step" in text and f"{nv_s} s on\nNVLink 4" in text
    assert f"{float(ib_s):.0f} s on a" in text


def test_the_measured_slopes_support_the_conclusion_drawn_from_them():
    # "the ratio of the two slopes ... stays an order of magnitude": in the committed run, too
    m = re.search(r"free fits (\d+)x", output_text(LESSON, "c8bef25f"))
    assert m is not None and int(m.group(1)) >= 10, m


def test_lesson_01_uses_no_bubble_and_no_1f1b_before_they_are_taught():
    # the bubble is lesson 03's, 1F1B's memory lesson 04's: lesson 01's cells name neither (04b does)
    import json

    from support.paths import REPO_ROOT

    cells = json.loads((REPO_ROOT / "notebooks" / f"{LESSON}.ipynb").read_text())["cells"]
    code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    assert "1f1b" not in code.lower() and "(m + p - 1)" not in code and "tp_what_if" not in code
