import pytest

from course_lib.errors import MAX_CHARS, MAX_LINES, capped
from course_lib.exercises import check, verdict


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
    check("bubble", None, 0.5, hint="(p-1)/(m+p-1)")
    assert "no answer yet. Hint: (p-1)/(m+p-1)" in capsys.readouterr().out
    check("bubble", 0.5, 0.5)
    assert capsys.readouterr().out.startswith("[correct] bubble")
    check("bubble", 2.0, 0.5, hint="h")
    assert "too high by 4.0x. Hint: h" in capsys.readouterr().out


class BadFloat:
    def __float__(self):
        raise ZeroDivisionError("a student's class")


ODD_ANSWERS = [10**400, -(10**400), 10**5000, float("nan"), float("inf"), "abc", [0] * 10**6, 2j, BadFloat()]


@pytest.mark.parametrize("answer", ODD_ANSWERS, ids=lambda a: type(a).__name__)
def test_check_never_raises_and_prints_one_short_line(answer, capsys):
    check("bubble", answer, 0.5, hint="h")
    out = capsys.readouterr().out
    assert out.startswith("[not yet] bubble: you gave ") and out.endswith(" Hint: h\n")
    assert out.count("\n") == 1 and len(out) < 200


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
