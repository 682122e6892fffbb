"""The toy transformer: a GPT-style decoder built as a flat list of layers.

    from course_lib.shelf.model import ModelConfig, build_model
    model = build_model(ModelConfig(n_layers=80), seed=0)   # 80 blocks, about 1M parameters
    model.layers        # [Embedding, Block x 80, Head]: a pipeline stage is a slice of this list

Why a flat list: a pipeline partition is then nothing but cut points in it, and nothing else in the
course needs to know the model's insides. Each layer takes one tensor and returns one tensor, so a
stage is just ``for layer in layers[a:b]: x = layer(x)``.

Why it trains at 80 layers: pre-norm blocks (LayerNorm before attention and MLP, so the residual
stream is never squashed) and GPT-2's initialisation, which scales every residual output projection
by 1/sqrt(2 * n_layers) so that 160 residual additions do not blow the stream up.
"""

from __future__ import annotations

import math
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from course_lib.shelf.errors import require, shown


@dataclass(frozen=True)
class ModelConfig:
    n_layers: int = 80  # transformer blocks (the embedding and head come on top)
    d_model: int = 32  # width of the residual stream
    n_heads: int = 4
    vocab_size: int = 64
    seq_len: int = 64  # longest context the position embedding knows
    mlp_ratio: int = 4

    def __post_init__(self) -> None:
        require(self.n_layers >= 1, f"n_layers must be >= 1, got {self.n_layers}")
        require(self.d_model >= 1, f"d_model (width) must be >= 1, got {self.d_model}")
        require(self.n_heads >= 1, f"n_heads must be >= 1, got {self.n_heads}")
        require(
            self.d_model % self.n_heads == 0,
            f"width d_model={self.d_model} is not divisible by n_heads={self.n_heads}; "
            f"choose a width that is a multiple of {self.n_heads}",
        )
        require(self.vocab_size >= 2, f"vocab_size must be >= 2, got {self.vocab_size}")
        require(self.seq_len >= 1, f"seq_len must be >= 1, got {self.seq_len}")


class Embedding(nn.Module):
    """Token ids (batch, time) -> vectors (batch, time, d_model): token plus position embedding."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.token = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.position = nn.Embedding(cfg.seq_len, cfg.d_model)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.token(idx) + self.position(torch.arange(idx.shape[1], device=idx.device))


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)  # residual output projection

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(causal_attention(self.qkv(x), self.n_heads))


def causal_attention(qkv: torch.Tensor, n_heads: int) -> torch.Tensor:
    """q, k, v packed as (b, t, 3w) -> (b, t, w): causal attention over `n_heads` heads of w / n_heads."""
    b, t, _ = qkv.shape
    # (b, t, w) -> (b, heads, t, head_dim), for each of q, k, v
    q, k, v = (z.view(b, t, n_heads, -1).transpose(1, 2) for z in qkv.chunk(3, dim=2))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return y.transpose(1, 2).reshape(b, t, -1)


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.up = nn.Linear(cfg.d_model, cfg.mlp_ratio * cfg.d_model)
        self.down = nn.Linear(cfg.mlp_ratio * cfg.d_model, cfg.d_model)  # residual output projection

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.norm1 = nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg)
        self.norm2 = nn.LayerNorm(cfg.d_model)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class Head(nn.Module):
    """Final LayerNorm and the projection to vocabulary logits."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.norm = nn.LayerNorm(cfg.d_model)
        self.out = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.norm(x))


class ToyGPT(nn.Module):
    """The whole model; ``layers`` is the flat list a partition cuts."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.config = cfg
        self.layers = nn.ModuleList([Embedding(cfg), *(Block(cfg) for _ in range(cfg.n_layers)), Head(cfg)])

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = idx
        for layer in self.layers:
            x = layer(x)
        return x


def init_weights(model: ToyGPT, seed: int) -> None:
    """GPT-2 initialisation, deterministic from `seed`."""
    gen = torch.Generator().manual_seed(seed)
    residual_std = 0.02 / math.sqrt(2 * model.config.n_layers)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:  # biases and LayerNorm: bias 0, gain 1
                p.fill_(1.0 if name.endswith("weight") else 0.0)
            else:
                std = residual_std if (".proj." in name or ".down." in name) else 0.02
                p.copy_(torch.randn(p.shape, generator=gen) * std)


def build_model(cfg: ModelConfig | None = None, seed: int = 0) -> ToyGPT:
    """A fresh model; the same `cfg` and `seed` give bit-identical weights on every machine."""
    model = ToyGPT(cfg or ModelConfig())
    init_weights(model, seed)
    return model


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy over every position."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def layer_names(model: ToyGPT) -> list[str]:
    return ["embedding", *(f"block {i}" for i in range(model.config.n_layers)), "head"]


def count_parameters(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


# the forward's compute dtype per TrainConfig.precision (None: the weights' float32). Weights, gradients
# and AdamW's moments stay float32 either way (mixed precision); float16 runs without loss scaling
PRECISIONS = {"float32": None, "bfloat16": torch.bfloat16, "float16": torch.float16}


def precision_dtype(precision: object) -> torch.dtype | None:
    """The dtype autocast computes in for `precision` (None for float32: no autocast); refuses a name
    that is not in PRECISIONS."""
    known = isinstance(precision, str) and precision in PRECISIONS
    require(known, f"precision must be one of {', '.join(PRECISIONS)}, got {shown(precision)}")
    return PRECISIONS[precision]


def check_amp(precision: object, device: torch.device) -> None:
    """Refuse an unknown precision, or automatic mixed precision (autocast) anywhere but on a CUDA GPU:
    the CPU stays float32 (the config's rule: the engines and the reference train what it allows)."""
    require(
        precision_dtype(precision) is None or device.type == "cuda",
        f"precision {precision!r} is autocast on a CUDA GPU, but the device is {device.type!r}, which "
        "computes in float32: use precision='float32' there",
    )


def autocast(precision: str, device: torch.device) -> AbstractContextManager:
    """Where a forward runs: as it is ("float32"), or under torch.autocast to PRECISIONS[precision] on
    `device` (the engines' stages, the reference and torch's pipelining alike)."""
    dtype = precision_dtype(precision)
    return nullcontext() if dtype is None else torch.autocast(device.type, dtype=dtype)
