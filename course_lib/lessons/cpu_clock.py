"""One stage's forward and backward timed in CPU time, for effects a busy laptop must not blur.

Wall-clock time on a shared 2-core machine includes whatever else runs; this thread's CPU time does not
(another program delays a run but adds nothing to its CPU time). Lessons 11 and 13 time a stage of toy
blocks this way: with and without checkpointing, and at several micro-batch sizes::

    from course_lib.lessons.cpu_clock import stage_cpu_ms
    stage_cpu_ms({"b=1": (1, "never"), "b=8": (8, "never")}, n_blocks=4)   # Spread of ms per micro-batch
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import torch
from torch import nn

from course_lib.lessons.repeats import Spread, repeat_all
from course_lib.shelf.errors import require
from course_lib.shelf.model import ModelConfig, build_model
from course_lib.shelf.stage import StageRuntime


def stage_cpu_ms(
    configs: Mapping[str, tuple[int, str]], n_blocks: int = 20, repeats: int = 7, passes: int = 8,
    seed: int = 0,
) -> dict[str, Spread]:  # fmt: skip
    """Per config name (micro-batch size b, checkpoint mode): CPU ms of one micro-batch's forward and
    backward through `n_blocks` toy blocks, `passes` micro-batches a repeat; the configs take turns."""
    bad = {k: v for k, v in configs.items() if not (isinstance(v[0], int) and v[0] >= 1)}
    require(not bad, f"every config needs a micro-batch size >= 1, got {bad}")
    cfg = ModelConfig(n_layers=n_blocks, d_model=32, n_heads=4, vocab_size=64, seq_len=32)
    blocks = nn.Sequential(*build_model(cfg, seed=seed).layers[1:-1])  # no embedding, no head
    gen = torch.Generator().manual_seed(seed)
    shape = (cfg.seq_len, cfg.d_model)
    inputs = {b: [torch.randn(b, *shape, generator=gen) for _ in range(2)] for b, _ in configs.values()}

    def one(b: int, mode: str) -> float:
        stage = StageRuntime(1, 3, blocks, n_microbatches=passes, checkpoint=mode, track_memory=False,
                             split_backward=False)  # fmt: skip
        x, grad = inputs[b]
        start = time.thread_time()
        for mb in range(passes):
            stage.forward(mb, x.clone().requires_grad_(True))
            stage.backward(mb, grad)
        return (time.thread_time() - start) * 1e3 / passes

    runs = {name: (lambda b=b, mode=mode: one(b, mode)) for name, (b, mode) in configs.items()}
    for run in runs.values():  # warm-up: the first pass pays for allocations and lazy initialisation
        run()
    return {name: Spread(tuple(values)) for name, values in repeat_all(runs, repeats).items()}
