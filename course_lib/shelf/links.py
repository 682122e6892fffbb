"""A link between two pipeline stages: latency plus bytes over bandwidth (the alpha-beta model).

    Link(latency_s=5e-3, bandwidth_Bps=12.5e9).transfer_time(64 * 2**20)   # seconds for 64 MiB

The simulator, the distributed engine's injected links and the network presets all use this one type,
and the one ring all-reduce formula (tensor parallelism, the planner's TP and DP) is written on it.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

from course_lib.shelf.basic_schedules import LIMITS
from course_lib.shelf.checks import real
from course_lib.shelf.errors import require


@dataclass(frozen=True)
class Link:
    latency_s: float = 0.0
    bandwidth_Bps: float = math.inf  # bytes per second; inf = free
    name: str = ""

    def __post_init__(self) -> None:
        # finite, at most LIMITS["seconds"]: an infinite latency would hang a rank, 1e308 makes nan
        object.__setattr__(self, "latency_s", real("link latency_s", self.latency_s, high=LIMITS["seconds"]))
        if self.bandwidth_Bps != math.inf:  # inf: a free wire
            bandwidth = real("link bandwidth_Bps", self.bandwidth_Bps, above=True)
            object.__setattr__(self, "bandwidth_Bps", bandwidth)

    def transfer_time(self, nbytes: float) -> float:
        """Seconds from the first byte leaving to the last byte arriving."""
        return self.latency_s + (nbytes / self.bandwidth_Bps if math.isfinite(self.bandwidth_Bps) else 0.0)


FREE = Link(name="free")


def ring_all_reduce_bytes(nbytes: float, ranks: int) -> float:
    """Bytes each rank sends in a ring all-reduce of `nbytes` (a reduce-scatter, then an all-gather):
    2(n-1)/n of them, the bus factor of NVIDIA's nccl-tests (doc/PERFORMANCE.md)."""
    return 2 * (ranks - 1) / ranks * nbytes


def ring_all_reduce_s(nbytes: float, ranks: int, link: Link) -> float:
    """Seconds of a ring all-reduce of `nbytes` over `ranks` ranks joined by `link`: 2(n-1) steps,
    each paying the latency, and ``ring_all_reduce_bytes`` over the bandwidth; 0 for one rank."""
    if ranks <= 1:
        return 0.0
    return 2 * (ranks - 1) * link.latency_s + ring_all_reduce_bytes(nbytes, ranks) / link.bandwidth_Bps


def per_boundary(value, n_boundaries: int, label: str, default=None) -> list:
    """One value per stage boundary (stage s -> s+1), from a single value or a list of them.
    ``None`` gives ``default`` everywhere; a single Link or number is repeated; a list must have
    exactly one entry per boundary. Every consumer (simulator, plans of both engines) calls this,
    so the rule and its error message live here once."""
    if value is None:
        return [default] * n_boundaries
    if isinstance(value, (Link, numbers.Real)):
        return [value] * n_boundaries
    require(
        isinstance(value, (list, tuple)),
        f"{label} must be one value or a list with one per stage boundary, got {value!r}",
    )
    values = list(value)
    require(
        len(values) == n_boundaries,
        f"{label} has {len(values)} entries but the pipeline has {n_boundaries} stage boundaries "
        "(stage s -> s+1); give one per boundary, or a single value for all",
    )
    return values
