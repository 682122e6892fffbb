"""Measured means decisive (issue 38): every measured verdict in a lesson is held to the effect/spread ratio
it printed. A ratio of 3 or more may stand as a result; under 3 the verdict says "illustrative". Read from
the committed notebooks' outputs, the text a student sees beside the code.

The ratio is course_lib.lessons.repeats.Effect's: the medians' difference over the two points' ranges
added; ``Effect.verdict()`` prints it as "N.Nx its spread: decisive ..." or "...: illustrative ...".
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from course_lib.lessons.repeats import DECISIVE, Effect, Spread

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))
# "4.2x its spread" (Effect.verdict and the lessons' own lines); "against a spread of 156 ms (0.5x)"
RATIOS = (
    re.compile(r"(\d+(?:\.\d+)?)x its spread"),
    re.compile(r"against a spread of [^()\n]*\((\d+(?:\.\d+)?)x\)"),
)
# Each lesson's measured sections: a piece of the code cell that measures or judges. Each shows a ratio
# verdict, or says "illustrative" in its output or in the text right under it.
MEASURED = {
    "01_tensor_vs_pipeline": ["pp_runs = launch("],
    "02_naive_pipeline": ["m_tl, s_tl = run.measured, run.simulated"],
    "03_gpipe": ['run = train_pipeline("gpipe"'],
    "04_1f1b": ['gap = Effect.between("1F1B - GPipe"'],
    "04c_write_the_pipeline": ["spent = {sync: Spread(tuple(r.sync_seconds()))"],
    "06_pipelines_across_wans": ["for x in wan.effects()"],
    "07a_interleaving": ['print("illustrative: one timed run'],
    "07b_zero_bubble": ['gap = Effect.between("ZB-H1 - 1F1B"'],
    "07c_v_shapes": ["effects = [Effect.between("],
    "08_scaling_out": ['effect = Effect.between("paced"'],
    "09_planning_a_real_run": ["gap, spread = run.step_time_s - chosen.step_s"],
    "11_activation_recomputation": ["checkpoint_cpu_ms("],
    "13_microbatch_size": ["microbatch_sweep("],
}


def cells(stem: str) -> list[dict]:
    return json.loads((ROOT / "notebooks" / f"{stem}.ipynb").read_text())["cells"]


def source(cell: dict) -> str:
    return "".join(cell["source"])


def output_text(cell: dict) -> str:
    """What a cell printed or displayed as text (stdout, Markdown, plain text)."""
    parts = []
    for output in cell.get("outputs", []):
        parts.append("".join(output.get("text", "")))
        for kind in ("text/markdown", "text/plain"):
            parts.append("".join(output.get("data", {}).get(kind, "")))
    return "\n".join(p for p in parts if p)


def verdicts(text: str) -> list[tuple[float, str]]:
    """(ratio, the line and the next) for every effect/spread ratio printed in `text`."""
    lines = text.splitlines()
    found = []
    for k, line in enumerate(lines):
        for pattern in RATIOS:
            for match in pattern.finditer(line):
                found.append((float(match[1]), "\n".join(lines[k : k + 2])))
    return found


def test_effects_verdict_words_follow_its_ratio():
    noisy = Effect.between("x", Spread((1.0, 2.0, 3.0)), Spread((2.0, 3.0, 4.0)), 1.0)
    clear = Effect.between("x", Spread((1.0, 1.1, 1.2)), Spread((3.0, 3.1, 3.2)), 2.0)
    assert noisy.ratio == pytest.approx(0.25) and "0.2x its spread: illustrative" in noisy.verdict()
    assert clear.ratio == pytest.approx(5.0) and "5.0x its spread: decisive" in clear.verdict()
    assert verdicts(noisy.verdict()) == [(0.2, noisy.verdict())]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_printed_ratio_under_3_is_labelled_illustrative(path):
    for k, cell in enumerate(cells(path.stem)):
        for ratio, lines in verdicts(output_text(cell)):
            if ratio < DECISIVE:
                assert "illustrative" in lines, f"{path.stem}, cell {k}: {ratio}x, not labelled:\n{lines}"
            else:
                assert "illustrative" not in lines.splitlines()[0], f"{path.stem}, cell {k}: {lines}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_cell_that_computes_an_effect_prints_its_ratio(path):
    for k, cell in enumerate(cells(path.stem)):
        if cell["cell_type"] == "code" and "Effect.between(" in "".join(cell["source"]):
            assert verdicts(output_text(cell)), f"{path.stem}, cell {k}: an Effect, and no ratio printed"


@pytest.mark.parametrize("stem", sorted(MEASURED))
def test_each_measured_section_prints_a_ratio_or_says_illustrative(stem):
    every = cells(stem)
    for marker in MEASURED[stem]:
        found = [k for k, c in enumerate(every) if c["cell_type"] == "code" and marker in source(c)]
        assert len(found) == 1, (stem, marker, found)
        k = found[0]
        text = output_text(every[k])
        after = every[k + 1] if k + 1 < len(every) else {"cell_type": "code", "source": ""}
        below = source(after) if after["cell_type"] == "markdown" else ""
        assert verdicts(text) or "illustrative" in text or "illustrative" in below, (stem, k, text[-400:])
