"""Weight gradients from what each layer saw and what came back to it: the W of zero-bubble schedules.

For a linear layer y = x Wᵀ + b, the weight gradient needs only the layer's input x and the gradient
dy of its output: dW = dyᵀ x and db = dy summed, over batch and sequence. So a zero-bubble stage splits
its backward the way the Zero Bubble paper does (Qi et al. 2024, arXiv 2401.10241, section 2):

- during the forward, each layer with a rule below notes its input x (a reference: autograd saves x
  for the backward anyway, so this costs no memory);
- I (``input_grads``) runs autograd for the *input* gradients only (``torch.autograd.grad`` with the
  stage input and the layers' outputs as its inputs, never a weight), which gives each layer's dy on
  the way; the graph is then freed, and only x and dy per layer stay (``PendingWeightGrads``);
- W (``PendingWeightGrads.apply``) does the weight work: one matmul per linear layer, no autograd call.

Rules, by layer type (``has_rule``):

- ``nn.Linear``: dW = dyᵀ x, db = sum of dy (the same matmul autograd runs: the result is bit for bit);
- ``nn.Embedding`` (plain: no padding index, max norm or sparse gradient): dy's rows added at the ids;
- ``nn.LayerNorm``: its forward again on the saved input, and one autograd call for all of a
  micro-batch's LayerNorms together (each on its own detached input, so no path crosses another
  layer): cheap, and equal to autograd's own gradients bit for bit.

Any other parameter of the stage (a module without a rule, or a weight used outside a module call, as
a tensor-parallel shard's ``F.linear`` weights are) gets its gradient from I's own autograd call, held
until W adds it in: exact for every module, only that part of the work happens in I.
Assumption: a parameter of a layer with a rule is used only by that layer (no weight tying).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn


def has_rule(layer: nn.Module) -> bool:
    """Does W compute this layer's weight gradients from its saved input and output gradient?"""
    if isinstance(layer, nn.Embedding):
        plain = layer.padding_idx is None and layer.max_norm is None
        return plain and not layer.scale_grad_by_freq and not layer.sparse
    return isinstance(layer, (nn.Linear, nn.LayerNorm))


@dataclass
class LayerCall:
    """One call of a layer with a rule, during a forward that keeps its graph."""

    layer: nn.Module
    inp: Tensor  # the input, detached (autograd saved it anyway)
    out: Tensor  # the output, with its graph: I asks autograd for the gradient here


class LayerCallRecorder:
    """Forward hooks on every layer with a rule in `module`; notes each call into the list given to
    ``start`` (the micro-batch's), until ``stop``."""

    def __init__(self, module: nn.Module):
        self.layers = [m for m in module.modules() if has_rule(m)]
        self._into: list[LayerCall] | None = None
        self._hooks = [m.register_forward_hook(self._note) for m in self.layers]

    def _note(self, layer: nn.Module, inputs: tuple, output: object) -> None:
        if self._into is not None and isinstance(output, Tensor) and output.requires_grad:
            self._into.append(LayerCall(layer, inputs[0].detach(), output))

    def start(self, into: list[LayerCall]) -> None:
        self._into = into

    def stop(self) -> None:
        self._into = None

    def params_without_rule(self, module: nn.Module) -> list[nn.Parameter]:
        """`module`'s trainable parameters that no layer with a rule owns: I computes their gradients."""
        ruled = {id(p) for layer in self.layers for p in layer.parameters(recurse=False)}
        return [p for p in module.parameters() if p.requires_grad and id(p) not in ruled]

    def close(self) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks = []


@dataclass
class PendingWeightGrads:
    """What I leaves for W: (layer, input, output gradient) per layer call, and gradients I computed."""

    calls: list[tuple[nn.Module, Tensor, Tensor]] = field(default_factory=list)
    ready: list[tuple[nn.Parameter, Tensor]] = field(default_factory=list)
    holders: list = field(default_factory=list)  # memory-accounting holders (saved_memory.SavedTensor)

    def tensors(self) -> Iterator[Tensor]:
        """Every tensor held until W (for the memory count)."""
        for _, x, dy in self.calls:
            yield x
            yield dy
        for _, grad in self.ready:
            yield grad

    def apply(self) -> None:
        """W: add every weight gradient into ``.grad``."""
        for param, grad in self.ready:
            accumulate(param, grad)
        norms = []
        for layer, x, dy in self.calls:
            if isinstance(layer, nn.LayerNorm):
                norms.append((layer, x, dy))
            else:
                for param, grad in _direct_weight_grads(layer, x, dy):
                    accumulate(param, grad)
        _layer_norm_grads(norms)

    def drop(self) -> None:
        """Let go of everything (and of the bytes counted for it)."""
        for holder in self.holders:
            holder.drop()
        self.calls, self.ready, self.holders = [], [], []


def accumulate(param: nn.Parameter, grad: Tensor) -> None:
    """Add `grad` into ``param.grad``, as autograd accumulates it."""
    param.grad = grad if param.grad is None else param.grad.add_(grad)


def _direct_weight_grads(layer: nn.Module, x: Tensor, dy: Tensor) -> Iterable[tuple[nn.Parameter, Tensor]]:
    """Weight gradients of a linear layer or an embedding, from its input and output gradient."""
    dy2 = dy.reshape(-1, dy.shape[-1])  # (batch * sequence, out)
    if isinstance(layer, nn.Embedding):
        if layer.weight.requires_grad:
            yield layer.weight, torch.zeros_like(layer.weight).index_add_(0, x.reshape(-1), dy2)
        return
    if layer.weight.requires_grad:
        yield layer.weight, dy2.t().mm(x.reshape(-1, x.shape[-1]))
    if layer.bias is not None and layer.bias.requires_grad:
        yield layer.bias, dy2.sum(0)


def _layer_norm_grads(norms: list[tuple[nn.Module, Tensor, Tensor]]) -> None:
    """Every LayerNorm's weight gradients, in one autograd call over their forwards run again."""
    outs, grads, params = [], [], []
    for layer, x, dy in norms:
        own = [p for p in layer.parameters(recurse=False) if p.requires_grad]
        if own:
            with torch.enable_grad():
                outs.append(layer(x))
            grads.append(dy)
            params += own
    if not params:
        return
    for param, grad in zip(params, torch.autograd.grad(outs, params, grads), strict=True):
        accumulate(param, grad)


def input_grads(
    root: Tensor, seed: Tensor | None, calls: list[LayerCall], others: list[nn.Parameter],
    stage_input: Tensor | None,
) -> tuple[Tensor | None, PendingWeightGrads]:  # fmt: skip
    """I: one autograd call for the stage input's gradient (returned; None when `stage_input` is None),
    every layer call's output gradient and the gradients of `others` (parameters without a rule); the
    graph is freed. Returns what W needs."""
    want = [c.out for c in calls] + others + ([] if stage_input is None else [stage_input])
    if not want:
        return None, PendingWeightGrads()
    got = torch.autograd.grad(root, want, seed, allow_unused=True)
    n = len(calls)
    pending = PendingWeightGrads(
        calls=[(c.layer, c.inp, g) for c, g in zip(calls, got[:n], strict=True) if g is not None],
        ready=[(p, g) for p, g in zip(others, got[n : n + len(others)], strict=True) if g is not None],
    )
    return (None if stage_input is None else got[-1]), pending
