"""The published runs the planner is held against, and the calibration of its efficiency factors.

    from course_lib.planner.published import ROWS, predict, calibrate
    row = ROWS[0]; predict(row).tflops_per_gpu, row.tflops_per_gpu
    calibrate(CALIBRATION["a100-selene"])      # the efficiency that reproduces that row exactly

Megatron-LM rows: Narayanan et al. 2021 (arXiv 2104.04473) Table 1, A100 80GB, weak scaling,
TFLOP/s per GPU counting recomputation (their eq. 3), all overheads included. Llama 3 rows: Llama Team
2024 (arXiv 2407.21783) Table 4, H100 80GB, sequence 8,192, 16M tokens a batch, TFLOP/s per GPU as
BF16 MFU x 989 (model FLOPs, no recomputation). The long-context row (context parallelism 16) is left
out: the planner has no context parallelism. Every prediction uses the published (t, p): the planner
picks b, the schedule and v, with recomputation on (as both papers ran).
"""

from __future__ import annotations

from dataclasses import dataclass

from course_lib.planner.clusters import CLUSTERS
from course_lib.planner.enumerate import Planned, plan, planned_from
from course_lib.planner.memory import memory_per_gpu
from course_lib.planner.shapes import MODELS
from course_lib.planner.step_time import estimate, simulate_pipeline


@dataclass(frozen=True)
class PublishedRow:
    model: str
    cluster: str
    gpus: int
    global_batch: int
    t: int
    p: int
    tflops_per_gpu: float  # as published
    counts_recompute: bool  # True: Megatron's count (eq. 3); False: model FLOPs (MFU)
    source: str
    zero1: bool = False  # Llama 3 shards optimizer states and gradients over DP (FSDP, its sec 3.3.2)

    @property
    def d(self) -> int:
        return self.gpus // (self.t * self.p)


_T1 = "arXiv 2104.04473 Table 1"
_T4 = "arXiv 2407.21783 Table 4"
ROWS: tuple[PublishedRow, ...] = (
    PublishedRow("megatron-18b", "a100-selene", 256, 1024, 8, 1, 135, True, _T1),
    PublishedRow("megatron-39b", "a100-selene", 512, 1536, 8, 2, 138, True, _T1),
    PublishedRow("megatron-76b", "a100-selene", 1024, 1792, 8, 4, 140, True, _T1),
    PublishedRow("megatron-145b", "a100-selene", 1536, 2304, 8, 8, 148, True, _T1),
    PublishedRow("megatron-310b", "a100-selene", 1920, 2160, 8, 16, 155, True, _T1),
    PublishedRow("megatron-530b", "a100-selene", 2520, 2520, 8, 35, 163, True, _T1),
    PublishedRow("megatron-1t", "a100-selene", 3072, 3072, 8, 64, 163, True, _T1),
    PublishedRow("llama3-405b", "h100-llama3", 8192, 2048, 8, 16, 430, False, _T4, zero1=True),
    PublishedRow("llama3-405b", "h100-llama3", 16384, 2048, 8, 16, 400, False, _T4, zero1=True),
)
# one row per GPU type sets its efficiency factor; every other row is a prediction
CALIBRATION = {"a100-selene": ROWS[6], "h100-llama3": ROWS[7]}


def predict(row: PublishedRow, efficiency: float | None = None, simulate_top: int = 1) -> Planned:
    """The planner's best layout at the row's published (t, p) (d follows), recomputing activations."""
    cl = CLUSTERS[row.cluster] if efficiency is None else CLUSTERS[row.cluster].with_efficiency(efficiency)
    result = plan(
        MODELS[row.model], cl, row.gpus, row.global_batch, recompute=(True,), only=(row.t, row.p),
        zero1=row.zero1, simulate_top=simulate_top,
    )  # fmt: skip
    return result.best


def predicted_tflops(row: PublishedRow, planned: Planned) -> float:
    """The planner's figure in the row's own convention (Megatron's count, or MFU x peak)."""
    if row.counts_recompute:
        return planned.tflops_per_gpu
    return planned.mfu * CLUSTERS[row.cluster].peak_flops / 1e12


def calibrate(row: PublishedRow, rounds: int = 6) -> float:
    """The efficiency at which the planner reproduces `row`, to 3 decimals, on the layout it picks
    for the row. Throughput is nearly proportional to the factor (only the communication does not
    scale), so rescaling by published / predicted converges in a few rounds."""
    layout = predict(row).layout
    shape, batch = MODELS[row.model], row.global_batch
    efficiency = CLUSTERS[row.cluster].efficiency
    for _ in range(rounds):
        cl = CLUSTERS[row.cluster].with_efficiency(efficiency)
        parts = simulate_pipeline(shape, cl, layout, batch, estimate(shape, cl, layout, batch))
        planned = planned_from(shape, cl, layout, batch, parts, memory_per_gpu(shape, layout, batch))
        efficiency = min(1.0, efficiency * row.tflops_per_gpu / predicted_tflops(row, planned))
    return round(efficiency, 3)


def published_table() -> list[dict]:
    """Published against predicted, row by row (the calibration rows say so)."""
    out = []
    for row in ROWS:
        best = predict(row)
        got = predicted_tflops(row, best)
        out.append({
            "model": row.model, "gpus": row.gpus, "batch": row.global_batch, "t": row.t, "p": row.p,
            "d": row.d, "published": row.tflops_per_gpu, "predicted": round(got, 1),
            "error": got / row.tflops_per_gpu - 1, "calibration": CALIBRATION[row.cluster] == row,
            "schedule": best.schedule, "v": best.v, "b": best.b, "source": row.source,
        })  # fmt: skip
    return out
