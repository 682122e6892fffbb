"""Memory held for backward, measured: the bytes of every tensor autograd saves, while it is alive.

A saved-tensors hook (``torch.autograd.graph.saved_tensors_hooks``) sees each tensor autograd keeps
for backward. ``SavedBytes`` counts its storage (weights excluded, a storage saved twice counted
once) and hands autograd a ``SavedTensor`` holder instead; the stage that ran the forward keeps the
holders with the micro-batch and drops them when its backward is done. What a split backward keeps
between I and W (each linear layer's input and output gradient, ``weight_grad.py``) is counted the
same way (``pack``), until W. The hook costs about 10% of a step on the toy CPU model, which is why
``StageRuntime(track_memory=False)`` can skip it.
"""

from __future__ import annotations

import torch
from torch import Tensor


class SavedTensor:
    """What autograd keeps instead of a saved tensor: the tensor, and the storage it is counted under.

    No ``__del__`` on purpose: a finalizer runs wherever the graph happens to be freed, and a Ctrl-C
    that lands inside it is printed and dropped ("Exception ignored in ... __del__"). The bytes are
    given back explicitly, when the micro-batch's stash is freed."""

    __slots__ = ("tensor", "_tracker", "_key")

    def __init__(self, tensor: Tensor, tracker: SavedBytes, key: int | None):
        self.tensor, self._tracker, self._key = tensor, tracker, key

    def drop(self) -> None:
        """Let go of the tensor (once the graph that saved it is done with it)."""
        if self._key is not None:
            self._tracker.release(self._key)
            self._key = None
        self.tensor = None


class SavedBytes:
    """Bytes of storage alive because autograd saved them; a storage saved twice counts once."""

    def __init__(self, excluded: set[int]) -> None:
        self.live: dict[int, list[int]] = {}  # storage pointer -> [times saved, bytes]
        self.total = 0
        self.peak = 0
        self.excluded = excluded  # storages of the weights: not activation memory

    def pack(self, tensor: Tensor, holders: list[SavedTensor]) -> SavedTensor:
        """Count `tensor` (unless it is a weight) and add its holder to `holders` (the stash's)."""
        storage = tensor.untyped_storage()
        key, nbytes = storage.data_ptr(), storage.nbytes()
        if key in self.excluded or nbytes == 0:
            return SavedTensor(tensor, self, None)
        holder = SavedTensor(tensor, self, key)
        holders.append(holder)
        entry = self.live.setdefault(key, [0, nbytes])
        if entry[0] == 0:
            self.total += nbytes
            self.peak = max(self.peak, self.total)
        entry[0] += 1
        return holder

    def release(self, key: int) -> None:
        entry = self.live[key]
        entry[0] -= 1
        if entry[0] == 0:
            self.total -= entry[1]
            del self.live[key]

    def counting(self, holders: list[SavedTensor]) -> torch.autograd.graph.saved_tensors_hooks:
        """A context in which every tensor autograd saves is counted, its holder added to `holders`."""
        return torch.autograd.graph.saved_tensors_hooks(lambda t: self.pack(t, holders), lambda h: h.tensor)

    def clear(self) -> None:
        """Start from nothing held (also forgets what an interrupted forward packed)."""
        self.live.clear()
        self.total = self.peak = 0
