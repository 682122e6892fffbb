"""One pipeline stage at work: forward, backward (whole, or split into I and W), and what it keeps.

Both engines (local and distributed) run a stage through this class; only the way tensors travel
between stages differs. Try it::

    import torch
    from course_lib.shelf.model import ModelConfig, build_model
    from course_lib.shelf.stage import StageRuntime
    from course_lib.shelf.schedule import Action
    model = build_model(ModelConfig(n_layers=2, d_model=16, vocab_size=8, seq_len=8))
    stage = StageRuntime(0, 1, torch.nn.Sequential(*model.layers), n_microbatches=1)
    x = torch.randint(0, 8, (2, 8)); y = torch.randint(0, 8, (2, 8))
    stage.run(Action.parse("0F0"), x, y); print(stage.saved_bytes(), stage.losses)  # held for backward
    stage.run(Action.parse("0B0"), None); print(stage.saved_bytes())               # 0: stash freed

What a stage keeps between a micro-batch's forward and its backward (the "stash"):

- ``checkpoint="never"``: the autograd graph with every tensor saved for backward;
- a checkpointed micro-batch: only the stage's *input*; the forward runs again, with the graph,
  just before the backward (GPipe / torchgpipe's activation checkpointing, "re-materialisation").
  ``"always"`` checkpoints every micro-batch, ``"except_last"`` all but the last one (its backward
  comes right after its forward in GPipe, so recomputing it would buy no memory).

Zero-bubble split (``weight_grad.py``): ``backward_input`` (I) computes the gradient for the stage
input, which the previous stage is waiting for, and on the way the gradient dy at the output of every
``nn.Linear`` (and the small gradients of LayerNorms and embeddings); then it frees the graph and keeps,
per linear layer, only its input x and dy. ``backward_weight`` (W) later turns those into weight
gradients (dW = dyᵀ x: one matmul per layer), so W does only the weight work and never repeats I's.
The sum is exactly what a full backward computes (the tests check it). Between I and W the stage holds
those x and dy: they count as held bytes (on the toy model about as many as the forward stashed).

Memory is *measured*, not modelled (``course_lib/saved_memory.py``); ``track_memory=False`` skips that for
like-for-like timing (then only checkpointed inputs are counted).
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from course_lib.engines.weight_grad import LayerCall, LayerCallRecorder, PendingWeightGrads, input_grads
from course_lib.saved_memory import SavedBytes, SavedTensor
from course_lib.shelf.errors import require
from course_lib.shelf.model import autocast, lm_loss, precision_dtype
from course_lib.shelf.schedule import Action, Kind

CHECKPOINT_MODES = ("never", "except_last", "always")


def check_checkpoint(mode: str) -> None:
    """Refuse an unknown activation-checkpointing mode (every engine and Pipe call this)."""
    require(
        mode in CHECKPOINT_MODES,
        f"unknown checkpoint mode {mode!r}; expected one of {', '.join(CHECKPOINT_MODES)}",
    )


def checkpointed(mode: str, mb: int, n_microbatches: int) -> bool:
    """Does micro-batch `mb` keep only its input, and recompute its forward before the backward?"""
    return mode == "always" or (mode == "except_last" and mb < n_microbatches - 1)


@dataclass
class _Stash:
    """What one micro-batch leaves on a stage between its forward and its (last) backward."""

    inp: Tensor | None  # the stage input (a leaf that requires grad, except token ids on stage 0)
    target: Tensor | None
    out: Tensor | None = None  # stage output, or the loss on the last stage; None while checkpointed
    calls: list[LayerCall] = field(default_factory=list)  # split backward: what I and W need per layer
    pending: PendingWeightGrads | None = None  # set by I (which frees the rest), used by W
    # what autograd saved; a saved tensor that is its own op's output would otherwise keep the
    # retained graph alive in a reference cycle until the garbage collector runs
    holders: list[SavedTensor] = field(default_factory=list)

    def free(self) -> None:
        for holder in self.holders:
            holder.drop()
        self.holders, self.out, self.calls = [], None, []
        if self.pending is not None:
            self.pending.drop()
            self.pending = None


class StageRuntime:
    """Runs one pipeline stage's actions on one device; holds the stashed activations."""

    def __init__(
        self, stage: int, n_stages: int, module: nn.Module, n_microbatches: int, checkpoint: str = "never",
        device: torch.device | str = "cpu", track_memory: bool = True, split_backward: bool = True,
        defer_graph_release: bool = False, precision: str = "float32",
    ):  # fmt: skip
        require(0 <= stage < n_stages, f"stage must be in 0..{n_stages - 1}, got {stage}")
        require(n_microbatches >= 1, f"micro-batches must be >= 1, got {n_microbatches}")
        check_checkpoint(checkpoint)
        precision_dtype(precision)  # a known name (the config allows autocast only on a CUDA GPU)
        self.stage, self.n_stages, self.n_microbatches = stage, n_stages, n_microbatches
        self.checkpoint, self.track_memory = checkpoint, track_memory
        # the forward under autocast (model.autocast; the engines pass cfg.precision). Weights, gradients
        # and the messages between stages stay float32: every block adds its output to the float32
        # residual stream, and autocast leaves that sum in float32 (tests/engines/test_precision.py)
        self.precision = precision
        self.device = torch.device(device)
        self.module = module.to(self.device)
        self.is_first, self.is_last = stage == 0, stage == n_stages - 1
        self.losses: dict[int, float] = {}  # micro-batch -> its loss already divided by m
        self._stash: dict[int, _Stash] = {}
        self._bytes = SavedBytes({p.untyped_storage().data_ptr() for p in self.module.parameters()})
        self.peak_saved_bytes = 0  # most bytes held for backward at once since start_batch()
        self.peak_inflight = 0  # most micro-batches stashed at once since start_batch()
        # I/W needs every linear layer's input and output; a schedule with full backwards does not,
        # and skips the hooks (one Python call per layer per micro-batch)
        self.split_backward = split_backward
        self._recorder = LayerCallRecorder(self.module) if split_backward else None
        # parameters no layer rule covers: I computes their gradients (weight_grad.py says why)
        self._params_in_i = self._recorder.params_done_in_i(self.module) if split_backward else []
        # B's spent graph (autograd already freed its saved tensors; tearing down its ~1000 nodes takes
        # about a millisecond): with defer_graph_release it is kept until release_graphs(), so that a
        # caller can tear it down while it idles (the distributed engine: waiting for a message), not
        # while a peer waits for it; at most n_microbatches are kept (the oldest goes first)
        self.defer_graph_release = defer_graph_release
        self._spent: list[Tensor] = []

    # ---- bookkeeping ---------------------------------------------------------------------------
    def _checkpointed_inputs(self) -> int:
        return sum(s.inp.nbytes for s in self._stash.values() if s.out is None and s.pending is None)

    def saved_bytes(self) -> int:
        """Bytes held right now for backward: tensors autograd saved, plus checkpointed inputs."""
        return self._bytes.total + self._checkpointed_inputs()

    def _note_peak(self) -> None:
        self.peak_saved_bytes = max(self.peak_saved_bytes, self._bytes.peak + self._checkpointed_inputs())
        self.peak_inflight = max(self.peak_inflight, len(self._stash))

    def inflight(self) -> int:
        """Micro-batches whose forward ran and whose backward has not finished (W included)."""
        return len(self._stash)

    # ---- forward -------------------------------------------------------------------------------
    def _run_forward(self, stash: _Stash) -> Tensor:
        """Forward with the graph recorded (and measured); returns the output (or the loss)."""
        stash.calls, stash.holders = [], []
        counting = self._bytes.counting(stash.holders) if self.track_memory else nullcontext()
        if self._recorder is not None:
            self._recorder.start(stash.calls)
        try:
            with counting:
                return self._forward_and_loss(stash)
        finally:
            if self._recorder is not None:
                self._recorder.stop()

    def _forward_and_loss(self, stash: _Stash) -> Tensor:
        with autocast(self.precision, self.device):
            out = self.module(stash.inp)
            return lm_loss(out, stash.target) / self.n_microbatches if self.is_last else out

    # ---- one action ----------------------------------------------------------------------------
    def run(self, action: Action, inp: Tensor | None, target: Tensor | None = None) -> Tensor | None:
        """Run one action of this stage; return what it passes on (None when nothing travels).

        F: `inp` is the token ids (stage 0) or the previous stage's activation; `target` the targets
        (read by the last stage only). Returns the activation for the next stage.
        B or I: `inp` is the gradient of this stage's output (None on the last stage: it starts from
        the loss). Returns the gradient of this stage's input. W: needs nothing, returns None."""
        require(
            action.stage == self.stage, f"action {action} belongs to stage {action.stage}, not {self.stage}"
        )
        mb = action.microbatch
        if action.kind is Kind.F:
            return self.forward(mb, inp, target)
        if action.kind is Kind.B:
            return self.backward(mb, inp)
        if action.kind is Kind.I:
            return self.backward_input(mb, inp)
        self.backward_weight(mb)
        return None

    def forward(self, mb: int, inp: Tensor, target: Tensor | None = None) -> Tensor | None:
        """F of micro-batch `mb` (arguments as for ``run``). The last stage records ``losses[mb]``
        (loss / m) and returns None; the others return their activation, detached: the graph stays here."""
        require(mb not in self._stash, f"stage {self.stage} already ran the forward of micro-batch {mb}")
        require(
            not self.is_last or target is not None,
            f"stage {self.stage} is the last stage and computes the loss, so forward needs targets",
        )
        inp = inp.to(self.device)
        if not self.is_first:
            inp = inp.detach().requires_grad_(True)  # a leaf: its .grad is what we send back
        stash = _Stash(inp, target.to(self.device) if self.is_last else None)
        if checkpointed(self.checkpoint, mb, self.n_microbatches):
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
        require(stash.pending is None, f"stage {self.stage} already ran the I of micro-batch {mb}")
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
        if self.defer_graph_release:
            self._spent.append(stash.out)
            if len(self._spent) > self.n_microbatches:  # a caller that never idles: keep it bounded
                del self._spent[0]
        stash.free()
        return None if self.is_first else stash.inp.grad

    def backward_input(self, mb: int, grad_output: Tensor | None) -> Tensor | None:
        """I: the gradient for the stage input (returned; None on stage 0), and on the way every linear
        layer's output gradient, kept with its input for W; the rest of the graph is freed."""
        require(
            self.split_backward,
            f"stage {self.stage} was built with split_backward=False, so it cannot run I (input-gradient "
            "backward); build it with split_backward=True for zero-bubble schedules",
        )
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

    # ---- after the flush -----------------------------------------------------------------------
    def loss(self) -> float:
        """The batch's mean loss (sum of the micro-batches' loss / m); last stage only."""
        return sum(self.losses[mb] for mb in sorted(self.losses))

    def start_batch(self) -> None:
        """Forget the previous batch: its losses, and whatever an interrupted batch (Ctrl-C, an
        exception) left stashed, so the next batch starts from nothing held."""
        for stash in self._stash.values():
            stash.free()
        self._stash.clear()
        self._bytes.clear()
        self.losses = {}
        self.peak_saved_bytes = self.peak_inflight = 0

    def release_graphs(self) -> None:
        """Drop the spent graphs that ``defer_graph_release`` kept (they hold no saved tensors)."""
        self._spent.clear()

    def close(self) -> None:
        """Take the forward hooks off the module (it may be reused by another runtime)."""
        self.release_graphs()
        if self._recorder is not None:
            self._recorder.close()
