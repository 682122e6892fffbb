"""Lesson 16's experiments: what breaks a real pipeline run, each failure made to happen on the toy and
measured against the reference trainer, then fixed.

    from course_lib.lessons import broken_runs as br
    br.tie_drift(cfg, steps=10)       # tied copies without the gradient sum drift apart; with it, 0.0
    br.stage_clipping(cfg, stages=4)  # per-stage norms against the one global norm, and what each clips to
    br.without_one_over_m(cfg)        # the loss and the gradients m times too large
    br.dropped_blocks(30, 4)          # Megatron-LM #1304's arithmetic: 30 // 4 = 7 blocks a stage, 28 built
    br.hang(cfg, limit_s=3)           # a rank that never answers: rank, operation, peer and seconds named

Every number here is measured on this machine (the local engine, the reference trainer, or real
processes for the hang); nothing is simulated.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace

import torch

from course_lib.engines.faults import Fault
from course_lib.shelf.distributed_engine import DistributedError, run_distributed
from course_lib.shelf.local_engine import LocalPipelineTrainer
from course_lib.shelf.model import count_parameters, lm_loss, split_microbatches
from course_lib.shelf.reference import (
    TrainConfig,
    clip_coefficient,
    corpus_and_model,
    first_batch,
    max_grad_diff,
    named_grads,
    reference_gradients,
    reference_run,
    squared_norm,
)


def tied_drift(embedding: torch.nn.Parameter, head: torch.nn.Parameter) -> float:
    """Largest |difference| between a tied embedding's two copies (0.0 while the gradient sum of
    ``reference.sum_tied_grads`` keeps them equal)."""
    return (embedding.detach().cpu() - head.detach().cpu()).abs().max().item()


@dataclass(frozen=True)
class TieOutcome:
    summed: bool  # were the two copies' gradients summed after each flush?
    drift: float  # largest |embedding - head copy| after training
    loss_gap: float  # largest |loss - the reference's| over the steps


def tie_drift(cfg: TrainConfig, steps: int = 10, stages: int = 2) -> list[TieOutcome]:
    """Train tied embeddings on the local engine without and with the copies' gradient sum, each
    against the reference trainer (one tied weight) on the same batches."""
    cfg = replace(cfg, steps=steps, tie_embeddings=True)
    want = reference_run(cfg)[0]
    out = []
    for summed in (False, True):
        trainer = LocalPipelineTrainer(cfg, "1f1b", stages)
        trainer.sum_tied = summed
        got = trainer.train(progress=False).losses
        layers = trainer.model.layers
        out.append(TieOutcome(summed, tied_drift(layers[0].token.weight, layers[-1].out.weight),
                              max(abs(a - b) for a, b in zip(got, want, strict=True))))  # fmt: skip
    return out


@dataclass(frozen=True)
class ClipOutcome:
    stage_norms: list[float]  # each stage's own gradient norm
    global_norm: float  # the whole model's: sqrt of the sum of their squares
    stage_factors: list[float]  # what clipping each stage by its own norm multiplies it by
    global_factor: float  # what the global clip multiplies every stage by
    per_stage_diff: float  # largest |gradient - the reference's clipped gradient|, per-stage clipping
    global_diff: float  # the same for the engine's global clipping
    per_stage_cosine: float  # cosine between the per-stage-clipped gradient and the reference's


def stage_clipping(cfg: TrainConfig, stages: int = 4, max_norm: float = 0.25) -> ClipOutcome:
    """One batch's gradients on the local engine, clipped per stage (each stage by its own norm: the
    bug) and globally (the engine's rule), both against the reference's torch.nn.utils.clip_grad_norm_."""
    clipped = replace(cfg, clip_grad_norm=max_norm, tie_embeddings=False)
    _, want = reference_gradients(clipped)
    trainer = LocalPipelineTrainer(replace(clipped, clip_grad_norm=None), "1f1b", stages)
    trainer.compute_gradients(*first_batch(trainer.corpus, cfg))  # no clipping yet
    squares = [squared_norm(p.grad for p in module.parameters()) for module in trainer.stage_modules]
    factors = [clip_coefficient(sq, max_norm) for sq in squares]
    per_stage = {}
    for module, factor, (start, _end) in zip(trainer.stage_modules, factors, trainer.plan.partition.bounds,
                                             strict=True):  # fmt: skip
        for name, p in module.named_parameters():
            index, rest = name.split(".", 1)
            per_stage[f"layers.{start + int(index)}.{rest}"] = p.grad * factor
    flat = lambda grads: torch.cat([grads[n].reshape(-1) for n in sorted(want)])  # noqa: E731
    cosine = torch.nn.functional.cosine_similarity(flat(per_stage), flat(want), dim=0).item()
    global_trainer = LocalPipelineTrainer(clipped, "1f1b", stages)
    return ClipOutcome(
        stage_norms=[math.sqrt(sq) for sq in squares], global_norm=math.sqrt(sum(squares)),
        stage_factors=factors, global_factor=clip_coefficient(sum(squares), max_norm),
        per_stage_diff=max_grad_diff(per_stage, want),
        global_diff=global_trainer.max_grad_diff_vs_reference(),
        per_stage_cosine=cosine,
    )  # fmt: skip


@dataclass(frozen=True)
class ScaleOutcome:
    m: int
    loss_ratio: float  # reported loss / the reference's
    grad_ratio: float  # gradient norm / the reference's


def without_one_over_m(cfg: TrainConfig) -> ScaleOutcome:
    """m micro-batches whose losses are summed without the 1/m: the loss and every gradient m times
    the batch mean's (the reference divides each micro-batch's loss by m)."""
    corpus, model = corpus_and_model(cfg)
    x, y = first_batch(corpus, cfg)
    total = 0.0
    for xm, ym in split_microbatches(x, y, cfg.microbatches):
        loss = lm_loss(model(xm), ym)  # the bug: no / m
        loss.backward()
        total += loss.item()
    ref_loss, want = reference_gradients(cfg, corpus)
    norm = lambda grads: math.sqrt(squared_norm(grads.values()))  # noqa: E731
    return ScaleOutcome(cfg.microbatches, total / ref_loss, norm(named_grads(model)) / norm(want))


@dataclass(frozen=True)
class DroppedBlocks:
    blocks: int  # the model's
    per_stage: int  # blocks // p: what a floor division gives each stage
    built: int  # what the p stages hold between them
    params_built: int
    params_model: int


def dropped_blocks(blocks: int, p: int, cfg: TrainConfig | None = None) -> DroppedBlocks:
    """Megatron-LM issue #1304's arithmetic: each of p stages builds blocks // p blocks, so blocks % p
    are never built; the parameters of the model that trains against the one that was asked for."""
    cfg = cfg or TrainConfig(n_layers=blocks, d_model=16, n_heads=2, seq_len=16)
    per = blocks // p
    counted = [count_parameters(corpus_and_model(replace(cfg, n_layers=n))[1]) for n in (per * p, blocks)]
    return DroppedBlocks(blocks, per, per * p, *counted)


@dataclass(frozen=True)
class HangReport:
    message: str  # what the run raised
    failed_rank: int | None  # the rank named as the cause
    elapsed_s: float  # from the call to the error, start-up included


def hang(cfg: TrainConfig, limit_s: float = 3.0, rank: int = 1) -> HangReport:
    """A 2-rank 1F1B run whose rank `rank` stops before its second action and never sends: its peer
    waits in a receive until `limit_s` passes, and the run fails naming who waited on whom."""
    start = time.perf_counter()
    try:
        fault = Fault(rank=rank, how="hang")
        run_distributed(replace(cfg, steps=1), "1f1b", 2, fault=fault, timeout_s=limit_s, threads=1)
    except DistributedError as err:
        return HangReport(str(err), err.failed_rank, time.perf_counter() - start)
    raise AssertionError("the run finished although a rank hung")  # the fault always fires at step 0
