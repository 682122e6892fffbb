"""TP x PP x DP: where each of t * p * d ranks sits, its process groups, data parallelism's two sums,
and how they widen the distributed engine's pipeline ranks (``MeshRank``).

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

Importing this module adds ``tp=`` and ``dp=`` to ``make_spec`` (``course_lib/shelf/distributed_engine.py``);
a run that asks for t > 1 or d > 1 widens each rank with ``MeshRank``, the pipeline's rank loop
(``course_lib/shelf/rank_loop.py``) unchanged: each stage split across its t TP ranks (``tp/shard.py``),
each replica on its share of every micro-batch, gradients averaged over the replicas once per step.

Try it::

    from course_lib.tp.mesh import Mesh
    mesh = Mesh(t=2, p=2, d=2)
    mesh.coords(5), mesh.pipeline(dp=1, tp=1), mesh.dp_group(stage=0, tp=1)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

import torch
import torch.distributed as dist
from torch import Tensor, nn

from course_lib.shelf import launcher
from course_lib.shelf.distributed_engine import MAX_LOCAL_RANKS, RoomOption, add_room_option
from course_lib.shelf.errors import divisors, require
from course_lib.shelf.p2p import RankComm
from course_lib.shelf.rank_loop import Batch, PipelineRank
from course_lib.shelf.run_spec import DistributedResult, RankRecord, RunSpec
from course_lib.tp.comm import CommLog, DistComm
from course_lib.tp.distributed import tp_layers
from course_lib.tp.shard import assemble_gradients, check_divisible, is_slice


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


class MeshRank(PipelineRank):
    """One rank of t x p x d: its TP slice of its stage, its replica's share of every micro-batch, its
    gradients averaged over the replicas; messages go between matching TP ranks of one replica."""

    def place(self) -> int:
        mesh = self.spec.extras["mesh"]
        if self.shared.get("mesh") != mesh:  # built once per launch, by every rank in the same order
            self.shared.update(mesh=mesh, groups=build_groups(mesh, self.global_rank))
        self.groups: MeshGroups = self.shared["groups"]
        return self.groups.coords.stage

    def layers(self, layers: nn.ModuleList) -> nn.ModuleList:
        t = self.groups.mesh.t
        if t == 1:
            return layers
        comm = DistComm(t, CommLog(enabled=False), group=self.groups.tp)
        return tp_layers(layers, t, self.groups.coords.tp, comm)

    def connect(self, pipelines=None, mine=0, group=None, samples=None) -> RankComm:
        mesh, cfg = self.groups.mesh, self.spec.cfg
        pipes = mesh.pipelines()
        samples = cfg.batch_size // cfg.microbatches // mesh.d
        return super().connect(pipes, pipes.index(self.groups.peers), self.groups.pp, samples)

    def microbatches(self, x: Tensor, y: Tensor) -> Batch:
        return replica_share(super().microbatches(x, y), self.groups.coords.dp, self.groups.mesh.d)

    def sync_gradients(self) -> float:
        if self.groups.mesh.d == 1:
            return 0.0  # one replica: nothing to send
        start = self.comm.now()
        average_gradients(list(self.params.values()), self.groups.dp, self.groups.mesh.d)
        return self.comm.now() - start

    def counts_in_norm(self, name: str) -> bool:
        # replica 0 only (the replicas' gradients are equal once averaged), and a weight every TP rank
        # holds whole only on TP rank 0: the global norm counts each weight of the model once
        where = self.groups.coords
        return where.dp == 0 and (where.tp == 0 or is_slice(name))

    def batch_loss(self, loss: float) -> float:
        return average_loss(loss, self.groups.dp, self.groups.mesh.d, self.device)

    def reports_loss(self) -> bool:
        return self.groups.coords.dp == self.groups.coords.tp == 0

    def record(self, steps, losses) -> RankRecord:
        where = self.groups.coords
        # the whole model's parameters, each counted once: replica 0's, its replicated ones on TP rank 0
        mine = self.params.items()
        counted = [p for n, p in mine if (where.tp == 0 or is_slice(n)) and self.counts_once(n)]
        n_params = sum(p.numel() for p in counted)
        return replace(super().record(steps, losses), n_params=n_params if where.dp == 0 else 0,
                       in_timeline=where.dp == where.tp == 0, coords=tuple(where))  # fmt: skip

    @classmethod
    def merge(cls, records: list[RankRecord], spec: RunSpec, result: DistributedResult) -> DistributedResult:
        """Replica 0's gradients and weights glued back into the full model's, and how far the
        replicas' weights drifted apart."""
        result = super().merge(records, spec, result)
        mesh = spec.extras["mesh"]
        result = replace(result, tp=mesh.t, dp=mesh.d)
        if any(r.grads is None for r in records):
            return result
        records = sorted(records, key=lambda r: r.global_rank)
        return replace(result, grads=_whole_model(records, "grads"), params=_whole_model(records, "params"),
                       replica_weight_diff=_replica_diff(records))  # fmt: skip


def _whole_model(records: list[RankRecord], key: str) -> dict[str, torch.Tensor]:
    """Replica 0's tensors (`key`: "grads" or "params") under the full model's names: each stage's
    TP slices glued back together (``tp.shard.assemble_gradients``)."""
    replica = [r for r in records if Coords(*r.coords).dp == 0]
    whole: dict[str, torch.Tensor] = {}
    for stage in sorted({r.stage for r in replica}):
        slices = [getattr(r, key) for r in sorted(replica, key=lambda r: r.coords) if r.stage == stage]
        whole |= assemble_gradients(slices) if len(slices) > 1 else slices[0]
    return whole


def _replica_diff(records: list[RankRecord]) -> float:
    """Largest |difference| between any replica's weights and replica 0's, slice by slice."""
    first = {r.coords[1:]: r.params for r in records if r.coords[0] == 0}
    diffs = [
        (w - first[r.coords[1:]][name]).abs().max().item()
        for r in records if r.coords[0] > 0 for name, w in r.params.items()
    ]  # fmt: skip
    return max(diffs, default=0.0)


def _widen(spec: RunSpec, given: dict, local_ranks: int | None) -> RunSpec:
    """TP must split the heads and the width (and so the MLP's 4x width) evenly; DP must split every
    micro-batch evenly; and this machine must not be asked for more processes than MAX_LOCAL_RANKS."""
    cfg = spec.cfg
    mesh = Mesh(t=given.get("tp", 1), p=spec.ranks, d=given.get("dp", 1))
    check_divisible(cfg.model_config(vocab_size=2), mesh.t)
    per_mb = cfg.batch_size // cfg.microbatches
    require(
        per_mb % mesh.d == 0,
        f"dp={mesh.d} replicas cannot share a micro-batch of {per_mb} samples (batch_size {cfg.batch_size} / "
        f"{cfg.microbatches} micro-batches) evenly; choose dp among the divisors of {per_mb}: "
        f"{', '.join(map(str, divisors(per_mb)))}",
    )
    local_ranks = local_ranks or mesh.world
    require(
        local_ranks <= MAX_LOCAL_RANKS,
        f"t x p x d = {mesh.t} x {mesh.p} x {mesh.d} = {mesh.world} ranks would start {local_ranks} "
        f"processes on this machine, over the limit of {MAX_LOCAL_RANKS} "
        "(course_lib.shelf.distributed_engine.MAX_LOCAL_RANKS)",
    )
    asked = {name: value for name, value in given.items() if value != 1}
    extras = {**spec.extras, **asked, "mesh": mesh}
    return replace(spec, world=mesh.world, rooms=(MeshRank, *spec.rooms), extras=extras)


add_room_option(RoomOption(("tp", "dp"), {"tp": 1, "dp": 1}, _widen, order=0))
if "course_lib.tp.mesh" not in launcher.PRELOAD:  # a mesh's ranks import this room: once, in the forkserver
    launcher.PRELOAD.append("course_lib.tp.mesh")
