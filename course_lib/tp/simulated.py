"""Tensor parallelism in one process: all t shards of every block side by side, all-reduce = sum.

Nothing here runs in parallel; the point is to see the arithmetic. Every block holds t ``BlockShard``
objects (rank r's slice of the weights) plus one copy of what every rank replicates (LayerNorms, the
row-split layers' biases, the embedding and the head: replicated work is identical on every rank, so one
copy stands for all of them). ``f`` and ``g`` from ``comm`` connect them and count each all-reduce.

    from course_lib.shelf.model import ModelConfig
    from course_lib.tp.simulated import SimulatedTP
    tp = SimulatedTP.from_seed(ModelConfig(n_layers=4), t=2, seed=0)
    loss = lm_loss(tp(x), y); loss.backward()
    tp.log.summary()          # 8 forward and 8 backward all-reduces: 2 + 2 per block
    tp.full_gradients()       # the same names and shapes as build_model(...)'s gradients
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from course_lib.shelf.model import Block, ModelConfig, ToyGPT, build_model
from course_lib.tp.comm import CommLog, copy_to_shards, reduce_from_shards
from course_lib.tp.shard import Bias, assemble_gradients, check_divisible, shard_block


class SimulatedTPBlock(nn.Module):
    """x + g(sum_r attn_r(f(norm1(x)))) + bias, then the same for the MLP: 2 all-reduces forward."""

    def __init__(self, block: Block, t: int, log: CommLog):
        super().__init__()
        self.t, self.log = t, log
        self.norm1 = copy.deepcopy(block.norm1)
        self.norm2 = copy.deepcopy(block.norm2)
        self.shards = nn.ModuleList(shard_block(block, t, r) for r in range(t))
        self.proj_bias = Bias(block.attn.proj.bias)
        self.down_bias = Bias(block.mlp.down.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        inputs = copy_to_shards(self.norm1(x), self.t, self.log)
        parts = [shard.attention(h) for shard, h in zip(self.shards, inputs, strict=True)]
        x = x + self.proj_bias(reduce_from_shards(parts, self.log))
        inputs = copy_to_shards(self.norm2(x), self.t, self.log)
        parts = [shard.mlp(h) for shard, h in zip(self.shards, inputs, strict=True)]
        return x + self.down_bias(reduce_from_shards(parts, self.log))


class SimulatedTP(nn.Module):
    """The toy GPT with every block split t ways; same flat ``layers`` list as ``ToyGPT``."""

    def __init__(self, model: ToyGPT, t: int):
        super().__init__()
        check_divisible(model.config, t)
        self.config, self.t, self.log = model.config, t, CommLog()
        first, *blocks, last = model.layers
        self.layers = nn.Sequential(  # a Sequential runs the flat list in order, as ToyGPT.forward does
            copy.deepcopy(first), *(SimulatedTPBlock(b, t, self.log) for b in blocks), copy.deepcopy(last)
        )

    @classmethod
    def from_seed(cls, cfg: ModelConfig, t: int, seed: int = 0) -> SimulatedTP:
        """Shard the very weights ``build_model(cfg, seed)`` makes, so results compare to the reference."""
        check_divisible(cfg, t)  # before building: a bad t is refused without work
        return cls(build_model(cfg, seed), t)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.layers(idx)

    def rank_gradients(self, rank: int) -> dict[str, torch.Tensor]:
        """What rank `rank` would hold: replicated gradients plus its own shards', TP-model names."""
        grads = {}
        for name, p in self.named_parameters():
            if ".shards." not in name:
                grads[name] = p.grad
            elif f".shards.{rank}." in name:
                grads[name.replace(f".shards.{rank}.", ".shard.")] = p.grad
        return grads

    def full_gradients(self) -> dict[str, torch.Tensor]:
        """Gradients re-assembled under the full model's parameter names."""
        return assemble_gradients([self.rank_gradients(r) for r in range(self.t)])
