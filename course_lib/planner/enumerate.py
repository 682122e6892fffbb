"""Every layout that divides the GPUs and the batch and fits memory, ranked by predicted step time.

    from course_lib.planner.enumerate import plan
    result = plan("megatron-1t", "a100-selene", gpus=3072, global_batch=3072)
    result.best.t, result.best.p, result.best.d, result.best.step_s

Closed forms rank every candidate (a few thousand for the 1T model on 3,072 GPUs); the simulator
then replays the pipelines of the `simulate_top` leaders, links included, and they are re-ranked.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace

from course_lib.planner.clusters import Cluster, cluster
from course_lib.planner.layout import Layout
from course_lib.planner.memory import USABLE_SHARE, Memory, memory_per_gpu
from course_lib.planner.shapes import ModelShape, model
from course_lib.planner.step_time import (
    MEGATRON_OVERLAP,
    Overlap,
    Parts,
    estimate,
    pipeline_timeline,
    played_microbatches,
    simulate_pipeline,
)
from course_lib.shelf.errors import LIMITS, divisors, require, whole
from course_lib.shelf.first_schedules import resolve_name
from course_lib.shelf.timeline import Timeline
from course_lib.stage_layout import parse_layout

SCHEDULE_CHOICES = ("gpipe", "1f1b", "interleaved-1f1b")  # the ones whose memory and bubble it models
MICRO_BATCHES = (1, 2, 4, 8, 16)
MAX_VIRTUAL = 8
JSON_KEYS = ("t", "p", "d", "b", "schedule", "v", "step_s", "tflops_per_gpu", "mfu", "memory_per_gpu_bytes")


@dataclass(frozen=True)
class Planned:
    """One layout and what the planner predicts for it."""

    layout: Layout
    parts: Parts
    memory: Memory
    step_s: float
    tflops_per_gpu: float  # FLOPs the step runs (recomputation included: Megatron's count) / s / GPU
    mfu: float  # model FLOPs (no recomputation) / (step x GPUs x peak)
    # the simulator's run of its pipeline (played_microbatches), kept for the leaders it re-ranked
    timeline: Timeline | None = field(default=None, compare=False, repr=False)

    @property
    def t(self) -> int:
        return self.layout.t

    @property
    def p(self) -> int:
        return self.layout.p

    @property
    def d(self) -> int:
        return self.layout.d

    @property
    def b(self) -> int:
        return self.layout.b

    @property
    def schedule(self) -> str:
        return self.layout.schedule

    @property
    def v(self) -> int:
        return self.layout.v

    @property
    def recompute(self) -> bool:
        return self.layout.recompute

    @property
    def memory_per_gpu_bytes(self) -> float:
        return self.memory.total

    @property
    def bubble_share(self) -> float:
        return self.parts.bubble_s / self.step_s

    def as_dict(self) -> dict:
        row = {key: getattr(self, key) for key in JSON_KEYS}
        parts = self.parts
        row |= {"recompute": self.recompute, "zero1": self.layout.zero1, "bubble_share": self.bubble_share}
        row |= {f"{k}_s": getattr(parts, f"{k}_s") for k in ("compute", "tp", "bubble", "boundary", "dp")}
        return row | {"simulated": parts.simulated}


@dataclass(frozen=True)
class Plan:
    shape: ModelShape
    cluster: Cluster
    gpus: int
    global_batch: int
    layouts: list[Planned] = field(default_factory=list)  # fastest first
    candidates: int = 0  # layouts that divide the GPUs and the batch, before memory
    overlap: Overlap = MEGATRON_OVERLAP  # what communication hides behind compute in every layout's cost

    @property
    def best(self) -> Planned:
        require(bool(self.layouts), f"no layout of {self.shape.name} fits {self.gpus} GPUs' memory")
        return self.layouts[0]


def candidates(
    shape: ModelShape, gpus: int, global_batch: int, schedules: Sequence[str], recompute: Sequence[bool],
    zero1: bool = False, node: int = 8,
) -> Iterator[Layout]:  # fmt: skip
    """Layouts that divide the GPUs (t also divides the heads and the FFN, and a node's GPUs or a
    whole number of nodes), the batch, and the layers (p*v stages of at least one layer)."""
    for t in (t for t in divisors(gpus) if _splits(shape, t, node)):
        for p in (p for p in divisors(gpus // t) if p <= shape.layers):
            d = gpus // (t * p)
            if global_batch % d:
                continue
            for b in (b for b in MICRO_BATCHES if (global_batch // d) % b == 0):
                m = global_batch // (d * b)
                for schedule, v in _schedules(schedules, shape.layers, p, m):
                    for r in recompute:
                        yield Layout(t, p, d, b, schedule, v, r, zero1)


def _splits(shape: ModelShape, t: int, node: int) -> bool:
    return shape.heads % t == 0 and shape.ffn % t == 0 and (node % t == 0 or t % node == 0)


def _schedules(names: Sequence[str], layers: int, p: int, m: int) -> Iterator[tuple[str, int]]:
    for name in names:
        if name != "interleaved-1f1b":
            yield name, 1
        elif p > 1 and m % p == 0:  # Megatron-LM's rule for interleaving: m a multiple of p
            yield from ((name, v) for v in range(2, MAX_VIRTUAL + 1) if p * v <= layers)


def planned_from(
    shape: ModelShape, cl: Cluster, layout: Layout, batch: int, parts: Parts, mem: Memory,
    timeline: Timeline | None = None,
) -> Planned:  # fmt: skip
    step = parts.step_s
    counted = shape.step_flops(batch, layout.recompute) / (step * layout.gpus)
    mfu = shape.step_flops(batch, recompute=False) / (step * layout.gpus * cl.peak_flops)
    return Planned(layout, parts, mem, step, counted / 1e12, mfu, timeline)


def simulated(
    shape: ModelShape, cl: Cluster, x: Planned, batch: int, overlap: Overlap = MEGATRON_OVERLAP
) -> Planned:
    """`x` re-costed by the simulator (``simulate_pipeline``), with the timeline it played."""
    tl = pipeline_timeline(shape, cl, x.layout, played_microbatches(x.layout, batch))
    parts = simulate_pipeline(shape, cl, x.layout, batch, x.parts, timeline=tl, overlap=overlap)
    return planned_from(shape, cl, x.layout, batch, parts, x.memory, timeline=tl)


def plan(
    shape: ModelShape | str, cluster_: Cluster | str, gpus: int, global_batch: int, *,
    schedules: Sequence[str] = ("1f1b", "interleaved-1f1b"), recompute: Sequence[bool] = (True, False),
    zero1: bool = False, simulate_top: int = 3, only: tuple[int, int] | None = None,
    overlap: Overlap = MEGATRON_OVERLAP, layout: str | None = None,
) -> Plan:  # fmt: skip
    """Rank every layout of `shape` on `gpus` GPUs of `cluster_` for `global_batch` sequences a step.
    `only=(t, p)` keeps the layouts with that t and p (a published layout, sec 5.4's comparisons);
    `overlap`: what the costs let communication hide (``step_time.Overlap``; Megatron-LM's by default).
    `layout`: a Megatron-core layout string (``course_lib/stage_layout.py``) fixing the stages and their
    blocks: only layouts with p x v = its stages are ranked, each costed by its busiest stage and GPU."""
    simulate_top = whole("simulate_top", simulate_top, low=0)
    shape = model(shape) if isinstance(shape, str) else shape
    cl = cluster(cluster_) if isinstance(cluster_, str) else cluster_
    require(
        isinstance(shape, ModelShape), f"shape must be a model preset's name or a ModelShape, got {shape!r}"
    )
    require(isinstance(cl, Cluster), f"cluster_ must be a cluster preset's name or a Cluster, got {cl!r}")
    require(isinstance(overlap, Overlap), f"overlap must be a planner.step_time.Overlap, got {overlap!r}")
    gpus, global_batch = check_request(cl, gpus, global_batch, schedules)
    names = [resolve_name(s) for s in schedules]
    blocks = None if layout is None else _stage_blocks(layout, shape)
    fitting, total = [], 0
    for cand in candidates(shape, gpus, global_batch, names, recompute, zero1, cl.gpus_per_node):
        if only and (cand.t, cand.p) != tuple(only):
            continue
        if blocks is not None:  # the layout string's stages, or not this candidate
            if cand.p * cand.v != len(blocks):
                continue
            cand = replace(cand, stage_blocks=blocks)
        total += 1
        mem = memory_per_gpu(shape, cand, global_batch)
        fits = mem.total <= USABLE_SHARE * cl.memory_bytes
        parts = estimate(shape, cl, cand, global_batch, overlap) if fits else None
        if parts is not None:
            fitting.append(planned_from(shape, cl, cand, global_batch, parts, mem))
    require(
        blocks is None or total > 0,
        f"no layout of {gpus} GPUs for {shape.name} has p x v = {len(blocks or ())} stages, as layout "
        f"{layout!r} has (v up to {MAX_VIRTUAL}, with interleaved-1f1b): choose a layout whose stages "
        "divide among the pipeline ranks the GPUs allow",
    )
    _require_some(shape, cl, gpus, global_batch, total)
    fitting.sort(key=lambda x: x.step_s)
    leaders = [simulated(shape, cl, x, global_batch, overlap) for x in fitting[:simulate_top]]
    ranked = sorted(leaders, key=lambda x: x.step_s) + fitting[simulate_top:]
    return Plan(shape, cl, gpus, global_batch, ranked, total, overlap)


def _stage_blocks(text: str, shape: ModelShape) -> tuple[int, ...]:
    """Blocks per stage of a layout string, checked against the model's layers (none dropped or repeated)."""
    parsed = parse_layout(text)
    parsed.check(shape.layers)
    return tuple(stage.count("t") for stage in parsed.stages)


def _require_some(shape: ModelShape, cl: Cluster, gpus: int, global_batch: int, total: int) -> None:
    """No candidate at all: the batch does not divide among any d replicas the GPUs allow."""
    allowed = candidates(shape, gpus, gpus, ("1f1b",), (True,), node=cl.gpus_per_node)
    replicas = sorted({c.d for c in allowed})
    require(
        total > 0,
        f"global batch {global_batch} divides among none of the replica counts d that {gpus} GPUs allow "
        f"for {shape.name} (t divides a {cl.gpus_per_node}-GPU node and {shape.heads} heads, p <= "
        f"{shape.layers} layers): d in {replicas[:12]}; choose a batch that one of them divides",
    )


def check_request(cl: Cluster, gpus: int, global_batch: int, schedules: Sequence[str]) -> tuple[int, int]:
    """Refuse a request no layout can meet, before any work, naming the value and what is allowed;
    returns `gpus` and `global_batch` as Python ints (numpy's are the same numbers)."""
    gpus = whole("gpus", gpus, high=LIMITS["gpus"])  # 8e18 would take sqrt(8e18) steps to divide
    global_batch = whole("global batch", global_batch, high=LIMITS["global_batch"])
    require(
        gpus % cl.gpus_per_node == 0 or gpus < cl.gpus_per_node and cl.gpus_per_node % gpus == 0,
        f"gpus must be a multiple of {cl.gpus_per_node} (the GPUs of one {cl.name} node) or divide it, "
        f"got {gpus}",
    )
    for name in schedules:
        require(
            resolve_name(name) in SCHEDULE_CHOICES,
            f"the planner models the schedules {', '.join(SCHEDULE_CHOICES)}; got {name!r}",
        )
    return gpus, global_batch
