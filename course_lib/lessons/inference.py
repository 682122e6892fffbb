"""Lesson 15's schedules and closed forms: a pipeline that only runs forward (serving a model).

Inference has no backward and no optimizer step, so there is nothing to flush: the weights never change
and batch after batch can stream through. Two phases of serving a language model use a pipeline
differently:

* **prefill** (the prompt, all its tokens at once) is a forward pass like training's: m micro-batches
  pipeline over p stages, the schedule ``forward_only(p, m)``;
* **decode** makes one token at a time per sequence, and token k + 1 of a sequence needs token k to have
  left the last stage: each token is a full lap of the p stages and p hops (the sampled token goes back
  to stage 0). ``decode(p, m, tokens)`` writes that as a schedule with one stage per (token, device), stage
  k * p + s on device s, as interleaving places stages: the simulator then runs it with no new rule.

Both run through the library's simulator; ``lap_makespan`` is the closed form of both (tokens = 1 is
prefill), and ``measured_forward_costs`` times each stage of the real toy in CPU time under no_grad::

    from course_lib.lessons.inference import decode, forward_only, lap_makespan
    from course_lib.shelf.simulator import simulate
    tl = simulate(forward_only(4, 8), StageCosts.fused(1.0, 0.0))
    tl.makespan == lap_makespan(4, 8, 1, t_f=1.0, hop_s=0.0)   # (m + p - 1) t_f
"""

from __future__ import annotations

import time

import torch
from torch import Tensor, nn

from course_lib.shelf.costs import StageCosts
from course_lib.shelf.errors import require
from course_lib.shelf.first_schedules import check_sizes
from course_lib.shelf.model import ModelConfig, build_model, uniform
from course_lib.shelf.schedule import Action, Kind, Schedule
from course_lib.shelf.timeline import Timeline


def forward_only(p: int, m: int) -> Schedule:
    """Each device runs its stage's forward for micro-batches 0..m-1, in order; no backward."""
    check_sizes(p, m)
    orders = [[Action(d, Kind.F, j) for j in range(m)] for d in range(p)]
    return Schedule("forward-only", p, m, orders, list(range(p)), forward_only=True)


def decode(p: int, m: int, tokens: int) -> Schedule:
    """`tokens` decode steps for m sequences (the micro-batches) on p devices: stage k * p + s (token k on
    device s) on device s; each device runs token 0 of every sequence, then token 1, and so on."""
    check_sizes(p, m)
    require(isinstance(tokens, int) and tokens >= 1, f"tokens must be a whole number >= 1, got {tokens!r}")
    orders = [[Action(k * p + d, Kind.F, j) for k in range(tokens) for j in range(m)] for d in range(p)]
    return Schedule("decode", p * tokens, m, orders, [s % p for s in range(p * tokens)], forward_only=True)


def lap_makespan(p: int, m: int, tokens: int, t_f: float, hop_s: float) -> float:
    """Closed form of ``decode``'s makespan (tokens = 1: ``forward_only``'s), equal stages of t_f, each hop
    between devices hop_s (latency only; bandwidth-free). The longer of two chains: device-bound, m
    sequences back to back on a device for every token plus one pass down the pipe; lap-bound, one sequence
    going round `tokens` times (p stages and p hops a lap, p - 1 on the last), behind the m - 1 before it."""
    require(t_f >= 0 and hop_s >= 0, f"t_f and hop_s must be >= 0, got {t_f}, {hop_s}")
    hop = hop_s if p > 1 else 0.0  # one device: nothing crosses
    device_bound = tokens * m * t_f + (p - 1) * (t_f + hop)
    lap_bound = (m - 1) * t_f + (tokens - 1) * p * (t_f + hop) + p * t_f + (p - 1) * hop
    return max(device_bound, lap_bound)


def request_latencies(tl: Timeline) -> list[float]:
    """Per micro-batch (request): when its last forward on the last stage ended, all having arrived at 0."""
    last = max(span.action.stage for span in tl.spans)
    done = {span.action.microbatch: span.end for span in tl.spans if span.action.stage == last}
    return [done[j] - tl.start for j in sorted(done)]


def _stages(cfg: ModelConfig, p: int, seed: int) -> list[nn.Module]:
    layers = build_model(cfg, seed=seed).layers
    require(p <= len(layers), f"{p} stages need at least {p} layers; the model has {len(layers)}")
    return [nn.Sequential(*layers[a:b]) for a, b in uniform(len(layers), p).bounds]


@torch.no_grad()
def pipelined_logits(cfg: ModelConfig, p: int, x: Tensor, m: int, seed: int = 0) -> Tensor:
    """The toy's logits for token ids `x`, computed stage by stage on m micro-batches (what a forward-only
    pipeline computes), concatenated back: equal to the whole model's."""
    stages = _stages(cfg, p, seed)
    outs = []
    for xm in x.chunk(m):
        for stage in stages:
            xm = stage(xm)
        outs.append(xm)
    return torch.cat(outs)


@torch.no_grad()
def measured_forward_costs(
    cfg: ModelConfig, p: int, batch: int = 1, repeats: int = 5, seed: int = 0
) -> StageCosts:  # fmt: skip
    """Each stage's forward of one micro-batch of `batch` sequences under no_grad, median CPU seconds of
    `repeats` (the stages taking turns), as fused StageCosts with no backward."""
    require(batch >= 1 and repeats >= 1, f"batch and repeats must be >= 1, got {batch}, {repeats}")
    stages = _stages(cfg, p, seed)
    gen = torch.Generator().manual_seed(seed)
    h = torch.randint(0, cfg.vocab_size, (batch, cfg.seq_len), generator=gen)
    inputs = []
    for stage in stages:  # each stage's real input; one pass also warms every stage up
        inputs.append(h)
        h = stage(h)
    times: list[list[float]] = [[] for _ in stages]
    for _ in range(repeats):
        for s, stage in enumerate(stages):
            start = time.thread_time()
            stage(inputs[s])
            times[s].append(time.thread_time() - start)
    return StageCosts.fused([sorted(t)[len(t) // 2] for t in times], 0.0)
