"""The classic ``Pipe`` API, working again: GPipe-style micro-batching over an ``nn.Sequential``.

Teaching material written for PyTorch 1.x/2.0-2.3 shows::

    from torch.distributed.pipeline.sync import Pipe          # removed from PyTorch (2024)
    model = Pipe(nn.Sequential(a, b, c, d), chunks=8, checkpoint="never")
    out = model(x).local_value()
    loss_fn(out, y).backward()

With the course library, change the import and keep the rest::

    from course_lib.engines.pipe import Pipe
    model = Pipe(nn.Sequential(a, b, c, d), chunks=8, checkpoint="never", balance=[2, 2])
    out = model(x)                 # a Tensor (``.local_value()`` is not needed, see below)
    loss_fn(out, y).backward()

What it does (GPipe's semantics, Huang et al. 2019): the batch is cut into ``chunks`` micro-batches,
each runs through the partitions one after another (on each partition's device), the outputs are
joined back into one batch, and ``backward()`` sends every micro-batch's gradient back through the
partitions. With ``checkpoint`` (never / except_last / always) a micro-batch keeps only each
partition's input and recomputes the forward during backward. Outputs and gradients equal the plain
``nn.Sequential``'s (tests check it).

Where it differs from the removed ``torch.distributed.pipeline.sync.Pipe``:

- ``model(x)`` returns the output **Tensor**, not an ``RRef``; drop ``.local_value()``.
- No RPC: ``torch.distributed.rpc.init_rpc(...)`` is not needed (old code that calls it still runs).
- Partitions: as in the old Pipe, consecutive children on the same device form a partition; as in
  torchgpipe you may instead pass ``balance=[layers per partition]`` and ``devices=[...]``.
  Without enough GPUs the partitions share one device: they are *simulated* devices, so the code
  runs anywhere but nothing runs in parallel (it is one process executing micro-batches in turn).
- One tensor in, one tensor out (no tuples of inputs, no skip connections, no deferred batch norm).
- It is a teaching tool, not a fast engine: for real training use ``torch.distributed.pipelining``
  (or this course's distributed engine).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import groupby

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint as recompute

from course_lib.shelf.errors import require
from course_lib.shelf.model import Partition, stage_modules, uniform
from course_lib.shelf.stage import check_checkpoint, checkpointed, stage_devices


def _partitions_by_device(module: nn.Sequential) -> list[int]:
    """Layer counts of runs of consecutive children that live on the same device (the old Pipe's rule)."""
    devices, last = [], None
    for child in module:  # a child without weights stays with the one before it
        last = next((p.device for p in child.parameters()), last)
        devices.append(last)
    return [len(list(run)) for _, run in groupby(devices)]


class Pipe(nn.Module):
    """GPipe over an ``nn.Sequential``: ``Pipe(seq, chunks=8, checkpoint="never")`` (see the module doc)."""

    def __init__(
        self, module: nn.Sequential, chunks: int = 1, checkpoint: str = "except_last",
        balance: Sequence[int] | None = None, devices: Sequence[torch.device | str] | None = None,
    ):  # fmt: skip
        super().__init__()
        require(
            isinstance(module, nn.Sequential), f"Pipe needs an nn.Sequential, got {type(module).__name__}"
        )
        require(len(module) >= 1, "Pipe needs an nn.Sequential with at least one layer")
        require(
            isinstance(chunks, int) and chunks >= 1, f"chunks must be a whole number >= 1, got {chunks!r}"
        )
        check_checkpoint(checkpoint)
        if balance is None and devices is not None:  # as torchgpipe: split evenly over the devices
            balance = list(uniform(len(module), len(devices)).sizes)
        balance = _partitions_by_device(module) if balance is None else list(balance)
        require(
            all(isinstance(b, int) and b >= 1 for b in balance) and sum(balance) == len(module),
            f"balance {balance} must be positive layer counts summing to the module's {len(module)} layers",
        )
        parts = stage_modules(module, Partition.from_sizes(balance))
        if devices is None and balance == _partitions_by_device(module):  # keep where the user put them
            devices = [next(part.parameters(), torch.empty(0)).device for part in parts]
        devices = stage_devices(len(balance)) if devices is None else devices
        require(
            len(devices) == len(balance),
            f"{len(devices)} devices for {len(balance)} partitions (balance {balance}); "
            "give one device per partition",
        )
        self.chunks, self.checkpoint, self.balance = chunks, checkpoint, balance
        self.devices = [torch.device(d) for d in devices]
        self.partitions = nn.ModuleList(part.to(d) for part, d in zip(parts, self.devices, strict=True))

    def forward(self, x: Tensor) -> Tensor:
        """Micro-batched forward through every partition; returns the joined output (a Tensor)."""
        require(isinstance(x, Tensor), f"Pipe takes one tensor, got {type(x).__name__}")
        micro = list(x.chunk(self.chunks))  # like GPipe: the last micro-batch may be smaller
        outputs = []
        for i, mb in enumerate(micro):
            for partition, device in zip(self.partitions, self.devices, strict=True):
                mb = mb.to(device)
                if torch.is_grad_enabled() and checkpointed(self.checkpoint, i, len(micro)):
                    mb = recompute(partition, mb, use_reentrant=False)
                else:
                    mb = partition(mb)
            outputs.append(mb)
        return torch.cat(outputs)
