"""One pipeline stage at work: its device, its forward and backward, and what it holds (lessons 04, 11).

Both engines (local and distributed) run a stage through ``StageRuntime``; only the way tensors
travel between stages differs. Try it::

    import torch
    from course_lib.shelf.model import ModelConfig, build_model
    from course_lib.shelf.stage import StageRuntime
    from course_lib.shelf.schedule import Action
    model = build_model(ModelConfig(n_layers=2, d_model=16, vocab_size=8, seq_len=8))
    stage = StageRuntime(0, 1, torch.nn.Sequential(*model.layers), n_microbatches=1)
    x = torch.randint(0, 8, (2, 8)); y = torch.randint(0, 8, (2, 8))
    stage.run(Action.parse("0F0"), x, y); print(stage.saved_bytes(), stage.losses)  # held for backward
    stage.run(Action.parse("0B0"), None); print(stage.saved_bytes())               # 0: stash freed

**Devices.** ``device="auto"`` for p stages: one CUDA GPU per stage when there are at least p;
otherwise every stage on cuda:0, else on Apple's ``mps``, else on the CPU. Stages that share one
real device are *simulated devices*: the engines measure each stage's compute on it (synchronising
the accelerator, so a time covers the work and not its launch) and simulate the concurrency.

**The stash**, what a micro-batch leaves on a stage between its forward and its backward:

- ``checkpoint="never"``: the autograd graph with every tensor saved for backward;
- a checkpointed micro-batch: only the stage's *input*; the forward runs again, with the graph,
  just before the backward (GPipe's activation checkpointing, "re-materialisation"). ``"always"``
  checkpoints every micro-batch, ``"except_last"`` all but the last one (its backward comes right
  after its forward in GPipe, so recomputing it would buy no memory).

**Memory is measured, not modelled**: a saved-tensors hook sees every tensor autograd keeps for
backward, and ``SavedBytes`` counts its storage (weights excluded, a storage saved twice counted
once) until the micro-batch's backward frees it. The hook costs about 10% of a step on the toy CPU
model; ``track_memory=False`` skips it for like-for-like timing (then only checkpointed inputs count).

The zero-bubble schedules split B into I (input gradient) and W (weight gradient). That runtime is a
subclass in the room ``course_lib/engines/split_backward.py``, which registers itself here when
imported (``course_lib.engines`` imports it); ``StageRuntime(..., split_backward=True)`` builds it.

One file over 300 lines, read whole: where a stage runs, what it does, and what it holds meanwhile.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import nullcontext
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from course_lib.shelf.errors import CourseError, require
from course_lib.shelf.model import autocast, lm_loss, precision_dtype
from course_lib.shelf.schedule import Action, Kind

# ---- devices -----------------------------------------------------------------------------------
DEVICE_CHOICES = ("auto", "cpu", "cuda", "cuda:N", "mps")


def gpu_count() -> int:
    """CUDA GPUs this process can use."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def accelerator() -> str | None:
    """The accelerator 'auto' picks: 'cuda', else 'mps' (Apple silicon), else None (the CPU)."""
    if gpu_count():
        return "cuda"
    return "mps" if torch.backends.mps.is_available() else None


def resolve_device(name: str = "auto") -> torch.device:
    """'auto' -> cuda:0, else mps, else the CPU; 'cpu'; 'mps'; 'cuda' or 'cuda:N' (must exist)."""
    key = name.strip().lower() if isinstance(name, str) else ""
    if key == "auto":
        kind = accelerator()
        return torch.device("cuda:0" if kind == "cuda" else kind or "cpu")
    if key in ("cpu", "mps"):
        require(
            key == "cpu" or torch.backends.mps.is_available(),
            "device 'mps' is not available: it needs Apple silicon; use 'cpu' or 'auto'",
        )
        return torch.device(key)
    if key == "cuda" or (key.startswith("cuda:") and key[5:].isdigit()):
        index = int(key[5:]) if key != "cuda" else 0
        require(
            index < gpu_count(),
            f"device {name!r} is not available: this machine has {gpu_count()} CUDA GPU(s); "
            "use 'cpu' or 'auto'",
        )
        return torch.device(f"cuda:{index}")
    raise CourseError(f"unknown device {name!r}; expected one of {', '.join(DEVICE_CHOICES)}")


def stage_devices(n_stages: int, device: str = "auto") -> list[torch.device]:
    """One torch.device per pipeline stage, by the rule in the module docstring ('cuda' spreads the
    stages as 'auto' does; any other choice puts every stage on the device it names)."""
    require(
        isinstance(n_stages, int) and n_stages >= 1, f"n_stages must be a whole number >= 1, got {n_stages!r}"
    )
    shared = resolve_device(device)  # checks the name whatever the machine
    if device.strip().lower() in ("auto", "cuda") and gpu_count() >= n_stages:
        return [torch.device(f"cuda:{i}") for i in range(n_stages)]
    return [shared] * n_stages


def synchronize(devices: Iterable[torch.device]) -> None:
    """Wait until the accelerators among `devices` finish their queued work, so that a clock read just
    after covers the work itself (CUDA and mps run asynchronously; the CPU needs no wait)."""
    for d in set(devices):
        if d.type == "cuda":
            torch.cuda.synchronize(d)
        elif d.type == "mps":
            torch.mps.synchronize()


# ---- memory held for backward ------------------------------------------------------------------
class SavedTensor:
    """What autograd keeps instead of a saved tensor: the tensor, and the storage it is counted under.
    No ``__del__`` on purpose: a finalizer runs wherever the graph happens to be freed, and a Ctrl-C
    landing inside it is printed and dropped. The bytes are given back when the stash is freed."""

    __slots__ = ("tensor", "_tracker", "_key")

    def __init__(self, tensor: Tensor, tracker: SavedBytes, key: int | None):
        self.tensor, self._tracker, self._key = tensor, tracker, key

    def drop(self) -> None:
        if self._key is not None:
            self._tracker.release(self._key)
            self._key = None
        self.tensor = None


class SavedBytes:
    """Bytes of storage alive because autograd saved them; a storage saved twice counts once."""

    def __init__(self, excluded: set[int]) -> None:
        self.live: dict[int, list[int]] = {}  # storage pointer -> [times saved, bytes]
        self.total = self.peak = 0
        self.excluded = excluded  # storages of the weights: not activation memory

    def pack(self, tensor: Tensor, holders: list[SavedTensor]) -> SavedTensor:
        """Count `tensor` (unless it is a weight) and add its holder to `holders` (the stash's)."""
        storage = tensor.untyped_storage()
        key, nbytes = storage.data_ptr(), storage.nbytes()
        if key in self.excluded or nbytes == 0:
            return SavedTensor(tensor, self, None)
        holders.append(holder := SavedTensor(tensor, self, key))
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


# ---- the stage ---------------------------------------------------------------------------------
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
class Stash:
    """What one micro-batch leaves on a stage between its forward and its (last) backward."""

    inp: Tensor | None  # the stage input (a leaf that requires grad, except token ids on stage 0)
    target: Tensor | None
    out: Tensor | None = None  # stage output, or the loss on the last stage; None while checkpointed
    # what autograd saved; a saved tensor that is its own op's output would otherwise keep the
    # retained graph alive in a reference cycle until the garbage collector runs
    holders: list[SavedTensor] = field(default_factory=list)

    def free(self) -> None:
        for holder in self.holders:
            holder.drop()
        self.holders, self.out = [], None


# the runtime of schedules that split backward into I and W; its room fills this when imported
SPLIT_BACKWARD_RUNTIME: list[type[StageRuntime]] = []


class StageRuntime:
    """Runs one pipeline stage's actions on one device; holds the stashed activations."""

    stash_type = Stash  # what a forward stashes (the split backward keeps more per micro-batch)

    def __new__(cls, *args, split_backward: bool = False, **kwargs) -> StageRuntime:
        """``split_backward=True`` (a schedule of I and W actions) builds the registered subclass."""
        if split_backward and not getattr(cls, "splits_backward", False):
            require(
                bool(SPLIT_BACKWARD_RUNTIME),
                "this schedule splits backward into I and W, whose runtime lives in the room "
                "course_lib.engines.split_backward: `import course_lib.engines` first",
            )
            cls = SPLIT_BACKWARD_RUNTIME[-1]
        return super().__new__(cls)

    def __init__(
        self, stage: int, n_stages: int, module: nn.Module, n_microbatches: int, checkpoint: str = "never",
        device: torch.device | str = "cpu", track_memory: bool = True, split_backward: bool = False,
        precision: str = "float32",
    ):  # fmt: skip
        require(0 <= stage < n_stages, f"stage must be in 0..{n_stages - 1}, got {stage}")
        require(n_microbatches >= 1, f"micro-batches must be >= 1, got {n_microbatches}")
        check_checkpoint(checkpoint)
        precision_dtype(precision)  # a known name (the config allows autocast only on a CUDA GPU)
        self.stage, self.n_stages, self.n_microbatches = stage, n_stages, n_microbatches
        self.checkpoint, self.track_memory = checkpoint, track_memory
        # the forward under autocast (model.autocast). Weights, gradients and the messages between
        # stages stay float32: every block adds its output to the float32 residual stream, and
        # autocast leaves that sum in float32 (tests/engines/test_precision.py)
        self.precision = precision
        self.device = torch.device(device)
        self.module = module.to(self.device)
        self.is_first, self.is_last = stage == 0, stage == n_stages - 1
        self.losses: dict[int, float] = {}  # micro-batch -> its loss already divided by m
        self._stash: dict[int, Stash] = {}
        self._bytes = SavedBytes({p.untyped_storage().data_ptr() for p in self.module.parameters()})
        self.peak_saved_bytes = 0  # most bytes held for backward at once since start_batch()
        self.peak_inflight = 0  # most micro-batches stashed at once since start_batch()

    # ---- bookkeeping ---------------------------------------------------------------------------
    def _checkpointed_inputs(self) -> int:
        return sum(s.inp.nbytes for s in self._stash.values() if s.out is None and s.inp is not None)

    def saved_bytes(self) -> int:
        """Bytes held right now for backward: tensors autograd saved, plus checkpointed inputs."""
        return self._bytes.total + self._checkpointed_inputs()

    def _note_peak(self) -> None:
        self.peak_saved_bytes = max(self.peak_saved_bytes, self._bytes.peak + self._checkpointed_inputs())
        self.peak_inflight = max(self.peak_inflight, len(self._stash))

    def inflight(self) -> int:
        """Micro-batches whose forward ran and whose backward has not finished."""
        return len(self._stash)

    # ---- one action ----------------------------------------------------------------------------
    def run(self, action: Action, inp: Tensor | None, target: Tensor | None = None) -> Tensor | None:
        """Run one action of this stage; return what it passes on (None when nothing travels).

        F: `inp` is the token ids (stage 0) or the previous stage's activation; `target` the targets
        (read by the last stage only). Returns the activation for the next stage.
        B (or I): `inp` is the gradient of this stage's output (None on the last stage: it starts from
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

    # ---- forward -------------------------------------------------------------------------------
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
        stash = self.stash_type(inp, target.to(self.device) if self.is_last else None)
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

    def _run_forward(self, stash: Stash) -> Tensor:
        """Forward with the graph recorded (and its saved tensors counted); the output or the loss."""
        stash.holders = []
        with self._bytes.counting(stash.holders) if self.track_memory else nullcontext():
            return self._forward_and_loss(stash)

    def _forward_and_loss(self, stash: Stash) -> Tensor:
        with autocast(self.precision, self.device):
            out = self.module(stash.inp)
            return lm_loss(out, stash.target) / self.n_microbatches if self.is_last else out

    # ---- backward ------------------------------------------------------------------------------
    def _ready_for_backward(self, mb: int) -> Stash:
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

    def backward(self, mb: int, grad_output: Tensor | None) -> Tensor | None:
        """Full backward (B) of micro-batch `mb`: weight gradients accumulate into ``.grad``; returns
        the gradient for the stage input (None on stage 0). Frees the micro-batch's stash."""
        stash = self._ready_for_backward(mb)
        torch.autograd.backward(stash.out, self._grad_seed(grad_output))
        del self._stash[mb]
        self.spent(stash.out)
        stash.free()
        return None if self.is_first else stash.inp.grad

    def backward_input(self, mb: int, grad_output: Tensor | None) -> Tensor | None:
        """I (zero-bubble schedules): only the split-backward runtime runs it."""
        raise CourseError(
            f"stage {self.stage} runs full backwards (B); I and W need the split-backward runtime: "
            "StageRuntime(..., split_backward=True) after `import course_lib.engines`"
        )

    def backward_weight(self, mb: int) -> None:
        """W (zero-bubble schedules): only the split-backward runtime runs it."""
        self.backward_input(mb, None)

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

    def spent(self, graph: Tensor) -> None:
        """Door: B's spent graph (its output), torn down as the stash lets go of it; a room keeps it until
        the rank idles instead (``course_lib/engines/idle_release.py``)."""

    def close(self) -> None:
        """Door: let go of what the runtime keeps on the side (a subclass takes its hooks off)."""
