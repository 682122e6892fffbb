"""Lesson 12's model: a pipeline's data-parallel gradient all-reduce, when it can run, and what ZeRO changes.

With d replicas of a p-stage pipeline, each stage all-reduces its gradients with the same stage of the
other replicas once a step. A stage's gradients are complete only when its last micro-batch's backward
has run, so the all-reduce cannot start before that (Narayanan et al. 2021, arXiv 2104.04473 sec. 3.3)::

    from course_lib.lessons.pp_dp import all_reduce_timings, step_with_dp, zero_traffic
    tl = simulate(build_schedule("1f1b", 4, 8), StageCosts.fused(1, 2))
    step_with_dp(tl, reduce_s=6, overlap="after-flush")   # every stage reduces after the whole flush
    step_with_dp(tl, reduce_s=6, overlap="buckets")       # each stage reduces while its last backward runs
    zero_traffic(m=8, d=8)                                 # bytes per step per stage, in units of its weights
"""

from __future__ import annotations

from dataclasses import dataclass

from course_lib.shelf.errors import require
from course_lib.shelf.schedule import Kind
from course_lib.shelf.timeline import Timeline

OVERLAPS = ("after-flush", "per-stage", "buckets")


def last_backwards(tl: Timeline) -> list[tuple[float, float]]:
    """Per device: (start, end) of its last backward (B, or W for a split backward): after it, the
    device's gradients for the step are complete."""
    out = []
    for d in range(tl.n_devices):
        backs = [s for s in tl.spans_of(d) if s.action.kind in (Kind.B, Kind.W)]
        require(backs, f"device {d} of {tl.schedule_name!r} runs no backward: nothing to all-reduce")
        last = max(backs, key=lambda s: s.end)
        out.append((last.start, last.end))
    return out


@dataclass(frozen=True)
class AllReduce:
    device: int
    ready: float  # its last backward ended: the gradients are complete
    pieces: tuple[tuple[float, float], ...]  # (start, end) of each bucket sent

    @property
    def end(self) -> float:
        return self.pieces[-1][1]


def all_reduce_timings(
    tl: Timeline, reduce_s: float, overlap: str = "buckets", buckets: int = 8, shared: bool = False
) -> list[AllReduce]:
    """When each device's all-reduce runs. "after-flush": all start when the last device is done (a
    step with a barrier); "per-stage": each device starts when its own last backward ends; "buckets": the
    gradients go in `buckets` pieces, each as soon as the last backward has produced it (the backward runs
    from the stage's last layer to its first), as PyTorch's DDP buckets do. A link sends one piece at a
    time: one link per device, or with `shared` one link for all of them (the stages' replicas behind the
    same network port), where the pieces queue in the order they are ready."""
    require(overlap in OVERLAPS, f"overlap must be one of {OVERLAPS}, got {overlap!r}")
    require(reduce_s >= 0, f"reduce_s must be >= 0 seconds, got {reduce_s!r}")
    whole = isinstance(buckets, int) and not isinstance(buckets, bool) and buckets >= 1
    require(whole, f"buckets must be a whole number >= 1, got {buckets!r}")
    backs = last_backwards(tl)
    flush = max(end for _, end in backs)
    queue = []  # (ready, device, piece size)
    for d, (start, end) in enumerate(backs):
        if overlap == "buckets":  # piece k is done once the last backward has covered (k+1)/n of the stage
            share = (end - start) / buckets
            queue += [(start + share * (k + 1), d, reduce_s / buckets) for k in range(buckets)]
        else:
            queue.append((flush if overlap == "after-flush" else end, d, reduce_s))
    free = {d: 0.0 for d in range(tl.n_devices)}  # when each link is next free
    pieces: dict[int, list[tuple[float, float]]] = {d: [] for d in range(tl.n_devices)}
    for ready, d, size in sorted(queue):
        link = 0 if shared else d
        begin = max(ready, free.get(link, 0.0))
        free[link] = begin + size
        pieces[d].append((begin, begin + size))
    return [AllReduce(d, end, tuple(pieces[d])) for d, (_, end) in enumerate(backs)]


def step_with_dp(
    tl: Timeline, reduce_s: float, overlap: str = "buckets", buckets: int = 8, shared: bool = False
) -> float:
    """The step from its first action to the last all-reduce's end (the optimizer steps after it)."""
    return max(a.end for a in all_reduce_timings(tl, reduce_s, overlap, buckets, shared)) - tl.start


def draw(tl: Timeline, timings: list, ax, title: str) -> None:
    """The pipeline's Gantt chart with each device's all-reduce drawn as dark hatched boxes."""
    from course_lib.charts.gantt import plot_timeline, time_scale

    extent = max(a.end for a in timings) - tl.start
    plot_timeline(tl, ax=ax, extent_s=extent, title=title)
    factor, _ = time_scale(extent)
    for a in timings:
        boxes = [((s - tl.start) * factor, (e - s) * factor) for s, e in a.pieces]
        # the lower half of the row, so that a backward the reduction overlaps stays visible above it
        ax.broken_barh(boxes, (a.device, 0.4), facecolors="#333333", edgecolors="white", hatch="//")


def zero_traffic(m: int, d: int) -> dict[str, float]:
    """Bytes one stage sends per step over its d replicas, in units of its gradient's bytes, for plain
    DP and ZeRO stages 1-3 (Rajbhandari et al. 2020, arXiv 1910.02054) when the step is m micro-batches.

    A ring all-reduce sends 2(d-1)/d of the data, a reduce-scatter or an all-gather (d-1)/d. DP and ZeRO-1
    reduce the accumulated gradients once (ZeRO-1 as a reduce-scatter plus an all-gather of the updated
    weights: the same bytes). ZeRO-2 keeps only its shard of the gradients, so it must reduce-scatter after
    every micro-batch's backward, m times, then all-gather the weights once. ZeRO-3 also shards the weights:
    an all-gather before every micro-batch's forward and again before its backward, 2m, plus the m
    reduce-scatters (an implementation that keeps gathered weights across micro-batches buys this back
    with memory)."""
    require(isinstance(m, int) and m >= 1, f"m must be a whole number >= 1, got {m!r}")
    require(isinstance(d, int) and d >= 2, f"d must be a whole number >= 2 (replicas to reduce), got {d!r}")
    one = (d - 1) / d
    return {"DP": 2 * one, "ZeRO-1": 2 * one, "ZeRO-2": (m + 1) * one, "ZeRO-3": 3 * m * one}


def zero_memory(d: int) -> dict[str, float]:
    """Bytes per parameter of weights, gradients and Adam's states with mixed precision (2 + 2 + 12), per
    ZeRO stage over d replicas (Rajbhandari et al. 2020, Figure 1)."""
    require(isinstance(d, int) and d >= 1, f"d must be a whole number >= 1, got {d!r}")
    return {"DP": 16.0, "ZeRO-1": 4 + 12 / d, "ZeRO-2": 2 + 14 / d, "ZeRO-3": 16 / d}
