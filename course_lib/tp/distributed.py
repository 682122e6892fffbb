"""Tensor parallelism for real: one process per rank, torch.distributed all-reduces between them.

Each rank builds the full model from the same seed, keeps only its slice of every block (see
``shard``) and runs the ordinary training step; the f / g operators of ``comm`` issue the real
collectives (gloo on the CPU, NCCL when there is one GPU per rank) and log every one. An optional delay
before each all-reduce stands in for a slower link, so the cost model can be checked against a clock.

    from course_lib.shelf.model import ModelConfig
    from course_lib.tp.distributed import run_tensor_parallel
    res = run_tensor_parallel(ModelConfig(n_layers=4), t=2, x=x, y=y, microbatches=2)
    res.loss, res.gradients, res.step_log.summary(), res.timings

The ranks are spawned by the course's one launcher (``course_lib.shelf.launcher``): every wait has a
timeout, and a rank that fails raises DistributedError in the caller, naming the rank and its error.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from course_lib.network import ring_all_reduce_s
from course_lib.shelf.costs import Link
from course_lib.shelf.errors import require
from course_lib.shelf.launcher import RankContext, spawn
from course_lib.shelf.model import Block, ModelConfig, build_model
from course_lib.shelf.reference import accumulate_gradients
from course_lib.shelf.stage import gpu_count
from course_lib.tp.comm import CommLog, DistComm, copy_to_ranks, reduce_from_ranks
from course_lib.tp.shard import Bias, assemble_gradients, check_divisible, shard_block


class RankBlock(nn.Module):
    """One rank's part of a block: f, its heads, g, then f, its MLP units, g."""

    def __init__(self, block: Block, t: int, rank: int, comm: DistComm):
        super().__init__()
        self.comm = comm
        self.norm1 = copy.deepcopy(block.norm1)
        self.norm2 = copy.deepcopy(block.norm2)
        self.shard = shard_block(block, t, rank)
        self.proj_bias = Bias(block.attn.proj.bias)
        self.down_bias = Bias(block.mlp.down.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = copy_to_ranks(self.norm1(x), self.comm)
        x = x + self.proj_bias(reduce_from_ranks(self.shard.attention(h), self.comm))
        h = copy_to_ranks(self.norm2(x), self.comm)
        return x + self.down_bias(reduce_from_ranks(self.shard.mlp(h), self.comm))


def tp_layers(layers: Sequence[nn.Module], t: int, rank: int, comm: DistComm) -> nn.ModuleList:
    """The model's flat list of layers as rank `rank` of t holds it: every Block split (``RankBlock``,
    talking over `comm`), the rest (embedding, head) replicated. The TP-only runs here and the
    distributed pipeline engine (one pipeline stage = a slice of this list) both build it."""
    split = [RankBlock(x, t, rank, comm) if isinstance(x, Block) else copy.deepcopy(x) for x in layers]
    return nn.ModuleList(split)


class RankModel(nn.Module):
    def __init__(self, cfg: ModelConfig, t: int, rank: int, seed: int, comm: DistComm):
        super().__init__()
        self.layers = tp_layers(build_model(cfg, seed).layers, t, rank, comm)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            idx = layer(idx)
        return idx


@dataclass
class TPJob:
    cfg: ModelConfig
    t: int
    x: torch.Tensor
    y: torch.Tensor
    microbatches: int = 1
    seed: int = 0
    backend: str = "gloo"
    alphas_s: tuple[float, ...] = ()  # per-hop latencies to inject; each all-reduce waits 2(t-1)*alpha
    repeats: int = 5
    warmup: int = 1
    prompt_len: int = 8  # context for the "one generated token" count


@dataclass
class TPRunResult:
    t: int
    backend: str
    loss: float
    gradients: dict[str, torch.Tensor]
    step_log: CommLog  # one training step (m micro-batches), rank 0
    token_log: CommLog  # one generated token (a forward pass over the prompt), rank 0
    timings: dict[float, list[float]] = field(default_factory=dict)  # alpha -> step times (s), rank 0
    logs_agree: bool = True  # every rank issued the same collectives


def _timed_steps(model: RankModel, job: TPJob, comm: DistComm, device: torch.device) -> dict[float, list]:
    """Step times on this rank for each injected latency; a barrier lines the ranks up before each."""
    x, y = job.x.to(device), job.y.to(device)
    timings = {}
    comm.log.enabled = False
    for alpha in job.alphas_s:
        comm.delay_s = ring_all_reduce_s(0, job.t, Link(latency_s=alpha))  # a ring's latency term alone
        times = []
        for i in range(job.warmup + job.repeats):
            model.zero_grad(set_to_none=True)
            dist.barrier()
            start = time.perf_counter()
            accumulate_gradients(model, x, y, job.microbatches)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            if i >= job.warmup:
                times.append(time.perf_counter() - start)
        timings[alpha] = times
    comm.delay_s = 0.0
    return timings


def _rank(ctx: RankContext, job: TPJob) -> dict:
    """One spawned rank: a training step (its collectives logged), one generated token, timed steps."""
    torch.set_num_threads(1)  # ranks share the machine's cores; one thread each avoids thrashing
    comm = DistComm(job.t)
    model = RankModel(job.cfg, job.t, ctx.rank, job.seed, comm).to(ctx.device)
    loss = accumulate_gradients(model, job.x.to(ctx.device), job.y.to(ctx.device), job.microbatches)
    step = list(comm.log.events)
    grads = {n: p.grad.detach().cpu() for n, p in model.named_parameters()}
    comm.log.clear()
    with torch.no_grad():
        model(job.x[:1, : job.prompt_len].to(ctx.device))  # logits of the next token
    token = list(comm.log.events)
    timings = _timed_steps(model, job, comm, ctx.device)
    return {"loss": loss, "grads": grads, "step": step, "token": token, "timings": timings}


def choose_backend(t: int, backend: str = "auto") -> str:
    """'auto': NCCL when there is one GPU per rank, else gloo on the CPU."""
    require(backend in ("auto", "gloo", "nccl"), f"backend must be auto, gloo or nccl, got {backend!r}")
    if backend == "auto":
        return "nccl" if gpu_count() >= t else "gloo"
    require(backend != "nccl" or gpu_count() >= t, f"nccl needs {t} GPUs (one per rank), found {gpu_count()}")
    return backend


def run_tensor_parallel(
    cfg: ModelConfig, t: int, x: torch.Tensor, y: torch.Tensor, microbatches: int = 1, seed: int = 0,
    backend: str = "auto", alphas_s: tuple[float, ...] = (), repeats: int = 5, prompt_len: int = 8,
    timeout_s: float = 60.0,
) -> TPRunResult:  # fmt: skip
    """Spawn t ranks, run one training step (plus timed steps for each alpha), gather everything.
    A rank that fails raises DistributedError naming it; `timeout_s` bounds every wait for a peer."""
    check_divisible(cfg, t)
    job = TPJob(
        cfg, t, x, y, microbatches, seed, choose_backend(t, backend), tuple(alphas_s), repeats,
        prompt_len=prompt_len,
    )  # fmt: skip
    got = spawn(_rank, t, (job,), backend=job.backend, timeout_s=timeout_s)
    first = got[0]  # rank 0's logs and times; every rank's gradient slices, glued into full tensors
    return TPRunResult(
        t=t, backend=job.backend, loss=first["loss"], gradients=assemble_gradients([g["grads"] for g in got]),
        step_log=CommLog(first["step"]), token_log=CommLog(first["token"]), timings=first["timings"],
        logs_agree=all(g["step"] == first["step"] and g["token"] == first["token"] for g in got),
    )  # fmt: skip


def noise(times: list[float]) -> float:
    """Spread of repeated measurements: the sample standard deviation (0 for fewer than two)."""
    return float(np.std(times, ddof=1)) if len(times) > 1 else 0.0
