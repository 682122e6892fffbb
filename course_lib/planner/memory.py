"""Bytes per GPU: weights, gradients, optimizer states (with or without ZeRO-1), activations.

    from course_lib.planner.memory import memory_per_gpu
    memory_per_gpu(model("megatron-1t"), Layout(8, 64, 6, 1), global_batch=3072).total

Mixed-precision Adam keeps 2 bytes of weights and 2 of gradients per parameter, plus 12 of optimizer
states (fp32 master weights, momentum, variance): 16 bytes in all (Rajbhandari et al. 2020, ZeRO,
arXiv 1910.02054 sec 3.1). ZeRO-1 shards the 12 over the d replicas.

Activations per layer and micro-batch follow Korthikanti et al. 2022 (arXiv 2205.05198): eq. 1,
s*b*h*(34 + 5*a*s/h) bytes, and with TP over t GPUs (no sequence parallelism) eq. 2,
s*b*h*(10 + 24/t + 5*a*s/(h*t)); with full recomputation a layer keeps only its input, 2*s*b*h bytes,
and the layer being recomputed needs its full set once. (They are the GPT block's; Llama's SwiGLU and
grouped-query attention differ a little.) The busiest GPU holds as many micro-batches per stage as
the schedule's peak closed form says (the registry's ``peak``: 1F1B holds p, GPipe m), each of a
stage's layers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from course_lib.planner.layout import Layout
from course_lib.planner.shapes import ModelShape
from course_lib.schedules.closed_forms import Case
from course_lib.shelf.errors import require
from course_lib.shelf.first_schedules import SCHEDULES

WEIGHT_BYTES, GRAD_BYTES, OPTIMIZER_BYTES = 2, 2, 12  # per parameter, mixed-precision Adam
# share of a GPU's memory a plan may fill: the rest goes to the framework's communication buffers,
# temporaries and fragmentation (an assumption; PyTorch's caching allocator alone often keeps GBs)
USABLE_SHARE = 0.9


@dataclass(frozen=True)
class Memory:
    weights: float
    gradients: float
    optimizer: float
    activations: float

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer + self.activations


def layers_per_stage(shape: ModelShape, layout: Layout) -> int:
    """Layers on the busiest of the p*v stages: uneven splits put the extra layer on some stages (a
    layout string's stages: its largest)."""
    if layout.stage_blocks is not None:
        return max(layout.stage_blocks)
    return math.ceil(shape.layers / (layout.p * layout.v))


def layers_per_gpu(shape: ModelShape, layout: Layout) -> int:
    """Layers on the busiest GPU: its v stages' (a layout string's: the GPU whose stages hold most)."""
    if layout.stage_blocks is not None:
        return max(layout.gpu_blocks(r) for r in range(layout.p))
    return layout.v * layers_per_stage(shape, layout)


def parameters_per_gpu(shape: ModelShape, layout: Layout) -> float:
    """The busiest GPU's share: its v stages' layers plus the embedding (the first stage's), over t."""
    layers = layers_per_gpu(shape, layout)
    return (layers * shape.layer_parameters() + shape.embedding_parameters()) / layout.t


RECOMPUTE_MODES = ("none", "selective", "full")


def activation_bytes(shape: ModelShape, b: int, t: int, mode: str) -> float:
    """One layer, one micro-batch of b sequences, on one of its t GPUs, with tensor parallelism and no
    sequence parallelism (Korthikanti et al. 2022, arXiv 2205.05198, Table 2): "none" keeps everything,
    sbh(10 + 24/t + 5as/(ht)); "selective" recomputes the attention scores, softmax and dropout (the
    5as/(ht) part, which grows with s^2), sbh(10 + 24/t); "full" keeps only the layer's input, 2sbh."""
    require(mode in RECOMPUTE_MODES, f"recompute mode must be one of {RECOMPUTE_MODES}, got {mode!r}")
    sbh = shape.seq_len * b * shape.hidden
    if mode == "full":
        return 2.0 * sbh
    scores = 5 * shape.heads * shape.seq_len / (shape.hidden * t)
    return sbh * (10 + 24 / t + (0.0 if mode == "selective" else scores))


def activation_bytes_per_layer(shape: ModelShape, b: int, t: int, recompute: bool) -> float:
    """The planner's two choices: full recomputation or none."""
    return activation_bytes(shape, b, t, "full" if recompute else "none")


def in_flight(layout: Layout, m: int) -> int:
    """Micro-batch-stages the busiest GPU holds at once: the schedule's peak closed form."""
    return int(SCHEDULES[layout.schedule].peak.value(Case(p=layout.p, m=m, v=layout.v)))


def memory_per_gpu(shape: ModelShape, layout: Layout, global_batch: int) -> Memory:
    params = parameters_per_gpu(shape, layout)
    m = layout.microbatches(global_batch)
    stash = activation_bytes_per_layer(shape, layout.b, layout.t, layout.recompute)
    activations = in_flight(layout, m) * layers_per_stage(shape, layout) * stash
    if layout.recompute:  # the layer being recomputed holds its full activations for a moment
        activations += activation_bytes_per_layer(shape, layout.b, layout.t, recompute=False)
    optimizer = OPTIMIZER_BYTES * params / (layout.d if layout.zero1 else 1)
    return Memory(WEIGHT_BYTES * params, GRAD_BYTES * params, optimizer, activations)
