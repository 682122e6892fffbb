"""The assignments' checks on single wrong answers, in-process (fast): each test runs a source notebook's
test cell on one wrong student answer (``support.assignments.run_test_cell``) and reads its message."""

from __future__ import annotations

from support.assignments import run_test_cell

from course_lib.shelf.first_schedules import build_schedule


def test_wrong_gpipe_is_told_which_action_waits_for_which_on_which_device():
    backwards_first = """
def my_gpipe(p, m):
    orders = [[Action(d, Kind.B, mb) for mb in range(m)] + [Action(d, Kind.F, mb) for mb in range(m)]
              for d in range(p)]
    return Schedule("mine", p, m, orders, list(range(p)))
"""
    message = run_test_cell("a03_bubble", "a1_test_gpipe_valid", backwards_first)
    assert "deadlock: device 0 is stuck at 0B0" in message
    assert (
        "it needs 0F0 (stage 0's forward of micro-batch 0), which this same device runs only later" in message
    )
    reversed_backwards = """
def my_gpipe(p, m):
    orders = [[Action(d, Kind.F, mb) for mb in range(m)] + [Action(d, Kind.B, m - 1 - mb) for mb in range(m)]
              for d in range(p)]
    return Schedule("mine", p, m, orders, list(range(p)))
"""
    message = run_test_cell("a03_bubble", "a1_test_gpipe_valid", reversed_backwards)  # valid, not GPipe's
    assert "position 8: you run 0B7, gpipe runs 0B0 there" in message and "Hint:" in message


def test_wrong_numbers_get_direction_a_coarse_size_and_hint_not_the_value():
    message = run_test_cell(
        "a03_bubble", "a1_test_idle_fraction", "def idle_fraction(p, m):\n    return (p - 1) / m"
    )
    assert "idle_fraction(4, 8): your answer is too high, by less than half again" in message
    assert "Hint:" in message and "0.375" not in message
    assert "0.27" not in message and "3/11" not in message
    right = "idle_fraction = lambda p, m: (p - 1) / (m + p - 1)"
    assert run_test_cell("a03_bubble", "a1_test_idle_fraction", right) == ""


def test_calling_the_library_builder_is_refused_while_graded():
    shortcut = (
        "from course_lib.shelf.first_schedules import build_schedule\n"
        "my_1f1b = lambda p, m: build_schedule('1f1b', p, m)"
    )
    message = run_test_cell("a04_one_f_one_b", "a2_test_valid", shortcut)
    assert "one_f_one_b is switched off while your code is graded" in message
    assert build_schedule("1f1b", 2, 2).n_devices == 2  # and it is back afterwards


def test_the_library_closed_form_does_not_answer_the_derivation():
    shortcut = (
        "from course_lib.schedules.closed_forms import gpipe_bubble\n"
        "idle_fraction = lambda p, m: gpipe_bubble(p, m)"
    )
    message = run_test_cell("a03_bubble", "a1_test_idle_fraction", shortcut)
    assert "gpipe_bubble is switched off while your code is graded: derive the formula yourself" in message


def test_1f1b_that_holds_too_much_is_told_where():
    gpipe_in_disguise = """
def my_1f1b(p, m):
    orders = [[Action(d, Kind.F, mb) for mb in range(m)] + [Action(d, Kind.B, mb) for mb in range(m)]
              for d in range(p)]
    return Schedule("mine", p, m, orders, list(range(p)))
"""
    assert run_test_cell("a04_one_f_one_b", "a2_test_valid", gpipe_in_disguise) == ""  # valid...
    message = run_test_cell("a04_one_f_one_b", "a2_test_memory", gpipe_in_disguise)  # ...but holds m
    assert "stage 0 holds 8 micro-batches' activations at once" in message and "at most 4" in message
