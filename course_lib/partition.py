"""Partitions: where to cut the model's flat layer list into pipeline stages.

    from course_lib.partition import uniform, Partition
    uniform(82, 4).sizes            # (21, 21, 20, 20): embedding + 80 blocks + head over 4 stages
    Partition.from_sizes([22, 20, 20, 20])

A partition is contiguous: stage s runs layers[start:end] for its (start, end).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from course_lib.errors import CourseError, require


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
        require(len(sizes) >= 1, "a partition needs at least one stage")
        bad = [s for s in sizes if s < 1]
        require(not bad, f"every stage needs at least one layer; got stage sizes {list(sizes)}")
        bounds, start = [], 0
        for size in sizes:
            bounds.append((start, start + size))
            start += size
        return cls(tuple(bounds))

    def check(self, n_layers: int) -> None:
        """Raise unless this partition covers exactly `n_layers` layers."""
        require(
            self.n_layers == n_layers,
            f"partition sizes {list(self.sizes)} cover {self.n_layers} layers, but the model has "
            f"{n_layers} (embedding + blocks + head)",
        )

    def stage_of_layer(self, layer: int) -> int:
        for s, (start, end) in enumerate(self.bounds):
            if start <= layer < end:
                return s
        raise CourseError(f"layer {layer} is outside the partition (0..{self.n_layers - 1})")


def uniform(n_layers: int, n_stages: int) -> Partition:
    """As equal as possible; earlier stages take the remainder, one layer each."""
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
