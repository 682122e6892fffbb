"""A measured effect with its spread: the same runs repeated, taking turns, summarised as median and range.

One timed run on a shared CPU can be off by tens of percent, so a lesson that rests on a measurement
repeats it and draws the spread. The runs take turns (A, B, A, B, ...): a busy moment of the machine then
hits every variant alike instead of one of them::

    from course_lib.lessons.repeats import repeat_interleaved, plot_spreads
    spreads, last = repeat_interleaved(
        {"gpipe": lambda: train_pipeline("gpipe", progress=False),
         "1f1b": lambda: train_pipeline("1f1b", progress=False)},
        measure=lambda run: run.measured.bubble_fraction, repeats=5)
    spreads["gpipe"].median, spreads["gpipe"].low, spreads["gpipe"].high
    plot_spreads(spreads, reference=(3 / 11, "(p-1)/(m+p-1)"))
    Effect.between("1F1B - GPipe", spreads["gpipe"], spreads["1f1b"], 0.0).ratio   # effect / spread
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from statistics import median
from typing import TypeVar

from course_lib.shelf.errors import require

Run = TypeVar("Run")
DECISIVE = 3.0  # an effect this many times its spread stands clear of a busy laptop's noise (issue 38)


@dataclass(frozen=True)
class Spread:
    """Repeated measurements of one quantity."""

    values: tuple[float, ...]

    @property
    def median(self) -> float:
        return median(self.values)

    @property
    def low(self) -> float:
        return min(self.values)

    @property
    def high(self) -> float:
        return max(self.values)

    @property
    def range(self) -> float:
        return self.high - self.low

    def overlaps(self, other: Spread) -> bool:
        return self.low <= other.high and other.low <= self.high


@dataclass(frozen=True)
class Effect:
    """A measured effect (median against median) beside what the model expects, and its noise: the sum
    of the two points' ranges (every repeat's value of both lies within it)."""

    what: str
    measured_s: float
    expected_s: float
    spread_s: float

    @classmethod
    def between(cls, what: str, before: Spread, after: Spread, expected_s: float) -> Effect:
        """From `before` to `after`: the medians' difference, the two ranges added."""
        return cls(what, after.median - before.median, expected_s, before.range + after.range)

    @property
    def ratio(self) -> float:
        """The effect over its spread: 3 or more, and the effect stands clear of the noise."""
        return abs(self.measured_s) / self.spread_s if self.spread_s > 0 else float("inf")

    @property
    def decisive(self) -> bool:
        return self.ratio >= DECISIVE

    def verdict(self) -> str:
        """'4.2x its spread: decisive' or '0.4x its spread: illustrative, ...': the words every lesson's
        measured verdict ends with (tests/course/test_decisive_measurements.py reads them back)."""
        if self.decisive:
            return f"{self.ratio:.1f}x its spread: decisive (3x or more)"
        return f"{self.ratio:.1f}x its spread: illustrative (under 3x, it ranks nothing on this machine)"


def repeat_all(runs: Mapping[str, Callable[[], Run]], repeats: int = 5) -> dict[str, list[Run]]:
    """Call every run `repeats` times, taking turns (A, B, A, B, ...); every result, per name."""
    require(
        isinstance(repeats, int) and not isinstance(repeats, bool) and repeats >= 3,
        f"repeats must be a whole number >= 3 (a median and a range need three), got {repeats!r}",
    )
    require(len(runs) >= 1, "runs must name at least one run to repeat, got none")
    done: dict[str, list[Run]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            done[name].append(run())
    return done


def repeat_interleaved(
    runs: Mapping[str, Callable[[], Run]], measure: Callable[[Run], float], repeats: int = 5
) -> tuple[dict[str, Spread], dict[str, Run]]:
    """``repeat_all``, then the spread of `measure` per name, and each name's last run."""
    done = repeat_all(runs, repeats)
    spreads = {name: Spread(tuple(float(measure(r)) for r in results)) for name, results in done.items()}
    return spreads, {name: results[-1] for name, results in done.items()}


def plot_spreads(
    spreads: Mapping[str, Spread], ax=None, reference: tuple[float, str] | None = None,
    ylabel: str = "", title: str = "", percent: bool = True,
):  # fmt: skip
    """Each name's median as a dot with its range as a bar (every run drawn as a tick); returns the axes."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.2))
    scale = 100.0 if percent else 1.0
    for x, (name, s) in enumerate(spreads.items()):
        ax.vlines(x, s.low * scale, s.high * scale, color=f"C{x}", lw=6, alpha=0.35)
        ax.plot([x] * len(s.values), [v * scale for v in s.values], "_", color=f"C{x}", ms=14)
        ax.plot(x, s.median * scale, "o", color=f"C{x}", label=f"{name}: median of {len(s.values)}, range")
    if reference is not None:
        ax.axhline(reference[0] * scale, color="0.3", ls="--", lw=1, label=reference[1])
    ax.set_xticks(range(len(spreads)), list(spreads))
    ax.set_xlim(-0.6, len(spreads) - 0.4)
    ax.set_ylim(bottom=0)  # from zero, so that a spread is seen against the size of what is measured
    ax.set(ylabel=ylabel + (" (%)" if percent else ""), title=title)
    ax.legend(fontsize=8, loc="best")
    return ax
