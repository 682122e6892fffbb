"""Gradient-norm clipping over the whole model, when the model is cut into stages.

    from course_lib.shelf.grad_clip import clip_coefficient, squared_norm, scale_grads
    total = squared_norm(p.grad for p in my_params)   # this stage's share of the norm, squared
    # ... added over every stage (an all-reduce across ranks) ...
    coef = clip_coefficient(total, max_norm=1.0)      # min(1, max_norm / (norm + 1e-6))
    scale_grads(my_params, coef)                      # every stage scales by the same factor

The norm that clipping reads is the whole model's: the square root of the sum of every gradient's
squares, over every stage (and every tensor-parallel slice). Each stage alone sees only its share,
so clipping per stage scales each stage by a different factor and changes the direction of the
update (torchtitan issue #596 and PyTorch issue #162638 are this failure). The fix costs one number
per rank: each adds its squares, the sum crosses the ranks, every rank takes the square root.

The reference trainer calls torch.nn.utils.clip_grad_norm_, whose documented rule (the norm of all
gradients as if concatenated; each multiplied by max_norm / (norm + 1e-6) when that is below 1) is
what ``clip_coefficient`` computes. Sums here run in float64, so the engines' norm equals torch's to
float32 rounding. A weight that two stages hold as copies (tied embeddings) counts once.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import Tensor

from course_lib.shelf.errors import is_number, require, shown

EPSILON = 1e-6  # torch.nn.utils.clip_grad_norm_'s: no division by zero when every gradient is zero


def check_max_norm(value: object) -> None:
    """Refuse a clipping norm that is not None or a number > 0."""
    require(
        value is None or (is_number(value) and math.isfinite(value) and value > 0),
        f"clip_grad_norm must be None (no clipping) or a number > 0, got {shown(value)}",
    )


@torch.no_grad()
def squared_norm(grads: Iterable[Tensor | None]) -> float:
    """The sum of the squares of every entry of `grads` (None: a weight with no gradient, zero)."""
    return float(sum(g.detach().double().pow(2).sum().item() for g in grads if g is not None))


def clip_coefficient(total_squared: float, max_norm: float) -> float:
    """The factor every gradient is multiplied by: min(1, max_norm / (norm + EPSILON))."""
    return min(1.0, max_norm / (math.sqrt(total_squared) + EPSILON))


@torch.no_grad()
def scale_grads(params: Iterable[torch.nn.Parameter], coefficient: float) -> None:
    """Multiply every gradient by `coefficient` (1.0: left as it is)."""
    if coefficient >= 1.0:
        return
    for p in params:
        if p.grad is not None:
            p.grad.mul_(coefficient)
