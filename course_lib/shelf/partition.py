"""Partitions: where to cut the model's flat layer list into pipeline stages.

    from course_lib.shelf.partition import uniform, Partition
    uniform(82, 4).sizes            # (21, 21, 20, 20): embedding + 80 blocks + head over 4 stages
    Partition.from_sizes([22, 20, 20, 20])
    optimal([5, 1, 1, 1, 1, 5], 3).sizes     # (1, 4, 1): the smallest possible largest stage
    stage_totals([5, 1, 1, 1, 1, 5], uniform(6, 3))   # [6.0, 2.0, 6.0]

A partition is contiguous: stage s runs layers[start:end] for its (start, end). Measuring what each
layer costs (time, memory) lives in course_lib/balance.py; this module only cuts a list of numbers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import accumulate

from torch import nn

from course_lib.shelf.errors import CourseError, require, whole, wholes


@dataclass(frozen=True)
class Partition:
    bounds: tuple[tuple[int, int], ...]  # half-open (start, end) per stage, covering 0..n_layers

    @property
    def n_stages(self) -> int:
        return len(self.bounds)

    @property
    def n_layers(self) -> int:
        return self.bounds[-1][1] if self.bounds else 0

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(end - start for start, end in self.bounds)

    @classmethod
    def from_sizes(cls, sizes: list[int] | tuple[int, ...]) -> Partition:
        """Stages of these many layers each (Python or numpy whole numbers), in order."""
        counts = wholes("partition sizes (layers per stage)", sizes, low=None)
        require(len(counts) >= 1, "a partition needs at least one stage")
        bad = [s for s in counts if s < 1]
        require(not bad, f"every stage needs at least one layer; got stage sizes {list(counts)}")
        ends = list(accumulate(counts))
        return cls(tuple(zip([0, *ends[:-1]], ends, strict=True)))

    def check(self, n_layers: int) -> None:
        """Raise unless this partition covers exactly `n_layers` layers."""
        require(
            self.n_layers == n_layers,
            f"partition sizes {list(self.sizes)} cover {self.n_layers} layers, but the model has "
            f"{n_layers} (embedding + blocks + head)",
        )


def uniform(n_layers: int, n_stages: int) -> Partition:
    """As equal as possible; earlier stages take the remainder, one layer each."""
    n_layers, n_stages = whole("n_layers", n_layers, low=0), whole("number of stages", n_stages, low=None)
    require(n_stages >= 1, f"number of stages must be >= 1, got {n_stages}")
    require(
        n_stages <= n_layers,
        f"{n_stages} stages cannot split {n_layers} layers: every stage needs at least one layer, "
        f"so use at most {n_layers} stages",
    )
    base, extra = divmod(n_layers, n_stages)
    return Partition.from_sizes([base + (1 if s < extra else 0) for s in range(n_stages)])


def stage_modules(layers: nn.ModuleList, partition: Partition) -> list[nn.Sequential]:
    """The layers of each stage as a Sequential (sharing the parameters, not copying them)."""
    partition.check(len(layers))
    return [nn.Sequential(*layers[start:end]) for start, end in partition.bounds]


def stage_totals(costs: Sequence[float], partition: Partition) -> list[float]:
    """The sum of `costs` (one number per layer) over each stage of `partition`."""
    partition.check(len(costs))
    return [float(sum(costs[start:end])) for start, end in partition.bounds]


StageCheck = Callable[[int, int, int], bool]  # fits(stage, start, end): may layers[start:end] be `stage`?
StageCost = Callable[[int, int, int], float]  # cost(stage, start, end), where not a plain sum of layers


def optimal(
    costs: Sequence[float], n_stages: int, fits: StageCheck | None = None, stage_cost: StageCost | None = None
) -> Partition:
    """The contiguous partition whose largest stage (sum of `costs`) is as small as possible.

    Dynamic programming over (stage, last layer): best[s][j] is the smallest achievable largest
    stage when stages 0..s cover layers 0..j-1. O(n_stages * n_layers^2), instant for 82 layers.
    `fits(stage, start, end)` may forbid stages (for example: over a memory budget); if no partition
    passes it, CourseError says so. `stage_cost(stage, start, end)`, if given, replaces the plain sum
    of `costs` over the stage (`costs` then only gives the number of layers). Among equally good
    partitions the one with the lightest *first* stages is returned (stage 0 holds the most
    micro-batches under 1F1B, so leaving it light costs nothing)."""
    n = len(costs)
    require(n_stages >= 1, f"number of stages must be >= 1, got {n_stages}")
    require(n_stages <= n, f"{n_stages} stages cannot split {n} layers: use at most {n} stages")
    bad = [c for c in costs if not (math.isfinite(c) and c >= 0)]
    require(not bad, f"layer costs must be finite and >= 0, got {bad[:1]}")
    prefix = [0.0, *accumulate(float(c) for c in costs)]
    inf = math.inf
    # best[s][j]: stages 0..s cover layers [0, j); cut[s][j]: where stage s starts in that optimum
    best = [[inf] * (n + 1) for _ in range(n_stages)]
    cut = [[-1] * (n + 1) for _ in range(n_stages)]
    for j in range(1, n - n_stages + 2):
        if fits is None or fits(0, 0, j):
            best[0][j] = prefix[j] if stage_cost is None else stage_cost(0, 0, j)
            cut[0][j] = 0
    for s in range(1, n_stages):
        for j in range(s + 1, n - (n_stages - 1 - s) + 1):
            # the earlier the cut, the heavier stage s: scanning i upwards, ties keep early stages light
            for i in range(s, j):
                if best[s - 1][i] == inf or (fits is not None and not fits(s, i, j)):
                    continue
                own = prefix[j] - prefix[i] if stage_cost is None else stage_cost(s, i, j)
                value = max(best[s - 1][i], own)
                if value < best[s][j]:
                    best[s][j], cut[s][j] = value, i
    if best[n_stages - 1][n] == inf:
        raise CourseError(
            f"no way to cut {n} layers into {n_stages} stages passes the per-stage check (for a memory "
            "budget: every stage would be over it). Try more stages, a bigger budget, fewer micro-batches "
            "in flight (1F1B instead of GPipe) or smaller micro-batches"
        )
    sizes, j = [], n
    for s in range(n_stages - 1, -1, -1):  # walk the cuts back from the last layer
        sizes.append(j - cut[s][j])
        j = cut[s][j]
    return Partition.from_sizes(sizes[::-1])
