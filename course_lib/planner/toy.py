"""The course's toy model as a planner shape, and this machine as a planner cluster.

    from course_lib.planner.toy import toy_shape, this_machine
    shape = toy_shape(cfg, vocab_size)                       # the 80-layer toy of lessons 02-08
    machine = this_machine(ranks=4, shape=shape, cfg=cfg, measured_step_s=0.4)

The lesson's "small cluster" is this machine: `ranks` processes, all in one "node", joined by gloo
over loopback. Its compute rate is not a datasheet number: it is the FLOPs of one step of the
reference trainer (one process) divided by that step's measured time, so the efficiency factor is 1
by construction: the same move as calibrating on one published run. The loopback link's latency and
bandwidth are assumptions (a gloo message between two local processes takes tens to hundreds of us).

How fast the toy trains against what a card could do (MFU), with the one FLOP count and peak table::

    flops = toy_shape(cfg, vocab_size).step_flops(cfg.batch_size, recompute=False)
    flops / result.step_time_s / card_peak("NVIDIA H100 80GB HBM3").fp32_flops   # clusters.card_peak

MFU counts the FLOPs the model needs (the matmuls and attention's two products; no recomputation,
padding, biases or norms), over the card's datasheet peak. The toy trains in FP32 (TF32 matmuls are
off by default in torch), so its MFU is against the FP32 peak; LLM papers quote the dense BF16 one.
"""

from __future__ import annotations

from course_lib.planner.clusters import Cluster
from course_lib.planner.shapes import ModelShape
from course_lib.shelf.costs import Link
from course_lib.shelf.errors import require
from course_lib.shelf.reference import TrainConfig

LOOPBACK = Link(latency_s=200e-6, bandwidth_Bps=2e9, name="gloo loopback (assumed)")


def toy_shape(cfg: TrainConfig, vocab_size: int) -> ModelShape:
    """The toy GPT (course_lib/shelf/model.py: 4x MLP, biases, learned positions) at `cfg`'s size."""
    return ModelShape(
        f"toy-{cfg.n_layers}", cfg.n_layers, cfg.d_model, cfg.n_heads, 4 * cfg.d_model, vocab_size,
        cfg.seq_len, source="course_lib/shelf/model.py",
    )  # fmt: skip


def this_machine(
    ranks: int, shape: ModelShape, cfg: TrainConfig, measured_step_s: float, memory_bytes: float = 4 * 2**30
) -> Cluster:
    """`ranks` processes on this machine, their rate calibrated on one measured reference step;
    `memory_bytes` per process (a budget the lesson may set below what the whole model needs)."""
    require(measured_step_s > 0, f"measured_step_s must be > 0 seconds, got {measured_step_s!r}")
    require(memory_bytes > 0, f"memory_bytes must be > 0, got {memory_bytes!r}")
    rate = shape.step_flops(cfg.batch_size, recompute=False) / measured_step_s
    return Cluster(
        "this-machine", "CPU process", rate, memory_bytes, ranks, LOOPBACK, LOOPBACK, efficiency=1.0,
        source="measured: one step of the reference trainer on this machine; links assumed",
    )  # fmt: skip
