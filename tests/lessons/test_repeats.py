"""lessons/repeats: measured effects as median and range over runs that take turns."""

import itertools

import pytest

from course_lib.lessons.repeats import Effect, Spread, plot_spreads, repeat_interleaved
from course_lib.shelf.errors import CourseError


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


def test_an_effect_is_the_medians_difference_against_the_two_ranges():
    before, after = Spread((0.10, 0.12, 0.14)), Spread((0.50, 0.52, 0.53))
    e = Effect.between("link", before, after, expected_s=0.4)
    assert e.measured_s == pytest.approx(0.40) and e.spread_s == pytest.approx(0.04 + 0.03)
    assert e.ratio == pytest.approx(0.40 / 0.07) and e.ratio > 3  # clear of the noise
    blurred = Effect.between("blurred", Spread((0.1, 0.3, 0.5)), Spread((0.2, 0.4, 0.6)), expected_s=0.1)
    assert blurred.ratio == pytest.approx(0.1 / 0.8) and blurred.ratio < 3
    assert Effect("exact", 0.2, 0.2, 0.0).ratio == float("inf")  # a deterministic effect has no spread
