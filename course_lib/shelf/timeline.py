"""Timeline: what each device did, and when; every chart and bubble figure reads one (lessons 02-04, 08).

A Timeline is made by the simulator (cost model only), by the local engine (measured compute times,
simulated concurrency and links) or by the distributed engine (wall clock of real processes). It
always carries its ``source`` so a figure can say which one it shows; never present a simulated
number as a measurement.

    tl.makespan            # seconds from the first start to the last end
    tl.bubble_fraction     # idle share of all device-time: 1 - busy / (devices * makespan)
    tl.peak_inflight(d)    # most micro-batches whose activations device d held at once
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from course_lib.shelf.errors import require
from course_lib.shelf.schedule import Action, Kind

SIMULATED = "simulated"
MEASURED_COMPUTE = "measured compute + simulated links"
MEASURED = "measured"
SOURCES = (SIMULATED, MEASURED_COMPUTE, MEASURED)


class Span(NamedTuple):
    """Device `device` ran `action` from `start` to `end` (seconds). A named tuple, immutable like
    a frozen dataclass but made at C speed: a large simulation makes 100k of them."""

    device: int
    action: Action
    start: float
    end: float

    @property
    def duration(self) -> float:
        return self.end - self.start


class Transfer(NamedTuple):
    """The output of `action` travelled from `src_device` to `dst_device` (activation or gradient)."""

    src_device: int
    dst_device: int
    action: Action
    start: float
    end: float
    nbytes: int = 0


@dataclass
class Timeline:
    source: str
    n_devices: int
    spans: list[Span]
    transfers: list[Transfer] = field(default_factory=list)
    schedule_name: str = ""
    n_stages: int | None = None  # the schedule's stages (more than n_devices when interleaved)
    n_microbatches: int | None = None
    boundary_bytes: list[int] = field(default_factory=list)  # one micro-batch's message, boundary s -> s+1
    stash_bytes: list[int] | None = None  # per stage: bytes one micro-batch keeps until its backward
    stash_is_lower_bound: bool = False  # True: stash_bytes count only the boundary tensor a stage got

    def __post_init__(self) -> None:
        require(self.source in SOURCES, f"unknown timeline source {self.source!r}; expected one of {SOURCES}")
        self._index_cache: tuple[int, dict[int, list[Span]], float, float] | None = None

    def _index(self) -> tuple[dict[int, list[Span]], float, float]:
        """Spans grouped per device (sorted by start), first start, last end. Rebuilt when spans
        are added, so asking for every device's figures stays linear in the number of spans."""
        cache = self._index_cache
        if cache is None or cache[0] != len(self.spans):
            by_device: dict[int, list[Span]] = {d: [] for d in range(self.n_devices)}
            for s in sorted(self.spans, key=lambda s: s.start):
                by_device.setdefault(s.device, []).append(s)
            start = min((s.start for s in self.spans), default=0.0)
            end = max((s.end for s in self.spans), default=0.0)
            cache = self._index_cache = (len(self.spans), by_device, start, end)
        return cache[1], cache[2], cache[3]

    @property
    def start(self) -> float:
        return self._index()[1]

    @property
    def end(self) -> float:
        return self._index()[2]

    @property
    def makespan(self) -> float:
        return self.end - self.start

    def spans_of(self, device: int) -> list[Span]:
        """Device `device`'s spans, earliest first."""
        return list(self._index()[0].get(device, []))

    def busy(self, device: int) -> float:
        return sum(s.duration for s in self._index()[0].get(device, []))

    def idle(self, device: int) -> float:
        return self.makespan - self.busy(device)

    def idle_fraction(self, device: int) -> float:
        return self.idle(device) / self.makespan if self.makespan > 0 else 0.0

    @property
    def bubble_fraction(self) -> float:
        """Idle share of the step, GPipe's convention: (p-1)/(m+p-1) for equal costs."""
        total = self.n_devices * self.makespan
        return 1.0 - sum(s.duration for s in self.spans) / total if total > 0 else 0.0

    def holding_intervals(self, device: int) -> dict[tuple[int, int], tuple[float, float]]:
        """(stage, micro-batch) -> (start, end) during which `device` keeps its activations: from
        the start of its forward to the end of its last backward piece (B, or W when split)."""
        begin: dict[tuple[int, int], float] = {}
        finish: dict[tuple[int, int], float] = {}
        for s in self._index()[0].get(device, []):
            key = (s.action.stage, s.action.microbatch)
            if s.action.kind is Kind.F:
                begin[key] = s.start
            else:
                finish[key] = max(finish.get(key, s.end), s.end)
        return {k: (t, finish.get(k, self.end)) for k, t in begin.items()}

    def _peak(self, device: int, weight) -> int:
        events = []
        for key, (t0, t1) in self.holding_intervals(device).items():
            events += [(t0, weight(key)), (t1, -weight(key))]
        # sorting (time, delta) pairs frees before allocating at equal times: finishing one backward
        # and starting the next forward at the same instant does not hold both
        level = peak = 0
        for _, delta in sorted(events):
            level += delta
            peak = max(peak, level)
        return peak

    def peak_inflight(self, device: int) -> int:
        """Most micro-batches (per stage held) whose activations `device` kept at once."""
        return self._peak(device, lambda key: 1)

    def peak_stash_bytes(self, device: int) -> int | None:
        """Peak bytes of stashed activations on `device` (None if stash sizes are unknown)."""
        sizes = self.stash_bytes
        return None if sizes is None else self._peak(device, lambda key: sizes[key[0]])


def format_bytes(n: float) -> str:
    """'512 B', '1.5 KiB', '3.0 MiB', ... (binary units, as memory is counted), up to TiB."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024:
            return f"{n:.0f} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"
