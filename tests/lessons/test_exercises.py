"""course_lib.exercises and the lessons' registered exercises: verdicts that say the direction only, every
answer computed by the library, every notebook's check naming a registered key of its own lesson."""

import inspect
import json
import math
import re
from pathlib import Path

import pytest
from support.paths import REPO_ROOT

from course_lib.exercises import check_answer, verdict
from course_lib.lessons.answers import EXERCISES, exercise
from course_lib.shelf.errors import MAX_CHARS, MAX_LINES, CourseError, capped
from course_lib.shelf.simulator import StageCosts


def test_verdicts_say_how_far_off():
    assert verdict(0.2727, 3 / 11) == "ok"
    assert verdict(None, 1.0) == "missing"
    assert verdict("abc", 1.0) == "not a number"
    assert verdict(10.0, 1.0) == "too high by 10.0x"
    assert verdict(0.9, 1.0) == "too low by 10%"


def test_a_count_must_be_exact_and_text_is_not_a_number():
    import numpy as np

    assert verdict(63, 63) == verdict(63.0, 63) == verdict(np.int64(63), 63) == "ok"
    assert verdict(2 * 0.1 * 1000, 200) == "ok"  # float rounding of a whole number is still that number
    assert verdict(62, 63) == "too low by 2%"  # within rel_tol, but a count is exact
    assert verdict(62.5, 63).startswith("not a whole number")
    assert verdict(64, np.int64(63)) == "too high by 2%"
    assert verdict("0.5", 0.5) == verdict(b"0.5", 0.5) == verdict(True, 1) == "not a number"


def test_a_share_given_as_a_percent_is_told_its_unit():
    assert verdict(17.9, 7 / 39).startswith("a percent")
    assert verdict(0.179, 7 / 39) == "ok"
    assert verdict(17.9, 17.9) == "ok"  # a value that is a percent by design stays one


def test_check_prints_hint_and_never_raises(capsys):
    from course_lib.schedules.closed_forms import gpipe_bubble

    check_answer("03.1", None)
    assert "no answer yet. Hint: count the idle slots" in capsys.readouterr().out
    check_answer("03.1", gpipe_bubble(4, 8))
    assert capsys.readouterr().out.startswith("[correct] 03.1")
    check_answer("03.1", 0.5)
    out = capsys.readouterr().out
    assert "which is too high. Hint: count" in out and "%" not in out.split("Hint")[0]


def test_verdict_without_distance_says_only_the_direction():
    assert verdict(0.375, 3 / 11, how_far=False) == "too high"
    assert verdict(0.1, 3 / 11, how_far=False) == "too low"
    assert verdict(27.3, 3 / 11, how_far=False).startswith("a percent")
    assert verdict(62, 63, how_far=False) == "too low"


class BadFloat:
    def __float__(self):
        raise ZeroDivisionError("a student's class")


ODD_ANSWERS = [10**400, -(10**400), 10**5000, float("nan"), float("inf"), "abc", [0] * 10**6, 2j, BadFloat()]


@pytest.mark.parametrize("answer", ODD_ANSWERS, ids=lambda a: type(a).__name__)
def test_check_never_raises_and_prints_one_short_line(answer, capsys):
    check_answer("03.1", answer)
    out = capsys.readouterr().out
    assert out.startswith("[not yet] 03.1 GPipe bubble, p = 4, m = 8: you gave ") and " Hint: count " in out
    assert out.count("\n") == 1 and len(out) < 300


def test_odd_numbers_are_not_numbers():
    for answer in (10**400, float("nan"), float("-inf"), "0.5x"):
        assert verdict(answer, 0.5) == "not a number"


def test_capped_keeps_a_screenful_and_says_how_much_was_cut():
    assert capped("short\nmessage") == "short\nmessage"
    lines = capped("\n".join(f"line {i}" for i in range(1000))).splitlines()
    # 1000 lines of 6 to 8 characters and 999 newlines: 8,889 characters, of which the first 20 lines keep 149
    assert len(lines) == MAX_LINES + 1 and lines[-1] == "... [8,740 characters cut]"
    one_line = capped("x" * 10**6)
    assert len(one_line) < MAX_CHARS + 40 and one_line.endswith(f"[{10**6 - MAX_CHARS:,} characters cut]")


NOTEBOOKS = sorted((REPO_ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb"))
# Lessons whose cells still hold check(name, answer, expected=...): the coordinator runs
# tools/rewrite_exercises.py on them after merging and then empties this set.
SAMPLE_MEASURED = {  # what the notebooks pass: ms per slot by b (13.1), the toy's stage forwards in s (15.4)
    "slot_ms": {1: 1.0, 2: 1.6, 4: 2.9, 8: 5.5, 16: 10.8, 32: 21.4},
    "costs": StageCosts.fused([0.0036, 0.0035, 0.0035, 0.0034], 0.0),
}
# a key is its lesson's number, with the letter of a lesson split in parts ("07a.1"), then the exercise's
KEY_CALL = re.compile(r"""\bcheck_answer\(\s*["'](\d\d[a-z]?\.\d+)["']""")
LESSON_OF_FILE = re.compile(r"\d\d[a-z]?(?=_)")


def computed(fn) -> bool:
    """Whether `fn` computes from its inputs or the library: a bare literal (lambda: 3 / 11) references
    neither an argument nor any name."""
    code = fn.__code__
    return code.co_argcount > 0 or bool(code.co_names)


def expected_of(ex):
    return ex.expected(**{name: SAMPLE_MEASURED[name] for name in ex.measured})


def test_a_bare_literal_would_be_caught():
    assert not computed(lambda: 3 / 11) and computed(lambda p, m: (p - 1) / (m + p - 1))


@pytest.mark.parametrize("key", sorted(EXERCISES))
def test_every_answer_is_computed_from_the_question(key):
    ex = EXERCISES[key]
    assert computed(ex.solve), f"{key}'s answer is a literal"
    inspect.signature(ex.solve).bind(**ex.given, **dict.fromkeys(ex.measured))  # given names its inputs
    value = expected_of(ex)
    assert isinstance(value, (int, float)) and math.isfinite(value)


def test_keys_name_their_lesson_and_hints_give_no_formula():
    for key, ex in EXERCISES.items():
        assert re.fullmatch(r"\d\d[a-z]?\.\d+", key) and ex.key == key
        assert "=" not in ex.hint and "(p-1)" not in ex.hint.replace(" ", ""), key
        value = expected_of(ex)
        if not float(value).is_integer():  # a fraction or a time: its digits must not be in the hint
            assert f"{value:.2g}" not in ex.hint and f"{value:.3g}" not in ex.hint, key


@pytest.mark.parametrize("key", sorted(EXERCISES))
def test_a_wrong_answer_is_told_only_its_direction(key, capsys):
    ex = EXERCISES[key]
    value = expected_of(ex)
    for wrong in (value * 1.3 + 1, value * 0.6 - 1, value * 10 + 7):
        check_answer(key, wrong, **{n: SAMPLE_MEASURED[n] for n in ex.measured})
        out = capsys.readouterr().out
        said = out.split("which is ", 1)[1].split(". Hint:", 1)[0]
        assert said in ("too high", "too low") or said.startswith("not a whole number"), (key, out)
    check_answer(key, value, **{n: SAMPLE_MEASURED[n] for n in ex.measured})
    assert capsys.readouterr().out.startswith(f"[correct] {key} ")


def test_bad_keys_and_missing_measurements_are_refused_by_name():
    with pytest.raises(CourseError, match="no exercise '99.9'; registered: 00.1"):
        exercise("99.9")
    with pytest.raises(CourseError, match=r"13.1 needs the measured value\(s\) \['slot_ms'\]"):
        check_answer("13.1", 2)
    with pytest.raises(CourseError, match=r"03.1 takes no \['slot_ms'\]"):
        check_answer("03.1", 0.5, slot_ms={})


def exercise_cells(path: Path) -> list[str]:
    cells = json.loads(path.read_text())["cells"]
    sources = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
    return [s for s in sources if "from course_lib.exercises import check_answer" in s or KEY_CALL.search(s)]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: LESSON_OF_FILE.match(p.name).group(0))
def test_each_notebook_checks_registered_keys_of_its_own_lesson(path):
    lesson, text = LESSON_OF_FILE.match(path.name).group(0), "\n".join(exercise_cells(path))
    keys = KEY_CALL.findall(text)
    assert "expected=" not in text, f"{path.name} still types an expected value"
    mine = sorted(k for k in EXERCISES if k.split(".")[0] == lesson)
    assert len(keys) == len(set(keys)) and all(k in mine for k in keys), keys
    assert sorted(keys) == mine, "each registered key used once"
    cells = json.loads(path.read_text())["cells"]
    markdown = "".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    assert "summary>Answers" not in markdown, f"{path.name}: no answer sits in a cell after the exercises"


def test_answers_follow_the_lessons_claims():
    from course_lib.schedules.closed_forms import gpipe_bubble

    # recomputation lengthens the ramps' slots as much as the steady state's: 1F1B's idle share is unchanged
    assert EXERCISES["11.4"].expected() == pytest.approx(gpipe_bubble(4, 8))
    # a slot's cost proportional to b (no gain from larger kernels) makes the smallest b best (least bubble);
    # a fixed cost per slot (all overhead) makes the largest b best (fewest slots)
    linear = {b: float(b) for b in (1, 2, 4, 8, 16, 32)}
    fixed = dict.fromkeys(linear, 1.0)
    assert EXERCISES["13.1"].expected(slot_ms=linear) == 1
    assert EXERCISES["13.1"].expected(slot_ms=fixed) == 32
    # forward only: the first request passes every stage, then one leaves per slowest stage's forward
    costs = SAMPLE_MEASURED["costs"]
    assert EXERCISES["15.4"].expected(costs=costs) == pytest.approx((sum(costs.f) + 63 * max(costs.f)) * 1e3)
