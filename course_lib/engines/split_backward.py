"""The split backward of zero-bubble schedules (lesson 07b): I for the input gradient, W for the weights.

For a linear layer y = x Wᵀ + b, the weight gradient needs only the layer's input x and the gradient
dy of its output: dW = dyᵀ x and db = dy summed, over batch and sequence. So a zero-bubble stage splits
its backward the way the Zero Bubble paper does (Qi et al. 2024, arXiv 2401.10241, section 2):

- during the forward, every ``nn.Linear`` notes its input x (a reference: autograd saves x for the
  backward anyway, so this costs no memory);
- I (``input_grads``) runs autograd for the *input* gradients only (``torch.autograd.grad`` with the
  stage input and the linear layers' outputs as its inputs, never their weights), which gives each
  layer's dy on the way; the graph is then freed, and only x and dy per layer stay
  (``PendingWeightGrads``), counted as bytes held until W;
- W (``PendingWeightGrads.apply``) does the weight work: one matmul per linear layer, the very matmul
  autograd would run (on the CPU the gradients equal a full backward's bit for bit: the tests check
  it), and no autograd call.

Every other parameter of the stage (LayerNorms, embeddings, a tensor-parallel shard's separate bias,
or a weight used outside a module call through ``F.linear``) gets its gradient from I's own autograd
call, held until W adds it in: exact for any module. For LayerNorms and embeddings that is the cheaper
choice (measured: keeping their inputs and output gradients for W held more bytes between I and W, and
W then needed an autograd call of its own for them). A tensor-parallel stage's slices are
``nn.Linear`` modules (``course_lib/tp/shard.py``), so their weight work moves to W like any other's.
Assumption: a linear layer's parameters are used only through calls of linear layers (a weight tied
to an embedding, say, would lose the embedding's share).

``SplitBackwardStage`` is the shelf's ``StageRuntime`` (``course_lib/shelf/stage.py``) with I and W
added; importing this module registers it there, so ``StageRuntime(..., split_backward=True)``, which
the engines call for a schedule with ``split_backward``, builds one (``course_lib.engines`` imports it).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from course_lib.shelf import launcher
from course_lib.shelf.errors import require
from course_lib.shelf.stage import SPLIT_BACKWARD_RUNTIME, SavedTensor, StageRuntime, Stash


def defers_weight_grad(layer: nn.Module) -> bool:
    """Does W compute this layer's weight gradients from its saved input and output gradient?"""
    return isinstance(layer, nn.Linear)


@dataclass
class LayerCall:
    """One call of a linear layer, during a forward that keeps its graph."""

    layer: nn.Module
    inp: Tensor  # the input, detached (autograd saved it anyway)
    out: Tensor  # the output, with its graph: I asks autograd for the gradient here


class LayerCallRecorder:
    """Forward hooks on every linear layer in `module`; notes each call into the list given to
    ``start`` (the micro-batch's), until ``stop``."""

    def __init__(self, module: nn.Module):
        self.layers = [m for m in module.modules() if defers_weight_grad(m)]
        self._into: list[LayerCall] | None = None
        self._hooks = [m.register_forward_hook(self._note, with_kwargs=True) for m in self.layers]

    def _note(self, layer: nn.Module, args: tuple, kwargs: dict, output: object) -> None:
        if self._into is not None and isinstance(output, Tensor) and output.requires_grad:
            x = args[0] if args else kwargs["input"]  # nn.Linear.forward(input)
            self._into.append(LayerCall(layer, x.detach(), output))

    def start(self, into: list[LayerCall]) -> None:
        self._into = into

    def stop(self) -> None:
        self._into = None

    def params_done_in_i(self, module: nn.Module) -> list[nn.Parameter]:
        """`module`'s trainable parameters outside its linear layers: I computes their gradients."""
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
    holders: list[SavedTensor] = field(default_factory=list)  # for the stage's count of held bytes

    def tensors(self) -> Iterator[Tensor]:
        """Every tensor held until W (for the memory count)."""
        for _, x, dy in self.calls:
            yield x
            yield dy
        for _, grad in self.ready:
            yield grad

    @torch.no_grad()
    def apply(self) -> None:
        """W: every weight gradient, added into ``.grad``."""
        grads = list(self.ready)
        for layer, x, dy in self.calls:
            dy2 = dy.reshape(-1, dy.shape[-1])  # (batch * sequence, out)
            if layer.weight.requires_grad:
                grads.append((layer.weight, dy2.t().mm(x.reshape(-1, x.shape[-1]))))
            if layer.bias is not None and layer.bias.requires_grad:
                grads.append((layer.bias, dy2.sum(0)))
        accumulate(grads)

    def drop(self) -> None:
        """Let go of everything (and of the bytes counted for it)."""
        for holder in self.holders:
            holder.drop()
        self.calls, self.ready, self.holders = [], [], []


def accumulate(grads: list[tuple[nn.Parameter, Tensor]]) -> None:
    """Add each gradient into its parameter's ``.grad``, as autograd does (the first one is kept as
    it is); the additions in one ``_foreach_add_`` call, which saves a Python call per tensor."""
    into, added, seen = [], [], set()
    for param, grad in grads:
        if param.grad is None:
            param.grad = grad
        elif id(param) in seen:  # a layer called twice: one foreach call must not add twice to a tensor
            param.grad.add_(grad)
        else:
            seen.add(id(param))
            into.append(param.grad)
            added.append(grad)
    if into:
        torch._foreach_add_(into, added)


def input_grads(
    root: Tensor, seed: Tensor | None, calls: list[LayerCall], others: list[nn.Parameter],
    stage_input: Tensor | None,
) -> tuple[Tensor | None, PendingWeightGrads]:  # fmt: skip
    """I: one autograd call for the stage input's gradient (returned; None when `stage_input` is None),
    every linear layer call's output gradient and the gradients of `others` (the other parameters); the
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


@dataclass
class SplitStash(Stash):
    """A micro-batch's stash on a split-backward stage: also its layer calls, then what I leaves for W."""

    calls: list[LayerCall] = field(default_factory=list)  # noted during the forward, read by I
    pending: PendingWeightGrads | None = None  # set by I (which frees the rest), used by W

    def free(self) -> None:
        super().free()
        self.calls = []
        if self.pending is not None:
            self.pending.drop()
            self.pending = None


class SplitBackwardStage(StageRuntime):
    """A stage runtime that also runs I and W (see the module docstring); B still works."""

    splits_backward = True
    stash_type = SplitStash

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # I/W needs every linear layer's input and output: one forward hook per linear layer
        self._recorder = LayerCallRecorder(self.module)
        # parameters no layer rule covers: I computes their gradients (the module docstring says why)
        self._params_in_i = self._recorder.params_done_in_i(self.module)

    def _run_forward(self, stash: SplitStash) -> Tensor:
        stash.calls = []
        self._recorder.start(stash.calls)
        try:
            return super()._run_forward(stash)
        finally:
            self._recorder.stop()

    def _ready_for_backward(self, mb: int) -> SplitStash:
        stash = self._stash.get(mb)
        require(
            stash is None or stash.pending is None,
            f"stage {self.stage} already ran the I of micro-batch {mb}",
        )
        return super()._ready_for_backward(mb)

    def backward_input(self, mb: int, grad_output: Tensor | None) -> Tensor | None:
        """I: the gradient for the stage input (returned; None on stage 0), and on the way every linear
        layer's output gradient, kept with its input for W; the rest of the graph is freed."""
        stash = self._ready_for_backward(mb)
        stage_input = None if self.is_first else stash.inp
        grad_input, pending = input_grads(
            stash.out, self._grad_seed(grad_output), stash.calls, self._params_in_i, stage_input
        )
        # autograd frees each layer's saved tensors as I passes it, while the output gradients W needs
        # appear: the count goes from the graph to W's tensors (transients are not counted, as in B)
        stash.free()
        if self.track_memory:
            for tensor in pending.tensors():
                self._bytes.pack(tensor, pending.holders)
        stash.pending, stash.inp = pending, None  # the stage input is no longer needed either
        self._note_peak()
        return grad_input

    def backward_weight(self, mb: int) -> None:
        """W: weight gradients from I's saved layer inputs and output gradients, into ``.grad``."""
        require(
            mb in self._stash and self._stash[mb].pending is not None,
            f"stage {self.stage} runs W for micro-batch {mb} before its I (input gradient)",
        )
        stash = self._stash.pop(mb)
        stash.pending.apply()
        stash.free()

    def close(self) -> None:
        """Also take the forward hooks off the module (it may be reused by another runtime)."""
        super().close()
        self._recorder.close()


SPLIT_BACKWARD_RUNTIME.append(SplitBackwardStage)
if __name__ not in launcher.PRELOAD:  # the distributed engine's ranks need it too, whoever started them
    launcher.PRELOAD.append(__name__)
