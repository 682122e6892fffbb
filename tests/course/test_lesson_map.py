"""The course's map holds together: every lesson says its track and minutes, the minutes are no less than
what its text, code and exercises take, the core path fits in six hours, and lesson 00's map, README's
lesson table and every lesson's Next link follow the files in track order (core first, then the
electives, each track in file order)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))
CORE_MINUTES_LIMIT = 360  # six hours, the bound for the whole core path
CORE_WORDS_LIMIT = 1_500  # markdown words in one core lesson
# an exercise is a call of course_lib.exercises' check_answer("NN.k", ...) (or check("...") of its kind)
CHECK_CALL = re.compile(r'\bcheck(?:_answer)?\(\s*"')
WELCOME_MINUTES_LIMIT = 15  # lesson 00: a welcome, not a lesson
NEXT = re.compile(r"\*\*Next:\*\*\s*\[`?([\w.]+\.ipynb)`?\]\(([\w.]+\.ipynb)\)")


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def markdown(nb: dict) -> list[str]:
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown"]


def words(nb: dict) -> int:
    return sum(len(text.split()) for text in markdown(nb))


def floor_minutes(nb: dict) -> float:
    """words/120 + 1 per code cell + 5 per exercise (each `check_answer("..."` call is one exercise)."""
    code = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    exercises = sum(len(CHECK_CALL.findall(src)) for src in code)
    return words(nb) / 120 + len(code) + 5 * exercises


def course(path: Path) -> dict:
    meta = load(path)["metadata"].get("course")
    assert isinstance(meta, dict), f"{path.name}: metadata has no 'course'"
    return meta


def track_order() -> list[str]:
    """Stems in the order a student takes them: the core path, then the electives, each in file order."""
    tracks = {p.stem: course(p)["track"] for p in NOTEBOOKS}
    return [s for s in tracks if tracks[s] == "core"] + [s for s in tracks if tracks[s] == "elective"]


def core() -> list[str]:
    return [p.stem for p in NOTEBOOKS if course(p)["track"] == "core"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_each_lesson_says_its_track_and_minutes_no_fewer_than_its_floor(path):
    meta = course(path)
    assert set(meta) == {"track", "minutes"}, meta
    assert meta["track"] in ("core", "elective")
    assert isinstance(meta["minutes"], int)
    nb = load(path)
    assert meta["minutes"] >= math.ceil(floor_minutes(nb)), (path.stem, meta["minutes"], floor_minutes(nb))


def test_the_floor_counts_each_exercise():
    nb = load(ROOT / "notebooks" / "00_welcome.ipynb")
    code = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    exercises = sum(len(CHECK_CALL.findall(src)) for src in code)
    assert exercises == sum(src.count("check_answer(") for src in code) >= 1
    assert floor_minutes(nb) == words(nb) / 120 + len(code) + 5 * exercises


def test_lesson_00_takes_at_most_15_minutes_by_its_metadata_and_its_floor():
    nb = load(ROOT / "notebooks" / "00_welcome.ipynb")
    assert math.ceil(floor_minutes(nb)) <= course(ROOT / "notebooks" / "00_welcome.ipynb")["minutes"]
    assert course(ROOT / "notebooks" / "00_welcome.ipynb")["minutes"] <= WELCOME_MINUTES_LIMIT


def test_the_core_path_is_the_seeds_story_in_order_and_fits_six_hours():
    assert core() == [
        "00_welcome",
        "01_tensor_vs_pipeline",
        "02_naive_pipeline",
        "03_gpipe",
        "04_1f1b",
        "04c_write_the_pipeline",
        "05_balancing_stages",
        "06_pipelines_across_wans",
        "08_scaling_out",
    ]
    total = sum(course(ROOT / "notebooks" / f"{stem}.ipynb")["minutes"] for stem in core())
    assert total <= CORE_MINUTES_LIMIT, total


@pytest.mark.parametrize("stem", core())
def test_a_finished_core_lesson_has_at_most_1500_words(stem):
    assert words(load(ROOT / "notebooks" / f"{stem}.ipynb")) <= CORE_WORDS_LIMIT


def test_every_lesson_links_the_notation_card_first_and_electives_name_what_they_need():
    assert (ROOT / "notebooks" / "notation.md").is_file()
    for path in NOTEBOOKS:
        first = markdown(load(path))[0]
        assert "(notation.md)" in first, path.stem
        if course(path)["track"] == "elective":
            assert re.search(r"Needs core lessons \d\d", first), path.stem


def test_the_notation_card_gives_both_bubble_conventions_and_whose_b():
    card = (ROOT / "notebooks" / "notation.md").read_text()
    for needed in ("(p−1)/(m+p−1)", "(p−1)/m", "x/(1+x)", "2401.10241", "DualPipe", "input gradient"):
        assert needed in card, needed
    for symbol in ("**p**", "**m**", "**v**", "**t**", "**d**", "**b**", "**F**", "**B**", "**I**", "**W**"):
        assert symbol in card, symbol


def test_every_next_link_names_the_following_lesson_in_track_order():
    order = track_order()
    for k, stem in enumerate(order):
        last = markdown(load(ROOT / "notebooks" / f"{stem}.ipynb"))[-1]
        found = NEXT.findall(last)
        assert len(found) == 1, f"{stem}: one Next link in its last cell, found {found}"
        shown, target = found[0]
        expected = f"{order[k + 1]}.ipynb" if k + 1 < len(order) else "00_welcome.ipynb"
        assert shown == target == expected, (stem, target, expected)


def map_rows(text: str) -> list[str]:
    """The notebook stems a table or list links or names, in order, with 'coming' for the unwritten lesson."""
    rows = []
    for line in text.splitlines():
        if re.match(r"\|\s*\(?coming\)?\s*\|", line):
            rows.append("coming")
        rows += [m for m in re.findall(r"(\d\d[a-z]?_\w+)\.ipynb", line) if not rows or rows[-1] != m]
    return rows


def test_lesson_00s_map_lists_every_lesson_in_track_order():
    first = markdown(load(ROOT / "notebooks" / "00_welcome.ipynb"))[0]
    rows = map_rows(first)
    expected = track_order()
    assert rows == expected


def test_readmes_lesson_table_lists_every_lesson_in_track_order_with_its_track():
    readme = (ROOT / "README.md").read_text()
    start = readme.index("| # | track | notebook |")
    table = readme[start : readme.index("\n\n", start)]
    expected = track_order()
    names = []
    for line in table.splitlines()[2:]:
        cols = [c.strip() for c in line.strip("|").split("|")]
        stem = cols[2].strip("`").removesuffix(".ipynb")
        names.append("coming" if cols[0] == "(coming)" else stem)
        if cols[0] != "(coming)":
            assert cols[1] == course(ROOT / "notebooks" / f"{stem}.ipynb")["track"], stem
    assert names == expected
