"""Refuse, before any work, a run this machine's memory cannot hold, naming the largest that would fit.

A room beside the shelf's ``TrainConfig`` (``course_lib/shelf/reference.py``): importing it
(``course_lib.engines`` does, so ``course_lib.lesson``, the command line and torchrun load it) registers
:func:`check_fits` in ``reference.MEMORY_CHECKS``, which ``TrainConfig.check`` and the engines' plans
ask with the micro-batches a schedule holds at once (``local_engine.make_plan``: GPipe holds all m).
Without it a config too large for the machine is not refused: it fails when the allocator runs out,
minutes in, or the machine swaps.

What a run needs is estimated (:func:`training_bytes`) and held against what the device has free
(:func:`memory_bytes` for the CPU and Apple's shared memory, the GPU's own for CUDA). With 8 GiB free::

    check_fits(TrainConfig(batch_size=10**6), 1.0, "one micro-batch at a time")
    # CourseError: training this config (one micro-batch at a time) needs about 2,453.8 GiB, more than
    # the 8.0 GiB of memory this machine has free; the largest that fits: batch_size 3,255, no seq_len,
    # no d_model (each with the rest as given)
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace

import torch

from course_lib.shelf.errors import require
from course_lib.shelf.model import ModelConfig
from course_lib.shelf.reference import MEMORY_CHECKS, TrainConfig
from course_lib.shelf.stage import resolve_device


def memory_bytes() -> int:
    """This machine's memory a run may use: what Linux calls MemAvailable (RAM not needed by others,
    page cache included), else the physical total (macOS has no /proc)."""
    try:
        with open("/proc/meminfo") as file:
            for line in file:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def training_bytes(cfg: TrainConfig, held: float = 1.0) -> float:
    """Bytes a run of `cfg` needs at its peak, on all its devices together: the parameters with AdamW
    (16 B each: weights, gradients, two moments), the token ids of a batch, and what backward keeps of
    `held` micro-batches in every block (64 B per token per unit of width, measured on the toy:
    ``lesson.accelerator_config``'s docstring) and in the head (logits, their softmax and gradient:
    12 B per token per vocabulary entry). `held` = 1: the reference, one micro-batch at a time."""
    d, vocab = cfg.d_model, ModelConfig.vocab_size
    params = 12 * d * d * cfg.n_layers + (2 * vocab + cfg.seq_len) * d
    tokens = cfg.batch_size // max(1, cfg.microbatches) * cfg.seq_len  # of one micro-batch
    saved = held * tokens * (64 * d * cfg.n_layers + 12 * vocab)
    return 16 * params + 16 * cfg.batch_size * cfg.seq_len + saved


def check_fits(cfg: TrainConfig, held: float = 1.0, why: str = "one micro-batch at a time") -> None:
    """Refuse, before any work, a config whose training_bytes(held) exceed the memory of the device it
    runs on; the message names the largest batch size and sequence length that would fit."""
    have, need = _free_bytes(resolve_device(cfg.device)), training_bytes(cfg, held)
    if have is None or need <= have:  # None: a GPU that cannot say (the first CUDA call fails)
        return
    largest = {
        n: _largest(lambda v, n=n: training_bytes(replace(cfg, **{n: v}), held) <= have, getattr(cfg, n))
        for n in ("batch_size", "seq_len", "d_model")
    }
    said = ", ".join(f"{name} {value:,}" if value else f"no {name}" for name, value in largest.items())
    require(
        need <= have,
        f"training this config ({why}) needs about {need / 2**30:,.1f} GiB, more than the "
        f"{have / 2**30:,.1f} GiB of memory this machine has free; the largest that fits: {said} (each "
        "with the rest as given)",
    )


def _free_bytes(device: torch.device) -> int | None:
    """Free memory of `device`: a CUDA GPU's own; the machine's for the CPU and Apple's shared memory."""
    if device.type != "cuda":
        return memory_bytes()
    try:
        return torch.cuda.mem_get_info(device)[0]
    except (AssertionError, RuntimeError):
        return None


def _largest(fits: Callable[[int], bool], above: int) -> int:
    """The largest v in 1..above for which fits(v) holds (0: none), by bisection: fits grows false."""
    low, high = 0, above
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if fits(mid) else (low, mid - 1)
    return low


if check_fits not in MEMORY_CHECKS:
    MEMORY_CHECKS.append(check_fits)
