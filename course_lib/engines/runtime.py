"""One pipeline stage at work: forward, backward (whole, or split into I and W), and what it keeps.

Both engines (local and distributed) run a stage through this class; only the way tensors travel
between stages differs. Try it::

    import torch
    from course_lib.model import ModelConfig, build_model
    from course_lib.engines.runtime import StageRuntime
    model = build_model(ModelConfig(n_layers=2, d_model=16, vocab_size=8, seq_len=8))
    stage = StageRuntime(0, 1, torch.nn.Sequential(*model.layers), n_microbatches=1)
    x = torch.randint(0, 8, (2, 8)); y = torch.randint(0, 8, (2, 8))
    stage.forward(0, x, y); print(stage.saved_bytes(), stage.losses)   # bytes held for backward
    stage.backward(0, None); print(stage.saved_bytes())                # 0: the stash is freed

What a stage keeps between a micro-batch's forward and its backward (the "stash"):

- ``checkpoint="never"``: the autograd graph with every tensor saved for backward;
- a checkpointed micro-batch: only the stage's *input*; the forward runs again, with the graph,
  just before the backward (GPipe / torchgpipe's activation checkpointing, "re-materialisation").
  ``"always"`` checkpoints every micro-batch, ``"except_last"`` all but the last one (its backward
  comes right after its forward in GPipe, so recomputing it would buy no memory).

Zero-bubble split: ``backward_input`` (I) computes the gradient for the stage input, which the
previous stage is waiting for, plus the gradient at the output of every layer that owns weights,
and keeps the graph. ``backward_weight`` (W) later turns those saved output gradients into weight
gradients, one layer at a time, so W does only the weight work and never repeats I's. The sum is
exactly what a full backward computes (the tests check it).

Memory is *measured*, not modelled: a saved-tensors hook sees every tensor autograd saves for
backward, and ``saved_bytes()`` is what is alive right now (weights excluded, shared storage counted
once). ``peak_saved_bytes`` is the high-water mark since ``reset_peak()``. The hook costs about 10%
of a step on the toy CPU model; ``track_memory=False`` skips it for like-for-like timing (then only
checkpointed inputs are counted).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from course_lib.errors import require
from course_lib.model import lm_loss

CHECKPOINT_MODES = ("never", "except_last", "always")


class _SavedTensor:
    """What autograd keeps instead of a saved tensor: the tensor, plus a release on garbage collection
    so the owning stage can count bytes held for backward."""

    __slots__ = ("tensor", "_tracker", "_key")

    def __init__(self, tensor: Tensor, tracker: _SavedBytes, key: int | None):
        self.tensor, self._tracker, self._key = tensor, tracker, key

    def __del__(self) -> None:
        self.drop()

    def drop(self) -> None:
        """Let go of the tensor (once the graph that saved it is done with it)."""
        if self._key is not None:
            self._tracker.release(self._key)
            self._key = None
        self.tensor = None


class _SavedBytes:
    """Bytes of storage alive because autograd saved them; a storage saved twice counts once."""

    def __init__(self) -> None:
        self.live: dict[int, list[int]] = {}  # storage pointer -> [times saved, bytes]
        self.total = 0
        self.peak = 0
        self.excluded: set[int] = set()  # storages of the weights: not activation memory
        self.holders: list[_SavedTensor] | None = None  # where the current forward's holders go

    def pack(self, tensor: Tensor) -> _SavedTensor:
        storage = tensor.untyped_storage()
        key = storage.data_ptr()
        if key in self.excluded or storage.nbytes() == 0:
            return _SavedTensor(tensor, self, None)
        holder = _SavedTensor(tensor, self, key)
        if self.holders is not None:
            self.holders.append(holder)
        entry = self.live.get(key)
        if entry is None:
            self.live[key] = [1, storage.nbytes()]
            self.total += storage.nbytes()
            self.peak = max(self.peak, self.total)
        else:
            entry[0] += 1
        return holder

    def release(self, key: int) -> None:
        entry = self.live[key]
        entry[0] -= 1
        if entry[0] == 0:
            self.total -= entry[1]
            del self.live[key]


@dataclass
class _Stash:
    """What one micro-batch leaves on a stage between its forward and its (last) backward."""

    inp: Tensor  # the stage input (a leaf that requires grad, except token ids on stage 0)
    target: Tensor | None
    out: Tensor | None = None  # stage output, or the loss on the last stage; None while checkpointed
    layer_outputs: list[tuple[nn.Module, Tensor]] = field(default_factory=list)
    layer_grads: list[Tensor | None] | None = None  # set by I, used by W
    # what autograd saved; a saved tensor that is its own op's output would otherwise keep the
    # retained graph alive in a reference cycle until the garbage collector runs
    holders: list[_SavedTensor] = field(default_factory=list)

    def free(self) -> None:
        for holder in self.holders:
            holder.drop()
        self.holders = []
        self.out = None
        self.layer_outputs = []


class StageRuntime:
    """Runs one pipeline stage's actions on one device; holds the stashed activations."""

    def __init__(
        self,
        stage: int,
        n_stages: int,
        module: nn.Module,
        n_microbatches: int,
        checkpoint: str = "never",
        device: torch.device | str = "cpu",
        track_memory: bool = True,
        split_backward: bool = True,
    ):
        require(0 <= stage < n_stages, f"stage must be in 0..{n_stages - 1}, got {stage}")
        require(n_microbatches >= 1, f"micro-batches must be >= 1, got {n_microbatches}")
        require(
            checkpoint in CHECKPOINT_MODES,
            f"unknown checkpoint mode {checkpoint!r}; expected one of {', '.join(CHECKPOINT_MODES)}",
        )
        self.stage, self.n_stages, self.n_microbatches = stage, n_stages, n_microbatches
        self.checkpoint = checkpoint
        self.track_memory = track_memory
        self.device = torch.device(device)
        self.module = module.to(self.device)
        self.is_first, self.is_last = stage == 0, stage == n_stages - 1
        self.losses: dict[int, float] = {}  # micro-batch -> its loss already divided by m
        self._stash: dict[int, _Stash] = {}
        self._bytes = _SavedBytes()
        self._bytes.excluded = {p.untyped_storage().data_ptr() for p in self.module.parameters()}
        self.peak_inflight = 0  # most micro-batches stashed at once since reset_peak()
        self._peak = 0
        # layers that own weights directly: W computes their gradients from their output gradients
        self._weight_layers = [m for m in self.module.modules() if any(True for _ in m.parameters(False))]
        self._recording: list[tuple[nn.Module, Tensor]] | None = None
        # I/W needs every weight layer's output; a schedule with full backwards does not, and skips
        # the hooks (one Python call per layer per micro-batch)
        self.split_backward = split_backward
        self._hooks = (
            [layer.register_forward_hook(self._record_output) for layer in self._weight_layers]
            if split_backward
            else []
        )

    # ---- bookkeeping ---------------------------------------------------------------------------
    def _record_output(self, layer: nn.Module, _inputs, output) -> None:
        if self._recording is not None and isinstance(output, Tensor) and output.requires_grad:
            self._recording.append((layer, output))

    def checkpointed(self, mb: int) -> bool:
        """Does micro-batch `mb` keep only its input (and recompute the forward before backward)?"""
        if self.checkpoint == "always":
            return True
        return self.checkpoint == "except_last" and mb < self.n_microbatches - 1

    def saved_bytes(self) -> int:
        """Bytes held right now for backward: tensors autograd saved, plus checkpointed inputs."""
        held = sum(s.inp.nbytes for s in self._stash.values() if s.out is None)
        return self._bytes.total + held

    @property
    def peak_saved_bytes(self) -> int:
        return self._peak

    def reset_peak(self) -> None:
        self._bytes.peak = self._bytes.total
        self._peak = self.saved_bytes()
        self.peak_inflight = len(self._stash)

    def _note_peak(self) -> None:
        held = sum(s.inp.nbytes for s in self._stash.values() if s.out is None)
        self._peak = max(self._peak, self._bytes.peak + held, self.saved_bytes())
        self.peak_inflight = max(self.peak_inflight, len(self._stash))

    def inflight(self) -> int:
        """Micro-batches whose forward ran and whose backward has not finished."""
        return len(self._stash)

    # ---- forward -------------------------------------------------------------------------------
    def _run_forward(self, stash: _Stash) -> Tensor:
        """Forward with the graph recorded (and measured); returns the output (or the loss)."""
        self._recording = stash.layer_outputs = []
        self._bytes.holders = stash.holders = []
        try:
            if self.track_memory:
                with torch.autograd.graph.saved_tensors_hooks(self._bytes.pack, lambda saved: saved.tensor):
                    out = self._forward_and_loss(stash)
            else:
                out = self._forward_and_loss(stash)
        finally:
            self._recording = self._bytes.holders = None
        return out

    def _forward_and_loss(self, stash: _Stash) -> Tensor:
        out = self.module(stash.inp)
        return lm_loss(out, stash.target) / self.n_microbatches if self.is_last else out

    def forward(self, mb: int, inp: Tensor, target: Tensor | None = None) -> Tensor | None:
        """Run micro-batch `mb` through the stage. Stage 0 gets token ids; the last stage needs the
        targets, records ``losses[mb]`` (loss / m) and returns None; other stages return the
        activation to send on (detached: the graph stays here)."""
        require(mb not in self._stash, f"stage {self.stage} already ran the forward of micro-batch {mb}")
        require(
            not self.is_last or target is not None,
            f"stage {self.stage} is the last stage and computes the loss, so forward needs targets",
        )
        inp = inp.to(self.device)
        if not self.is_first:
            inp = inp.detach().requires_grad_(True)  # a leaf: its .grad is what we send back
        target = target.to(self.device) if target is not None else None
        stash = _Stash(inp, target)
        if self.checkpointed(mb):
            with torch.no_grad():
                out = self._forward_and_loss(stash)
        else:
            out = stash.out = self._run_forward(stash)
        self._stash[mb] = stash
        self._note_peak()
        if self.is_last:
            self.losses[mb] = out.item()
            return None
        return out.detach()

    def _ready_for_backward(self, mb: int) -> _Stash:
        require(
            mb in self._stash, f"stage {self.stage} has no forward of micro-batch {mb} to go back through"
        )
        stash = self._stash[mb]
        if stash.out is None:  # checkpointed: re-materialise the graph now
            stash.out = self._run_forward(stash)
            self._note_peak()
        return stash

    def _grad_seed(self, grad_output: Tensor | None) -> Tensor | None:
        require(
            self.is_last or grad_output is not None,
            f"stage {self.stage} is not the last stage, so its backward needs the output gradient",
        )
        return None if self.is_last else grad_output.to(self.device)

    # ---- backward ------------------------------------------------------------------------------
    def backward(self, mb: int, grad_output: Tensor | None) -> Tensor | None:
        """Full backward (B) of micro-batch `mb`: weight gradients accumulate into ``.grad``; returns
        the gradient for the stage input (None on stage 0). Frees the micro-batch's stash."""
        stash = self._ready_for_backward(mb)
        torch.autograd.backward(stash.out, self._grad_seed(grad_output))
        del self._stash[mb]
        stash.free()
        return None if self.is_first else stash.inp.grad

    def backward_input(self, mb: int, grad_output: Tensor | None) -> Tensor | None:
        """I: the gradient for the stage input (returned; None on stage 0) and for the output of every
        layer with weights (kept for W). The graph stays alive until W."""
        require(
            self.split_backward,
            f"stage {self.stage} was built with split_backward=False, so it cannot run I (input-gradient "
            "backward); build it with split_backward=True for zero-bubble schedules",
        )
        stash = self._ready_for_backward(mb)
        want = [t for _, t in stash.layer_outputs]
        if not self.is_first:
            want.append(stash.inp)
        grads = torch.autograd.grad(
            stash.out, want, self._grad_seed(grad_output), retain_graph=True, allow_unused=True
        )
        stash.layer_grads = list(grads[: len(stash.layer_outputs)])
        return None if self.is_first else grads[-1]

    def backward_weight(self, mb: int) -> None:
        """W: weight gradients from the output gradients I saved, accumulated into ``.grad``;
        frees the micro-batch's stash."""
        require(
            mb in self._stash and self._stash[mb].layer_grads is not None,
            f"stage {self.stage} runs W for micro-batch {mb} before its I (input gradient)",
        )
        stash = self._stash.pop(mb)
        for (layer, out), grad in zip(stash.layer_outputs, stash.layer_grads, strict=True):
            if grad is None:
                continue
            params = [p for p in layer.parameters(False) if p.requires_grad]
            # the graph from a layer's output to its own weights is one op: nothing of I is repeated
            weight_grads = torch.autograd.grad(out, params, grad, retain_graph=True, allow_unused=True)
            for p, g in zip(params, weight_grads, strict=True):
                if g is not None:
                    if p.grad is None:
                        p.grad = g
                    else:
                        p.grad.add_(g)
        stash.free()

    # ---- after the flush -----------------------------------------------------------------------
    def loss(self) -> float:
        """The batch's mean loss (sum of the micro-batches' loss / m); last stage only."""
        return sum(self.losses[mb] for mb in sorted(self.losses))

    def start_batch(self) -> None:
        """Forget the previous batch's losses; refuse if a micro-batch is still waiting for backward."""
        require(
            not self._stash,
            f"stage {self.stage} still holds micro-batches {sorted(self._stash)}: a batch must flush "
            "(every backward run) before the next starts",
        )
        self.losses = {}
        self.reset_peak()

    def close(self) -> None:
        """Take the forward hooks off the module (it may be reused by another runtime)."""
        for hook in self._hooks:
            hook.remove()
        self._hooks = []
