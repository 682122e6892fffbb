"""The assignment graders: they raise AssertionError whose message teaches, and pass right answers."""

from __future__ import annotations

import pytest

import course_assignments as grading
from course_assignments.wan_checks import strongest_throughput
from course_lib.balance import LayerProfile
from course_lib.lessons.wan_plan import WanPlan, WanProblem, check_plan, throughput
from course_lib.shelf.errors import MAX_CHARS, MAX_LINES
from course_lib.shelf.first_schedules import build_schedule
from course_lib.shelf.schedule import Schedule


def raised(fn, *args, **kwargs) -> str:
    with pytest.raises(AssertionError) as info:
        fn(*args, **kwargs)
    assert str(info.value), "a grader must never raise a bare AssertionError"
    return str(info.value)


def test_number_passes_and_explains():
    grading.number("bubble", 3 / 11 * 1.01, 3 / 11)
    msg = raised(grading.number, "bubble", 0.6, 3 / 11, hint="(p-1)/(m+p-1)")
    assert "bubble: your answer is too high, by one and a half to three times." in msg
    assert "(p-1)/(m+p-1)" in msg
    assert "0.6" not in msg and "0.27" not in msg  # neither the answer nor the value
    assert "no answer yet" in raised(grading.number, "bubble", None, 0.5, hint="h")
    assert "expected a finite number, got 'abc' (str)" in raised(grading.number, "bubble", "abc", 0.5)


def test_how_far_never_pins_the_value():
    """Every band is at least 1.47x wide: no message puts the right value within 10% of one number."""
    assert grading.how_far(0.375, 3 / 11) == "too high, by less than half again"
    assert grading.how_far(1.0, 10.0) == "too low, by three to ten times"
    assert grading.how_far(0, 2.0) == "zero, but the right value is positive"
    assert grading.how_far(-1, 2.0) == "of the wrong sign (the right value is positive)"
    for answer in (0.1, 0.5, 0.9, 1.2, 1.49, 2.9, 7.0, 40.0):
        text = grading.how_far(answer, 1.0)
        consistent = [e / 1000 for e in range(1, 100_000) if grading.how_far(answer, e / 1000) == text]
        assert max(consistent) / min(consistent) > 1.3, (answer, text)


def test_magnitude():
    assert grading.magnitude(0.27) == "between 0.1 and 1"
    assert grading.magnitude(55.0) == "between 10 and 100"
    assert grading.magnitude(0) == "exactly 0"


def test_numbers_names_the_wrong_entry():
    grading.numbers("in flight", [4, 3, 2, 1], [4, 3, 2, 1])
    assert "in flight[2]" in raised(grading.numbers, "in flight", [4, 3, 9, 1], [4, 3, 2, 1])
    assert "expected 4 numbers, got 3" in raised(grading.numbers, "in flight", [4, 3, 2], [4, 3, 2, 1])


def test_call_turns_unwritten_and_crashes_into_messages():
    def unwritten(p, m):
        raise NotImplementedError()

    def buggy(p, m):
        return p / (m - m)

    assert grading.call("f", lambda p, m: p + m, 1, 2) == 3
    assert "not written yet" in raised(grading.call, "idle_fraction", unwritten, 4, 8)
    msg = raised(grading.call, "idle_fraction", buggy, 4, 8)
    assert "idle_fraction(4, 8) raised ZeroDivisionError" in msg


def test_schedule_valid_names_action_dependency_and_device():
    grading.schedule_valid(build_schedule("1f1b", 4, 8), p=4, m=8)
    s = build_schedule("1f1b", 4, 8)
    s.orders[2][0], s.orders[2][2] = s.orders[2][2], s.orders[2][0]  # 2B0 first: before its own 2F0
    msg = raised(grading.schedule_valid, s, p=4, m=8)
    assert "deadlock: device 2 is stuck at 2B0" in msg and "it needs 2F0" in msg
    s = build_schedule("gpipe", 2, 2)
    s.orders[0].pop()  # drop 0B1
    assert "0B1 (stage 0's backward for micro-batch 1) is missing" in raised(grading.schedule_valid, s)
    assert "expected a Schedule" in raised(grading.schedule_valid, [[1]])
    assert "expected 4 devices" in raised(grading.schedule_valid, build_schedule("gpipe", 2, 2), p=4)


def test_schedule_equals_and_inflight():
    gpipe, ofob = build_schedule("gpipe", 4, 8), build_schedule("1f1b", 4, 8)
    grading.schedule_equals(gpipe, build_schedule("gpipe", 4, 8))
    msg = raised(grading.schedule_equals, ofob, gpipe)
    assert "device 0, position 4: you run 0B0, gpipe runs 0F4" in msg
    grading.inflight_at_most(ofob, [4, 3, 2, 1])
    assert "stage 0 holds 8 micro-batches" in raised(grading.inflight_at_most, gpipe, [4, 3, 2, 1])


def test_partition_fits_reports_out_of_memory():
    prof = LayerProfile(["a", "b", "c", "d"], [10, 10, 10, 10], [1.0] * 4, [100] * 4, 1, 1)
    # 1F1B, 2 stages: stage 0 holds 2 micro-batches -> 2 layers need 2*160 + 2*2*100 = 720 bytes
    grading.partition_fits([2, 2], prof, "1f1b", 4, budget_bytes=720)
    msg = raised(grading.partition_fits, [3, 1], prof, "1f1b", 4, budget_bytes=720)
    assert "out of memory" in msg and "stage 0" in msg
    assert "cover 3 layers" in raised(grading.partition_fits, [2, 1], prof, "1f1b", 4, budget_bytes=720)
    assert "no answer yet" in raised(grading.partition_fits, None, prof, "1f1b", 4, budget_bytes=720)


def test_close_to_best():
    grading.close_to_best("throughput", 50.0, 55.0, within=0.2, higher_is_better=True)
    msg = raised(grading.close_to_best, "throughput", 16.0, 55.0, within=0.2, higher_is_better=True)
    assert "yours is not within 20% of the best; below it by three to ten times" in msg


def test_wan_plan_problems_and_the_best_plan():
    problem = WanProblem()
    assert any("even number" in s for s in check_plan(problem, WanPlan(3, 8, "1f1b", (27, 27, 26))))
    assert any("equal micro-batches" in s for s in check_plan(problem, WanPlan(8, 7, "1f1b", (10,) * 8)))
    assert any("out of memory" in s for s in check_plan(problem, WanPlan(2, 8, "gpipe", (40, 40))))
    plain = throughput(problem, WanPlan(8, 64, "1f1b", (10,) * 8))
    best = strongest_throughput(problem)
    la = WanPlan(8, 64, "latency-aware-1f1b", (10,) * 8, (0, 0, 0, 7, 0, 0, 0))
    assert throughput(problem, la) == pytest.approx(best)  # the ocean link hidden: the strongest plan
    assert best > 3 * plain  # the ocean's latency costs plain 1F1B most of its throughput
    # the flush bound predicts the latency-aware step: m(t_f+t_b) + (p-1)(t_f+t_b) + 2 x (ocean link)
    t = 10 * 1.5e-3  # one sequence through 10 blocks, forward + backward
    link = problem.links(8)[3].transfer_time(problem.boundary_bytes)
    assert best == pytest.approx(64 / (64 * t + 7 * t + 2 * link), rel=0.01)


def shout(x):
    raise ValueError("!" * 10**6)


TEXT_SCHEDULE = Schedule("mine", 2, 1, [["0F0", "0B0"], ["1F0", "1B0"]], [0, 1])
ODD_INPUT = {  # a grader given what students really write: each must fail the check, with a message
    "number, 10**400": (grading.number, "x", 10**400, 0.5),
    "number, 10**5000": (grading.number, "x", 10**5000, 0.5),
    "number, nan": (grading.number, "x", float("nan"), 0.5),
    "number, a huge list": (grading.number, "x", list(range(10**6)), 0.5),
    "at_most, text": (grading.at_most, "x", "abc", 0.1),
    "at_most, 10**5000": (grading.at_most, "x", 10**5000, 0.1),
    "numbers, not a list": (grading.numbers, "x", 5, [1, 2]),
    "numbers, a huge list": (grading.numbers, "x", list(range(10**6)), [1, 2]),
    "close_to_best, zero": (grading.close_to_best, "step time", 0, 3.0, 0.1, False),
    "close_to_best, 10**400": (grading.close_to_best, "throughput", 10**400, 3.0, 0.1, True),
    "close_to_best, text": (grading.close_to_best, "throughput", "fast", 3.0, 0.1, True),
    "schedule_valid, strings": (grading.schedule_valid, TEXT_SCHEDULE),
    "schedule_equals, a list": (grading.schedule_equals, [["0F0"]], build_schedule("gpipe", 2, 1)),
    "schedule_equals, 3 devices": (
        grading.schedule_equals,
        build_schedule("gpipe", 3, 1),
        build_schedule("gpipe", 2, 1),
    ),
    "inflight_at_most, strings": (grading.inflight_at_most, TEXT_SCHEDULE, [1, 1]),
    "partition_fits, text": (grading.partition_fits, "2,2", None, "1f1b", 4, 720),
    "call, a huge error": (grading.call, "f", shout, 1),
}


@pytest.mark.parametrize("case", list(ODD_INPUT))
def test_odd_input_fails_the_check_with_a_screenful_never_a_crash(case):
    grader, *args = ODD_INPUT[case]
    msg = raised(grader, *args)
    assert len(msg) <= MAX_CHARS + 40 and len(msg.splitlines()) <= MAX_LINES + 1


def test_odd_input_messages_teach():
    assert "x: expected a finite number, got 100000000000000000...0000000000000000000 (int)" in raised(
        grading.number, "x", 10**400, 0.5
    )
    assert "x: expected 2 numbers, got 1000000: [0, 1, 2, 3, 4, 5, ...]" in raised(
        grading.numbers, "x", list(range(10**6)), [1, 2]
    )
    msg = raised(grading.close_to_best, "step time", 0, 3.0, 0.1, False)
    assert msg.startswith("step time cannot be checked (ZeroDivisionError: ") and "a number" in msg
    msg = raised(grading.schedule_valid, TEXT_SCHEDULE)
    assert "cannot read this schedule (AttributeError: 'str' object has no attribute 'stage')" in msg
    assert "Action(0, Kind.F, 0) or Action.parse('0F0')" in msg
    assert raised(grading.call, "f", shout, 1).endswith("characters cut]")


def test_a_long_problem_list_is_capped():
    s = build_schedule("gpipe", 8, 64)
    s.orders = [[] for _ in s.orders]  # every one of the 1024 actions is missing
    msg = raised(grading.schedule_valid, s, p=8, m=64)
    assert msg.startswith(
        "your schedule (p=8, m=64) cannot run. 1024 problem(s):\n  - 0F0 (stage 0's forward"
    )
    assert len(msg.splitlines()) == MAX_LINES + 1 and msg.endswith(" characters cut]")


def test_without_switches_a_library_function_off_and_back_on():
    from course_assignments.guard import without
    from course_lib.shelf import first_schedules as builders

    alias = builders.one_f_one_b  # a name a student imported before the check ran
    with without(builders.one_f_one_b, why="write it yourself"):
        with pytest.raises(AssertionError, match="one_f_one_b is switched off .*: write it yourself"):
            alias(2, 2)
        with pytest.raises(AssertionError, match="switched off"):
            build_schedule("1f1b", 2, 2)  # the registry holds the same function
    assert alias(2, 2).n_devices == 2 and build_schedule("1f1b", 2, 2).n_devices == 2

    def closure():
        return alias

    with pytest.raises(Exception, match="only plain module-level functions"):
        with without(closure, why="x"):
            pass


def test_checks_say_what_is_wrong_without_the_value():
    from course_assignments import memory_checks, schedule_checks, wan_checks

    msg = raised(schedule_checks.idle_fraction, lambda p, m: 0.5)
    assert "your answer is too high, by one and a half to three times" in msg and "0.27" not in msg
    schedule_checks.idle_fraction(lambda p, m: (p - 1) / (m + p - 1), [(1, 1), (8, 32)])
    schedule_checks.smallest_m(lambda p, limit: 118)  # 3/120 is not below 0.025: 118, not 117
    assert "too low" in raised(schedule_checks.smallest_m, lambda p, limit: 117)
    msg = raised(memory_checks.held, lambda s: [1] * s.n_stages, [("gpipe", 3, 5)])
    assert "held(gpipe with p=3, m=5)[0]: your answer is too low, by three to ten times" in msg
    memory_checks.held(_peaks, [("1f1b", 4, 8), ("gpipe", 2, 3)])
    problem = WanProblem()
    msg = raised(wan_checks.predict_throughput, lambda pr, plan: throughput(pr, plan),
                 [(problem, WanPlan(2, 64, "1f1b", (40, 40)))])  # fmt: skip
    assert "switched off while your code is graded" in msg
    msg = raised(wan_checks.choose_plan, lambda pr: WanPlan(8, 64, "1f1b", (10,) * 8), [problem])
    assert "a higher one exists" in msg and "below it by three to ten times" in msg


def _peaks(schedule):
    """Each stage's peak micro-batches in flight, counted here (inflight_per_stage is switched off)."""
    peak, now = [0] * schedule.n_stages, [0] * schedule.n_stages
    for order in schedule.orders:
        for a in order:
            now[a.stage] += 1 if a.kind.name == "F" else -1
            peak[a.stage] = max(peak[a.stage], now[a.stage])
    return peak


def test_feedback_cuts_hidden_tests_and_tracebacks_and_wraps():
    import nbformat

    from course_grading.feedback import StudentFeedback, without_hidden_tests, wrapped

    source = "check(1)\n### BEGIN HIDDEN TESTS\ncheck(118)\n### END HIDDEN TESTS\nprint('after')"
    assert without_hidden_tests(source) == "check(1)\nprint('after')"
    assert all(len(line) <= 100 for line in wrapped("word " * 100).splitlines())
    test_cell = nbformat.v4.new_code_cell(source, metadata={"nbgrader": {"grade": True, "solution": False}})
    test_cell.outputs = [nbformat.v4.new_output(
        "error", ename="AssertionError", evalue="x: too high by 38%. Hint: " + "think " * 40,
        traceback=["\x1b[31mTraceback\x1b[0m", "----> 3 check(118)"],
    )]  # fmt: skip
    student_cell = nbformat.v4.new_code_cell("1 / 0")
    student_cell.outputs = [nbformat.v4.new_output(
        "error", ename="ZeroDivisionError", evalue="division by zero",
        traceback=["\x1b[31m----> 1 1 / 0\x1b[0m"],
    )]  # fmt: skip
    nb = nbformat.v4.new_notebook(cells=[test_cell, student_cell])
    nb, _ = StudentFeedback()(nb, {})  # as nbconvert calls it (only if enabled)
    shown = nb.cells[0].outputs[0]["text"]
    assert "118" not in nb.cells[0].source + shown and "Traceback" not in shown
    assert shown.startswith("AssertionError: x: too high by 38%") and max(map(len, shown.splitlines())) <= 100
    assert nb.cells[1].outputs[0]["text"] == "----> 1 1 / 0\n"  # the student's own traceback stays
