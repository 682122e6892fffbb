from course_lib.exercises import check, verdict


def test_verdicts_say_how_far_off():
    assert verdict(0.2727, 3 / 11) == "ok"
    assert verdict(None, 1.0) == "missing"
    assert verdict("abc", 1.0) == "not a number"
    assert verdict(10.0, 1.0) == "too high by 10.0x"
    assert verdict(0.9, 1.0) == "too low by 10%"


def test_check_prints_hint_and_never_raises(capsys):
    check("bubble", None, 0.5, hint="(p-1)/(m+p-1)")
    assert "no answer yet. Hint: (p-1)/(m+p-1)" in capsys.readouterr().out
    check("bubble", 0.5, 0.5)
    assert capsys.readouterr().out.startswith("[correct] bubble")
    check("bubble", 2.0, 0.5, hint="h")
    assert "too high by 4.0x. Hint: h" in capsys.readouterr().out
