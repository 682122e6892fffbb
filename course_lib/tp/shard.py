"""Cut a transformer block into t tensor-parallel shards, and put gradients back together.

Megatron-LM's recipe (Shoeybi et al. 2019), for one block of the toy model:

- attention: the qkv projection is split by *columns* (each rank gets whole heads: n_heads / t of
  them), the output projection by *rows* (each rank multiplies its own heads' outputs). Each rank
  ends with a partial sum of the block's output; one all-reduce adds them up.
- MLP: ``up`` split by columns (4d / t hidden units each; GELU acts on each unit alone, so no
  communication is needed between the two matmuls), ``down`` by rows; one all-reduce again.

Biases of the row-split layers are added once, after the all-reduce. LayerNorms, the embedding and the
head are replicated on every rank (Megatron also splits the embedding by vocabulary; the toy keeps it
whole, so only the 4 all-reduces per block appear in the counts).

    from course_lib.shelf.model import ModelConfig, build_model
    from course_lib.tp.shard import shard_block
    model = build_model(ModelConfig(n_layers=2), seed=0)
    shard_block(model.layers[1], t=2, rank=0)        # rank 0's slice of block 0
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from course_lib.shelf.errors import require
from course_lib.shelf.model import Block, ModelConfig, causal_attention


def check_divisible(cfg: ModelConfig, t: int) -> None:
    """Refuse a tensor-parallel size that does not split the width or the heads evenly (the MLP's
    width is mlp_ratio x d_model, so it splits whenever the width does)."""
    require(isinstance(t, int) and t >= 1, f"tensor-parallel size t must be an integer >= 1, got {t!r}")
    require(
        cfg.d_model % t == 0,
        f"tensor-parallel size t={t} does not divide the width d_model={cfg.d_model}; "
        f"choose t among the divisors of {cfg.d_model}",
    )
    require(
        cfg.n_heads % t == 0,
        f"tensor-parallel size t={t} does not divide the head count n_heads={cfg.n_heads}; each rank "
        f"must hold whole heads, so choose t among the divisors of {cfg.n_heads}",
    )


def _qkv_rows(d: int, t: int, rank: int) -> list[slice]:
    """Rows of the (3d, d) qkv weight that belong to `rank`: its slice of q, of k and of v."""
    width = d // t
    return [slice(part * d + rank * width, part * d + (rank + 1) * width) for part in range(3)]


class BlockShard(nn.Module):
    """One rank's slices of a block's four matrices; computes partial sums, never communicates.

    Each slice is an ``nn.Linear`` (the row-split ones without a bias: theirs is added once, after
    the all-reduce, by ``Bias``), so whatever treats a stage's Linear layers specially (a zero-bubble
    engine computing weight gradients later) treats a sharded stage the same way."""

    def __init__(self, block: Block, t: int, rank: int):
        super().__init__()
        d = block.attn.proj.weight.shape[0]
        hidden = block.mlp.up.weight.shape[0]
        self.heads = block.attn.n_heads // t
        rows = _qkv_rows(d, t, rank)
        cols = slice(rank * d // t, (rank + 1) * d // t)
        units = slice(rank * hidden // t, (rank + 1) * hidden // t)
        self.qkv = _linear(torch.cat([block.attn.qkv.weight[r] for r in rows]),
                           torch.cat([block.attn.qkv.bias[r] for r in rows]))  # fmt: skip
        self.proj = _linear(block.attn.proj.weight[:, cols])
        self.up = _linear(block.mlp.up.weight[units], block.mlp.up.bias[units])
        self.down = _linear(block.mlp.down.weight[:, units])

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        """This rank's heads -> a partial (b, s, d) output; the sum over ranks is the full projection."""
        return self.proj(causal_attention(self.qkv(x), self.heads))  # bias after the sum

    def mlp(self, x: torch.Tensor) -> torch.Tensor:
        """This rank's hidden units -> a partial (b, s, d) output."""
        return self.down(F.gelu(self.up(x)))


def _linear(weight: torch.Tensor, bias: torch.Tensor | None = None) -> nn.Linear:
    """An nn.Linear holding clones of `weight` (out, in) and `bias`: each shard owns its parameters,
    as on a separate GPU."""
    layer = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None)
    with torch.no_grad():
        layer.weight.copy_(weight)
        if bias is not None:
            layer.bias.copy_(bias)
    return layer


class Bias(nn.Module):
    """A row-split layer's bias, added once to the all-reduced sum (replicated on every rank)."""

    def __init__(self, bias: torch.Tensor):
        super().__init__()
        self.bias = nn.Parameter(bias.detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.bias


def shard_block(block: Block, t: int, rank: int) -> BlockShard:
    require(0 <= rank < t, f"rank must be in 0..{t - 1} for t={t}, got {rank}")
    return BlockShard(block, t, rank)


def assemble_block_grads(shard_grads: list[dict[str, torch.Tensor]], prefix: str) -> dict[str, torch.Tensor]:
    """Glue t shards' gradients (``{"qkv.weight": ..., ...}`` per rank) back into full-model tensors.

    `prefix` is the block's name in the full model, e.g. ``"layers.1"``."""
    width = shard_grads[0]["proj.weight"].shape[1]  # d / t: each rank's slice of q, of k, of v

    def qkv(name: str) -> torch.Tensor:  # each rank holds (q_r, k_r, v_r); full is (q_0..q_t, k.., v..)
        return torch.cat(
            [g[name][part * width : (part + 1) * width] for part in range(3) for g in shard_grads]
        )

    def cat(name: str, dim: int) -> torch.Tensor:
        return torch.cat([g[name] for g in shard_grads], dim=dim)

    return {
        f"{prefix}.attn.qkv.weight": qkv("qkv.weight"),
        f"{prefix}.attn.qkv.bias": qkv("qkv.bias"),
        f"{prefix}.attn.proj.weight": cat("proj.weight", 1),
        f"{prefix}.mlp.up.weight": cat("up.weight", 0),
        f"{prefix}.mlp.up.bias": cat("up.bias", 0),
        f"{prefix}.mlp.down.weight": cat("down.weight", 1),
    }


# Replicated parameters that live under another name in the TP models than in the full model.
_RENAMES = {"proj_bias.bias": "attn.proj.bias", "down_bias.bias": "mlp.down.bias"}


def _full_name(name: str) -> str:
    """A replicated parameter's full-model name: ``layers.1.proj_bias.bias`` -> ``layers.1.attn.proj.bias``"""
    for tp_name, full_name in _RENAMES.items():
        if name.endswith("." + tp_name):
            return name[: -len(tp_name)] + full_name
    return name


def is_slice(name: str) -> bool:
    """Is the parameter `name` (of a TP model) one rank's slice, rather than a replicated whole?"""
    return ".shard." in name


def assemble_gradients(rank_grads: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Per-rank gradients of a TP model -> gradients named like the full model's parameters.
    (Any per-parameter tensors glue the same way: the weights after a step, for instance.)

    Rank dicts use the TP models' naming: ``layers.<i>.shard.<name>`` for a rank's slice, anything
    else for a replicated parameter (taken from rank 0: all ranks hold the same value)."""
    full: dict[str, torch.Tensor] = {}
    blocks: dict[str, list[dict[str, torch.Tensor]]] = {}
    for name, grad in rank_grads[0].items():
        if is_slice(name):
            prefix = name.split(".shard.")[0]
            if prefix not in blocks:
                blocks[prefix] = [
                    {k.split(".shard.")[1]: v for k, v in rg.items() if k.startswith(prefix + ".shard.")}
                    for rg in rank_grads
                ]
            continue
        full[_full_name(name)] = grad
    for prefix, shard_grads in blocks.items():
        full.update(assemble_block_grads(shard_grads, prefix))
    return full
