"""The two conjugate operators of Megatron TP, and a log that counts every collective they issue.

``f`` sits where a block's input enters the split layers: identity in the forward pass, all-reduce of
the input gradient in the backward pass. ``g`` sits where the partial outputs leave: all-reduce in the
forward pass, identity in the backward pass. Per block: f and g around attention, f and g around the
MLP, so 2 all-reduces forward and 2 backward (Shoeybi et al. 2019, fig. 3).

Two flavours share the same log:

- simulated (``copy_to_shards`` / ``reduce_from_shards``): t shards in one process, the all-reduce is a
  sum over a Python list;
- distributed (``DistComm``): a real ``torch.distributed.all_reduce`` per call, optionally preceded by
  an injected delay that stands in for link latency.

    log = CommLog()
    ...run a step...
    log.summary()     # {'all_reduce/forward': 8, 'all_reduce/backward': 8, 'bytes': ..., 'sizes': {...}}
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class CommEvent:
    op: str  # "all_reduce" (TP) or "send" (PP boundary)
    phase: str  # "forward" or "backward"
    numel: int
    nbytes: int  # payload of the message (what one rank contributes)


@dataclass
class CommLog:
    """Every collective or message, in the order issued. `enabled=False` stops recording."""

    events: list[CommEvent] = field(default_factory=list)
    enabled: bool = True

    def record(self, op: str, phase: str, tensor: torch.Tensor) -> None:
        self.add(op, phase, tensor.numel(), tensor.numel() * tensor.element_size())

    def add(self, op: str, phase: str, numel: int, nbytes: int) -> None:
        if self.enabled:
            self.events.append(CommEvent(op, phase, numel, nbytes))

    def clear(self) -> None:
        self.events.clear()

    def count(self, op: str | None = None, phase: str | None = None) -> int:
        return sum(1 for e in self.events if op in (None, e.op) and phase in (None, e.phase))

    @property
    def nbytes(self) -> int:
        return sum(e.nbytes for e in self.events)

    def sizes(self) -> dict[int, int]:
        """Message size in bytes -> how many messages of that size."""
        return dict(Counter(e.nbytes for e in self.events))

    def summary(self) -> dict[str, object]:
        counts = dict(sorted(Counter(f"{e.op}/{e.phase}" for e in self.events).items()))
        return {**counts, "messages": len(self.events), "bytes": self.nbytes, "sizes": self.sizes()}


# --- simulated: t shards in one process ------------------------------------------------------------


class _CopyToShards(torch.autograd.Function):
    """f: hand the same input to every shard; backward sums the shards' input gradients (all-reduce)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, t: int, log: CommLog):
        ctx.log = log
        return tuple(x.clone() for _ in range(t))

    @staticmethod
    def backward(ctx, *grads: torch.Tensor):
        ctx.log.record("all_reduce", "backward", grads[0])
        return torch.stack(grads).sum(0), None, None


class _ReduceFromShards(torch.autograd.Function):
    """g: add the shards' partial outputs (all-reduce); backward hands the gradient to each unchanged."""

    @staticmethod
    def forward(ctx, log: CommLog, *parts: torch.Tensor):
        ctx.t = len(parts)
        total = torch.stack(parts).sum(0)
        log.record("all_reduce", "forward", total)
        return total

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return (None, *(grad for _ in range(ctx.t)))


# With one shard there is nothing to talk to: Megatron skips the collective, so do we (and count none).
def copy_to_shards(x: torch.Tensor, t: int, log: CommLog) -> tuple[torch.Tensor, ...]:
    return (x,) if t == 1 else _CopyToShards.apply(x, t, log)


def reduce_from_shards(parts: list[torch.Tensor], log: CommLog) -> torch.Tensor:
    return parts[0] if len(parts) == 1 else _ReduceFromShards.apply(log, *parts)


# --- distributed: one process per rank -------------------------------------------------------------


def spin(seconds: float) -> None:
    """Wait `seconds` precisely: time.sleep oversleeps by tens of microseconds, so sleep for the bulk of
    a long wait (leaving the core to the other ranks) and busy-wait the last half millisecond."""
    if seconds > 0:
        end = time.perf_counter() + seconds
        if seconds > 1e-3:
            time.sleep(seconds - 5e-4)
        while time.perf_counter() < end:
            pass


@dataclass
class DistComm:
    """All-reduce over the tensor-parallel group, logged, with an optional injected delay per call.

    `group`: the t ranks of one TP group (None: the default group, when TP is all there is).
    `delay_s` is added before every all-reduce, the stand-in for the latency term 2(t-1)*alpha of a ring
    all-reduce over a slower link than the one this machine really has."""

    world_size: int
    log: CommLog = field(default_factory=CommLog)
    delay_s: float = 0.0
    group: object = None

    def all_reduce(self, tensor: torch.Tensor, phase: str) -> torch.Tensor:
        if self.world_size == 1:
            return tensor
        spin(self.delay_s)
        dist.all_reduce(tensor, group=self.group)
        self.log.record("all_reduce", phase, tensor)
        return tensor


class _CopyToRanks(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, comm: DistComm):
        ctx.comm = comm
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return ctx.comm.all_reduce(grad.contiguous().clone(), "backward"), None


class _ReduceFromRanks(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, comm: DistComm):
        return comm.all_reduce(x.contiguous().clone(), "forward")

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return grad, None


def copy_to_ranks(x: torch.Tensor, comm: DistComm) -> torch.Tensor:
    return _CopyToRanks.apply(x, comm)


def reduce_from_ranks(x: torch.Tensor, comm: DistComm) -> torch.Tensor:
    return _ReduceFromRanks.apply(x, comm)
