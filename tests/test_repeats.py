"""lessons/repeats: measured effects as median and range over runs that take turns."""

import itertools

import pytest

from course_lib.errors import CourseError
from course_lib.lessons.repeats import Spread, plot_spreads, repeat_interleaved


def test_runs_take_turns_and_each_spread_holds_its_own_values():
    calls, counter = [], itertools.count()

    def run(name):
        calls.append(name)
        return {"name": name, "value": next(counter)}

    spreads, last = repeat_interleaved(
        {"a": lambda: run("a"), "b": lambda: run("b")}, measure=lambda r: r["value"], repeats=3
    )
    assert calls == ["a", "b"] * 3  # interleaved: a busy moment hits both alike
    assert spreads["a"].values == (0, 2, 4) and spreads["b"].values == (1, 3, 5)
    assert (spreads["a"].median, spreads["a"].low, spreads["a"].high, spreads["a"].range) == (2, 0, 4, 4)
    assert last["b"] == {"name": "b", "value": 5}
    assert spreads["a"].overlaps(spreads["b"])
    assert not Spread((0.1, 0.2, 0.3)).overlaps(Spread((0.4, 0.5, 0.6)))


@pytest.mark.parametrize("repeats", [2, 0, 3.0, True, "5"])
def test_too_few_repeats_are_refused_with_the_value_named(repeats):
    with pytest.raises(CourseError, match=f"repeats must be .* got {repeats!r}"):
        repeat_interleaved({"a": lambda: 1}, measure=float, repeats=repeats)


def test_the_plot_draws_every_run_and_starts_at_zero():
    import matplotlib

    matplotlib.use("Agg")
    ax = plot_spreads({"a": Spread((0.2, 0.3, 0.25))}, reference=(0.27, "formula"))
    assert ax.get_ylim()[0] == 0
    ticks = [line for line in ax.lines if line.get_marker() == "_"]
    assert len(ticks[0].get_ydata()) == 3
