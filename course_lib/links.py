"""A link between two pipeline stages: latency plus bytes over bandwidth (the alpha-beta model).

    Link(latency_s=5e-3, bandwidth_Bps=12.5e9).transfer_time(64 * 2**20)   # seconds for 64 MiB

The simulator, the distributed engine's injected links and the network presets all use this one type.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from course_lib.errors import require


@dataclass(frozen=True)
class Link:
    latency_s: float = 0.0
    bandwidth_Bps: float = math.inf  # bytes per second; inf = free
    name: str = ""

    def __post_init__(self) -> None:
        require(self.latency_s >= 0, f"link latency must be >= 0 seconds, got {self.latency_s!r}")
        require(self.bandwidth_Bps > 0, f"link bandwidth must be > 0 bytes/s, got {self.bandwidth_Bps!r}")

    def transfer_time(self, nbytes: float) -> float:
        """Seconds from the first byte leaving to the last byte arriving."""
        return self.latency_s + (nbytes / self.bandwidth_Bps if math.isfinite(self.bandwidth_Bps) else 0.0)


FREE = Link(name="free")
