"""The instructor's ranks that run beside a student's rank (assignment a04c): 1F1B, observing every message.

``course_lib/lessons/own_rank.py`` runs this file's ``observing_one_f_one_b`` on the ranks the grader keeps
for itself (``run_own_pipeline(..., peers={rank: (this file, "observing_one_f_one_b")})``), each in a process
that student code never touched: forked from the launcher's server, which imported only torch and the
shelf, it loads this file and no other. The student's rank is its neighbour. Every activation or gradient
that arrives here is compared with what 1F1B sends at that point, computed from the seed on the whole
model (the same weights and micro-batches the run uses); each comparison is noted in ``rank.observed`` as
``"<activation|gradient> <from rank> <micro-batch> <ok|differs>"``, and goes back to the grader with this
rank's result, not through the student's process, sealed with the key only this rank received
(``finish``: ``sealed_ranks.seal_report``). Nothing of this file is in the student's library.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from course_grading.sealed_ranks import seal_report
from course_lib.shelf.model import lm_loss, stage_modules, uniform
from course_lib.shelf.reference import corpus_and_model

TOLERANCE = dict(rtol=1e-4, atol=1e-6)  # float32 sums in another order


def _expected(rank) -> list[tuple[torch.Tensor | None, torch.Tensor | None]]:
    """What 1F1B sends this stage for each micro-batch: its input activation (from prev) and the gradient
    of its output (from next), from a fresh copy of the seeded model."""
    _, model = corpus_and_model(rank.cfg)
    stages = stage_modules(model.layers, uniform(len(model.layers), rank.p))
    found = []
    for i in range(rank.m):
        h = rank.tokens(i)
        with torch.no_grad():
            for s in range(rank.stage):
                h = stages[s](h)
            out = None if rank.is_last else stages[rank.stage](h)
        activation, grad = (None if rank.is_first else h.clone()), None
        if out is not None:
            y = out.requires_grad_(True)
            for s in range(rank.stage + 1, rank.p):
                y = stages[s](y)
            (lm_loss(y, rank.targets(i)) / rank.m).backward()
            grad = out.grad
        found.append((activation, grad))
    return found


_EXPECTED: list = []  # this process's expected messages, made by prepare before any rank starts


def prepare(rank) -> None:
    """Before the ranks start (the harness calls it, ``fn.prepare``): what will arrive, so that the
    student's rank never waits on this rank's arithmetic (and a short stall limit stays fair)."""
    _EXPECTED[:] = _expected(rank)


def observing_one_f_one_b(rank) -> None:
    """1F1B for one rank (isend, blocking recv, sends waited at the end), noting what arrives."""
    expected = _EXPECTED or _expected(rank)
    warmup = min(rank.p - rank.stage - 1, rank.m)
    outputs, sends = {}, []

    def receive(src: int, kind: str, i: int) -> torch.Tensor:
        buf = torch.empty(rank.shape, dtype=rank.dtype, device=rank.device)
        dist.recv(buf, src=src)
        want = expected[i][0 if kind == "activation" else 1]
        same = torch.allclose(buf.cpu(), want, **TOLERANCE)
        rank.observed.append(f"{kind} {src} {i} {'ok' if same else 'differs'}")
        return buf

    def forward(i: int) -> None:
        x = rank.tokens(i) if rank.is_first else receive(rank.prev, "activation", i)
        y = rank.forward(i, x)
        if rank.is_last:
            outputs[i] = rank.loss_fn(y, rank.targets(i)) / rank.m
        else:
            sends.append(dist.isend(y.detach(), dst=rank.next))
            outputs[i] = y

    def backward(i: int) -> None:
        dy = None if rank.is_last else receive(rank.next, "gradient", i)
        dx = rank.backward(i, outputs.pop(i), dy)
        if not rank.is_first:
            sends.append(dist.isend(dx, dst=rank.prev))

    for i in range(warmup):
        forward(i)
    for i in range(rank.m - warmup):
        forward(warmup + i)
        backward(i)
    for i in range(rank.m - warmup, rank.m):
        backward(i)
    for work in sends:
        work.wait()


observing_one_f_one_b.prepare = prepare
observing_one_f_one_b.finish = seal_report
