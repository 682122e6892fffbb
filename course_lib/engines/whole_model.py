"""The whole model's gradient rules across pipeline ranks: a tied embedding's two copies summed, one
clipping norm over every rank (the rules ``course_lib/shelf/reference.py`` defines, lesson 16).

A room beside the rank loop (``course_lib/shelf/rank_loop.py``): a run whose config ties the embeddings
(``tie_embeddings=True``) or clips the gradient norm (``clip_grad_norm``) takes ``WholeModelRank`` among
its rooms, which fills the rank's door ``finish_gradients``. Importing this module (``course_lib.engines``
does, so ``course_lib.lesson``, the command line and torchrun load it) adds it to ``make_spec``; without
it such a run is refused before any process starts, never trained with copies that drift apart or
stages clipped each by its own norm. (The local engine applies the same rules in its one process:
``LocalPipelineTrainer.finish_gradients``.)

- **Tied copies.** The first stage holds the embedding, the last stage its copy (the head). After the
  flush each copy's gradient becomes the sum of both: one add when one rank holds both (a V shape's
  rank 0), else an all-reduce over the two ranks' group (Megatron's "embedding group", made by every
  rank for every pipeline, in the same order, as torch requires).
- **One norm.** Each rank adds the squares of its gradients (the tied copy counted once, and with TP x
  PP x DP each weight of the model once: ``counts_in_norm``), one all-reduce sums them, and every rank
  scales by the same ``clip_coefficient``.
"""

from __future__ import annotations

from dataclasses import replace

import torch
import torch.distributed as dist

from course_lib.shelf.distributed_engine import RoomOption, add_room_option
from course_lib.shelf.rank_loop import PipelineRank
from course_lib.shelf.reference import (
    EMBEDDING_WEIGHT,
    clip_coefficient,
    head_weight,
    scale_grads,
    squared_norm,
    sum_tied_grads,
)
from course_lib.shelf.run_spec import RunSpec


class WholeModelRank(PipelineRank):
    """A pipeline rank that sums the tied copies and clips by the whole model's norm (the module doc)."""

    def connect(self, *args, **kwargs):
        comm = super().connect(*args, **kwargs)
        self.tied = self.tie_group()  # after the pipelines are known; every rank in the same order
        return comm

    def tie_group(self) -> object:
        """With tied embeddings on two ranks, the group of the ranks that hold stage 0 and the last stage
        of this rank's pipeline (Megatron's embedding group; every rank creates every pipeline's, in the
        same order, as torch requires); None when one rank holds both, or this rank neither."""
        sched = self.schedule
        first, last = sched.device_of(0), sched.device_of(sched.n_stages - 1)
        if not self.spec.cfg.tie_embeddings or first == last:
            return None
        mine = None
        for k, pipe in enumerate(self.pipelines):
            group = dist.new_group([pipe[first], pipe[last]])
            if k == self.pipeline_index and self.index in (first, last):
                mine = group
        return mine

    def finish_gradients(self) -> float:
        """After the flush, before the optimizer: the tied copies' gradients summed (one add on one rank,
        an all-reduce between two), then every gradient scaled by the whole model's clipping factor (each
        rank's squares added over every rank); seconds it took."""
        cfg, start = self.spec.cfg, self.comm.now()
        copy = head_weight(cfg.n_layers) if cfg.tie_embeddings else None
        if cfg.tie_embeddings:
            embedding, head = self.params.get(EMBEDDING_WEIGHT), self.params.get(copy)
            if embedding is not None and head is not None:
                sum_tied_grads(embedding, head)
            elif self.tied is not None:
                dist.all_reduce((embedding if embedding is not None else head).grad, group=self.tied)
        if cfg.clip_grad_norm is not None:
            counted = [p.grad for n, p in self.params.items() if n != copy and self.counts_in_norm(n)]
            mine = squared_norm(counted)
            total = torch.tensor([mine], dtype=torch.float64, device=self.device)
            dist.all_reduce(total)  # every rank: the whole model's squares
            scale_grads(self.params.values(), clip_coefficient(total.item(), cfg.clip_grad_norm))
        return self.comm.now() - start


def _widen(spec: RunSpec, given: dict, local_ranks: int | None) -> RunSpec:
    return replace(spec, rooms=(*spec.rooms, WholeModelRank))


IDLE = {"tie_embeddings": False, "clip_grad_norm": None}  # the config's defaults: nothing asked of the room
add_room_option(RoomOption(tuple(IDLE), IDLE, _widen))
