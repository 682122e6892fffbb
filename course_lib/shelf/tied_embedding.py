"""Tied embeddings across a pipeline: the head reuses the embedding's weight, held as two copies.

    from course_lib.shelf.reference import TrainConfig
    cfg = TrainConfig(n_layers=4, tie_embeddings=True)   # the head's projection is the token embedding
    # the reference: one Parameter, used twice, so autograd adds both uses' gradients into it
    # a pipeline: stage 0 holds the embedding, the last stage a copy for the head (``copy_tied_weight``);
    # after the flush each copy's gradient becomes the sum of both (``sum_tied_grads``), so the two
    # copies take the same optimizer step and stay equal, bit for bit

Why copies: the first and the last stage sit on different devices, and a weight cannot be shared
across devices. Megatron-LM does the same (``share_embeddings_and_output_weights``: the last stage
keeps its own word-embedding copy, initialised from the first stage's, and the two are summed over
an "embedding group" of the first and last pipeline ranks before the optimizer steps). Leave out the
sum and each copy trains on only its own use: the copies drift apart (Megatron-LM issue #299), which
lesson 16 shows. When one device holds both stages (one rank, or a V shape whose rank 0 holds stage 0
and stage 2p - 1), the sum is one add on that device; across ranks it is an all-reduce of the two
(``rank_loop.py``).
"""

from __future__ import annotations

import torch
from torch import nn

EMBEDDING_WEIGHT = "layers.0.token.weight"  # the token embedding, as the whole model names it


def head_weight(n_blocks: int) -> str:
    """The name of the head's projection (the tied copy) in a model of `n_blocks` blocks."""
    return f"layers.{n_blocks + 1}.out.weight"


def copy_tied_weight(layers: nn.ModuleList) -> None:
    """Give the head its own Parameter, equal to the embedding's (a tied model shares one): what the
    last stage holds in a pipeline. A model that is not tied is left as it is."""
    embedding, head = layers[0].token, layers[-1].out
    if head.weight is embedding.weight:
        head.weight = nn.Parameter(embedding.weight.detach().clone())


@torch.no_grad()
def sum_tied_grads(embedding: nn.Parameter, head: nn.Parameter) -> None:
    """Both copies' gradients become their sum (on one device: the all-reduce of two is one add)."""
    if embedding.grad is None or head.grad is None:
        return
    total = embedding.grad + head.grad.to(embedding.grad.device)
    embedding.grad.copy_(total)
    head.grad.copy_(total.to(head.grad.device))


def tied_drift(embedding: nn.Parameter, head: nn.Parameter) -> float:
    """Largest |difference| between the two copies (0.0 while the gradient sum keeps them equal)."""
    return (embedding.detach().cpu() - head.detach().cpu()).abs().max().item()
