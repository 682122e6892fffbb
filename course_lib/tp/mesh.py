"""TP x PP x DP: where each of t * p * d ranks sits, its process groups, and data parallelism's two sums.

Megatron-LM's layout (Narayanan et al. 2021, section 3): tensor-parallel ranks are neighbours (on a
GPU server they share NVLink), then pipeline stages, then data-parallel replicas::

    rank = (dp * p + stage) * t + tp

so the t ranks of one stage of one replica are consecutive, and the pipeline of replica `dp` and TP
index `tp` is ``[rank(dp, s, tp) for s in range(p)]``: its messages go between matching TP ranks.

Groups (``torch.distributed.new_group``, built once per run, by every rank in the same order):

- TP: the t ranks of one stage of one replica; the f / g all-reduces of ``tp.comm`` use it;
- PP: the p ranks of one pipeline; the stage-to-stage messages go over it;
- DP: the d ranks holding the same slice of the same stage, one per replica; gradients are averaged
  over it once per step, before the optimizer (``average_gradients``).

Try it::

    from course_lib.tp.mesh import Mesh
    mesh = Mesh(t=2, p=2, d=2)
    mesh.coords(5), mesh.pipeline(dp=1, tp=1), mesh.dp_group(stage=0, tp=1)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.distributed as dist
from torch import Tensor

from course_lib.shelf.errors import require


class Coords(NamedTuple):
    dp: int  # which replica
    stage: int  # which pipeline rank (device of the schedule)
    tp: int  # which slice of the stage


@dataclass(frozen=True)
class Mesh:
    """t tensor-parallel x p pipeline x d data-parallel ranks (Megatron's order, see the module doc)."""

    t: int = 1
    p: int = 1
    d: int = 1

    def __post_init__(self) -> None:
        for name in ("t", "p", "d"):
            value = getattr(self, name)
            require(
                isinstance(value, int) and not isinstance(value, bool) and value >= 1,
                f"{name} must be a whole number >= 1, got {value!r}",
            )

    @property
    def world(self) -> int:
        return self.t * self.p * self.d

    def rank(self, dp: int, stage: int, tp: int) -> int:
        return (dp * self.p + stage) * self.t + tp

    def coords(self, rank: int) -> Coords:
        require(0 <= rank < self.world, f"rank must be in 0..{self.world - 1}, got {rank}")
        return Coords(rank // (self.p * self.t), rank // self.t % self.p, rank % self.t)

    def pipeline(self, dp: int, tp: int) -> list[int]:
        """The ranks of one pipeline, stage by stage."""
        return [self.rank(dp, s, tp) for s in range(self.p)]

    def tp_group(self, dp: int, stage: int) -> list[int]:
        return [self.rank(dp, stage, k) for k in range(self.t)]

    def dp_group(self, stage: int, tp: int) -> list[int]:
        return [self.rank(k, stage, tp) for k in range(self.d)]

    def pipelines(self) -> list[list[int]]:
        """Every pipeline, in the order every rank creates their groups."""
        return [self.pipeline(dp, tp) for dp in range(self.d) for tp in range(self.t)]


@dataclass(frozen=True)
class MeshGroups:
    """One rank's process groups; None where the dimension has size 1 (nothing to talk to) or, for PP,
    where the pipeline is the whole world (the default group serves)."""

    mesh: Mesh
    coords: Coords
    tp: object = None
    pp: object = None
    dp: object = None

    @property
    def peers(self) -> list[int]:
        """The global rank of each stage of this rank's pipeline."""
        return self.mesh.pipeline(self.coords.dp, self.coords.tp)


def build_groups(mesh: Mesh, rank: int) -> MeshGroups:
    """Create every TP, PP and DP group (every rank must call this, in the same order) and keep this
    rank's. With t = d = 1 nothing is created: the pipeline engine runs as without a mesh."""
    me = mesh.coords(rank)
    mine: dict[str, object] = {}
    kinds = (
        ("tp", mesh.t, [mesh.tp_group(dp, s) for dp in range(mesh.d) for s in range(mesh.p)]),
        ("pp", mesh.p if mesh.world > mesh.p else 1, mesh.pipelines()),
        ("dp", mesh.d, [mesh.dp_group(s, k) for s in range(mesh.p) for k in range(mesh.t)]),
    )
    for kind, size, groups in kinds:
        if size == 1:
            continue
        for ranks in groups:
            group = dist.new_group(ranks)
            if rank in ranks:
                mine[kind] = group
    return MeshGroups(mesh, me, **mine)


def replica_share(batch: list[tuple[Tensor, Tensor]], dp: int, d: int) -> list[tuple[Tensor, Tensor]]:
    """Replica `dp`'s share of every micro-batch: the dp-th of d equal slices of its samples. Each
    replica's loss is then the mean over its slices, and the average over replicas the batch's mean
    (every slice holds as many tokens), so averaged gradients are the single-device trainer's."""
    if d == 1:
        return batch
    return [(x.chunk(d)[dp], y.chunk(d)[dp]) for x, y in batch]


def average_gradients(params: list[torch.nn.Parameter], group: object, d: int) -> None:
    """Average `params`' gradients over the d replicas of `group`: one all-reduce of one flat buffer
    (as PyTorch DDP does with its buckets, here a single bucket), divided by d."""
    if d == 1:
        return
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, group=group)
    flat /= d
    offset = 0
    for p, g in zip(params, grads, strict=True):
        p.grad = flat[offset : offset + g.numel()].view_as(g).clone()
        offset += g.numel()


def average_loss(loss: float, group: object, d: int, device: torch.device) -> float:
    """The batch's loss from the d replicas' losses (each the mean over its share)."""
    if d == 1:
        return loss
    total = torch.tensor([loss], dtype=torch.float64, device=device)
    dist.all_reduce(total, group=group)
    return total.item() / d
