"""Your own rank loop on real processes (lesson 04c, assignment a04c): the harness that runs and checks it.

You write what one rank of a pipeline does, with torch.distributed's own point-to-point calls (``isend`` /
``irecv``, ``batch_isend_irecv``, or blocking ``send`` / ``recv``), as one function in a module file::

    def one_f_one_b(rank: OwnRank) -> None:      # a04c: warm-up, steady state, cool-down
        ...

(the lesson's worked example is GPipe's ``all_forward_all_backward``, run with ``function=`` its name).

``run_own_pipeline(path, p=2, m=4)`` starts p processes (``shelf/launcher.spawn``: gloo on the CPU, NCCL
with one GPU per rank). Each imports your file *by path*: a function defined in a notebook cell cannot be
unpickled by a spawned process, so the lesson writes the cell to a temp folder (``%%writefile``) and every
rank loads that file. Each rank builds its stage from the seed, as the distributed engine does
(``shelf/rank_loop.PipelineRank``), and calls your function with an ``OwnRank``: who it is, its
neighbours, the micro-batches, the shape and dtype of every message, and two calls that run and time the
stage's compute (``forward``, ``backward``). What comes back, an ``OwnRun``: the loss and gradients beside
the reference trainer's (``shelf/reference.py``), the micro-batches each stage held at once, every message
each rank sent and received, and a measured Timeline to draw beside the simulator's.

How your sends and receives are seen: for the length of your function, torch.distributed's ``isend``,
``irecv``, ``send``, ``recv`` and ``batch_isend_irecv`` are wrapped in the rank (``MessageWatch``). The
wrappers pass every call on unchanged, log it, and notice the common mistakes as they happen: a receive
buffer of the wrong shape or dtype, a buffer changed before its send completed, a forward or backward
that reads a receive it never waited for.

A rank that waits past the stall limit follows the engines' rule (``shelf/p2p.py``): its process group
times out after `stall_s`, the wait raises ``PeerFailure`` naming the rank, the operation, the peer and the
seconds waited, and the launcher ends the run and names the rank (``OwnRun.stalls``). Never a hang.

A grader pairs the student's rank with its own (``peers``: rank -> another file's function), which run in
processes the student's code never touched and note what arrives in ``rank.observed``; a function's
``prepare(rank)`` attribute, if it has one, runs before the ranks start (a grader's rank computes there
what it expects, so that the student's rank never waits on that arithmetic), and its ``finish(rank,
result)`` attribute in the rank's process once its RankResult is built (a grader's rank stamps its report
there). ``private`` (rank -> arguments) reaches only those ranks' functions, as ``rank.private``, and a
``guard`` closes the run to a rank nobody vouches for (both ``shelf/launcher.spawn``'s; course_grading
holds the grader's).

Data parallelism beside it (``dp=2``): two pipeline replicas, each on its own half of the batch; after
your function the harness all-reduces each stage's gradients with its replica's, once after the last
micro-batch's backward (``sync="last"``), or after every micro-batch's backward (``sync="every"``), and
measures the bytes and seconds that took.
"""

from __future__ import annotations

import importlib.util
import math
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
from torch import Tensor

from course_lib.shelf.errors import CourseError, require, whole
from course_lib.shelf.launcher import STALL_S, DistributedError, Guard, PeerFailure, RankContext, spawn
from course_lib.shelf.model import lm_loss, split_microbatches, stage_modules, uniform
from course_lib.shelf.rank_loop import common_clock
from course_lib.shelf.reference import (
    TrainConfig,
    corpus_and_model,
    first_batch,
    max_grad_diff,
    reference_gradients,
)
from course_lib.shelf.schedule import Action, Kind
from course_lib.shelf.stage import gpu_count
from course_lib.shelf.timeline import MEASURED, Span, Timeline

SYNCS = ("last", "every")  # when data parallelism all-reduces a stage's gradients (module doc)
TOLERANCE = 1e-5  # losses and gradients equal the reference's within this (float32 sums in another order)
_STALL = re.compile(r"rank (\d+) waited ([\d.]+) s in (\S+) (?:from|to) rank (\d+)")


@dataclass(frozen=True)
class MessageSeen:
    """One message as a rank handed it over (``isend``, ``send``) or posted a receive for it."""

    op: str
    peer: int
    shape: tuple[int, ...]
    dtype: str
    at: float  # seconds on the run's common clock

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * torch.empty((), dtype=getattr(torch, self.dtype)).element_size()


@dataclass(frozen=True)
class Stall:
    """A rank that waited past the stall limit: which rank, in which operation, for which peer, how long."""

    rank: int
    operation: str
    peer: int
    waited_s: float

    def __str__(self) -> str:
        way = "to" if self.operation in ("isend", "send") else "from"
        return f"rank {self.rank} waited {self.waited_s:.1f} s in {self.operation} {way} rank {self.peer}"


class _Handle:
    """A torch.distributed Work, as the student's code holds it: ``wait`` is timed and named."""

    def __init__(self, work, watch: MessageWatch, op: str, peer: int, tensor: Tensor):
        self.work, self.watch, self.op, self.peer, self.tensor = work, watch, op, peer, tensor
        # what left, to compare with the tensor when the send is waited for
        self.sent_copy = tensor.detach().clone() if op == "isend" else None
        self.done = False

    def wait(self, timeout=None) -> bool:
        if not self.done:
            self.watch.wait(self)
        return True

    def is_completed(self) -> bool:
        return self.done or self.work.is_completed()

    def __getattr__(self, name: str):  # anything else a Work has (result, get_future, ...)
        return getattr(self.work, name)


class MessageWatch:
    """Inside one rank, for the length of the student's function: torch.distributed's point-to-point
    calls, wrapped (module doc). `expect`: the (shape, dtype) of every message."""

    NAMES = ("isend", "irecv", "send", "recv", "batch_isend_irecv")

    def __init__(self, rank: int, expect: tuple[tuple[int, ...], torch.dtype], now: Callable[[], float]):
        self.rank, self.expect, self.now = rank, expect, now
        self.sent: list[MessageSeen] = []
        self.received: list[MessageSeen] = []
        self.mistakes: list[str] = []  # what the rank did wrong, in words (the first of each kind)
        self.open_sends: list[_Handle] = []  # sends not yet waited for
        self.open_recvs: dict[int, _Handle] = {}  # by buffer address: receives not yet waited for
        self.waited_s = 0.0  # seconds spent waiting for messages
        self._saved: dict[str, tuple[object, object]] = {}

    # ---- the wrapped calls ---------------------------------------------------------------------
    def isend(self, tensor: Tensor, dst: int | None = None, group=None, tag: int = 0, **kw) -> _Handle:
        dst = _peer(dst, group, kw.get("group_dst"))
        self._check(tensor, "send", dst)
        self.sent.append(MessageSeen("isend", dst, tuple(tensor.shape), _dtype(tensor), self.now()))
        work = self._orig("isend")(tensor, None if "group_dst" in kw else dst, group, tag, **kw)
        handle = _Handle(work, self, "isend", dst, tensor)
        self.open_sends.append(handle)
        return handle

    def irecv(self, tensor: Tensor, src: int | None = None, group=None, tag: int = 0, **kw) -> _Handle:
        src = _peer(src, group, kw.get("group_src"))
        self._check(tensor, "receive", src)
        if any(_shares(tensor, h.tensor) for h in self.open_sends):
            self._mistake("reuse", f"rank {self.rank} receives into a buffer whose send is not complete")
        self.received.append(MessageSeen("irecv", src, tuple(tensor.shape), _dtype(tensor), self.now()))
        work = self._orig("irecv")(tensor, None if "group_src" in kw else src, group, tag, **kw)
        handle = _Handle(work, self, "irecv", src, tensor)
        self.open_recvs[tensor.data_ptr()] = handle
        return handle

    def send(self, tensor: Tensor, dst: int | None = None, group=None, tag: int = 0, **kw) -> None:
        handle = self.isend(tensor, dst, group, tag, **kw)
        handle.op = "send"
        handle.wait()

    def recv(self, tensor: Tensor, src: int | None = None, group=None, tag: int = 0, **kw) -> int:
        handle = self.irecv(tensor, src, group, tag, **kw)
        handle.op = "recv"
        handle.wait()
        return src

    def batch_isend_irecv(self, ops: list) -> list:
        # torch's own: it calls isend and irecv by their module names, which are ours while we watch;
        # NCCL's coalescing hands back its own works (no per-message handle): those are waited as they are
        return self._orig("batch_isend_irecv")(ops)

    # ---- waits and checks ----------------------------------------------------------------------
    def wait(self, handle: _Handle) -> None:
        """The engines' rule: a wait past the process group's timeout fails, naming rank, op, peer, time."""
        start = self.now()
        try:
            handle.work.wait()
        except Exception as err:
            waited = self.now() - start
            direction = "to" if handle.op in ("isend", "send") else "from"
            raise PeerFailure(
                f"rank {self.rank} waited {waited:.1f} s in {handle.op} {direction} rank {handle.peer} and "
                f"the wait failed: {type(err).__name__}: {str(err).splitlines()[0][:200]}",
                peer=handle.peer,
            ) from err
        self.waited_s += self.now() - start
        handle.done = True
        if handle in self.open_sends:
            self.open_sends.remove(handle)
            self._check_unchanged(handle)
        self.open_recvs.pop(handle.tensor.data_ptr(), None)

    def check_arrived(self, tensor: Tensor | None, what: str, mb: int) -> None:
        """A forward's input or a backward's gradient must come from a receive that was waited for."""
        if tensor is not None and tensor.data_ptr() in self.open_recvs:
            self._mistake(
                "early", f"rank {self.rank} ran the {what} of micro-batch {mb} on a receive not waited for"
            )

    def finish(self) -> None:
        """After the student's function: wait for the sends it left open (as p2p.RankComm.finish)."""
        for handle in list(self.open_sends):
            handle.wait()
        require(
            not self.open_recvs,
            f"rank {self.rank} posted {len(self.open_recvs)} receive(s) it never waited for: every message "
            "a rank receives must be waited for before it is used",
        )

    def _check(self, tensor: Tensor, what: str, peer: int | None) -> None:
        shape, dtype = self.expect
        if tuple(tensor.shape) != shape or tensor.dtype != dtype:
            got = f"{tensor.dtype} {tuple(tensor.shape)}"
            self._mistake(
                "buffer", f"rank {self.rank} would {what} a {got} tensor (peer {peer}); every message is "
                f"{dtype} {shape}",
            )  # fmt: skip
            why = (
                "a receive buffer must match what its sender sends" if what == "receive"
                else "a stage sends its output activation or its input gradient, nothing else"
            )  # fmt: skip
            raise CourseError(f"{self.mistakes[-1].split('] ', 1)[1]}: {why}")
        require(isinstance(peer, int), f"rank {self.rank}: a {what} needs its peer rank, got {peer!r}")

    def _check_unchanged(self, handle: _Handle) -> None:
        if not torch.equal(handle.sent_copy, handle.tensor.detach()):
            self._mistake("reuse", f"rank {self.rank} changed a tensor it sent to rank {handle.peer} before "
                          "that send had completed")  # fmt: skip

    def _mistake(self, kind: str, text: str) -> None:
        if not any(m.startswith(f"[{kind}]") for m in self.mistakes):
            self.mistakes.append(f"[{kind}] {text}")

    # ---- wrap and unwrap -----------------------------------------------------------------------
    def _orig(self, name: str):
        return self._saved[name][1]

    def __enter__(self) -> MessageWatch:
        for name in self.NAMES:  # both homes: torch.distributed.X and the c10d module batch_isend_irecv reads
            self._saved[name] = (getattr(dist, name), getattr(c10d, name))
            # one object in both homes: P2POp and batch_isend_irecv compare them with `is`
            mine = getattr(self, name)
            setattr(dist, name, mine)
            setattr(c10d, name, mine)
        return self

    def __exit__(self, *exc) -> None:
        for name, (public, inner) in self._saved.items():
            setattr(dist, name, public)
            setattr(c10d, name, inner)


def _peer(rank: int | None, group, group_rank: int | None) -> int | None:
    """The peer's process rank, given as a rank or (batch_isend_irecv) as a rank within `group`."""
    if rank is not None or group_rank is None:
        return rank
    return group_rank if group is None else dist.get_global_rank(group, group_rank)


def _dtype(tensor: Tensor) -> str:
    return str(tensor.dtype).removeprefix("torch.")


def _shares(a: Tensor, b: Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


class OwnRank:
    """What the student's rank function gets: who it is, its neighbours, its micro-batches, the shape and
    dtype of every message, and the stage's compute (``forward``, ``backward``), timed."""

    def __init__(
        self, job: Job, global_rank: int, device: torch.device, modules, batch, now: Callable[[], float],
        private: tuple = (),
    ):  # fmt: skip
        p = job.p
        self.replica, self.stage = divmod(global_rank, p)  # this rank's pipeline and its place in it
        self.p, self.m, self.device = p, job.m, device
        self.is_first, self.is_last = self.stage == 0, self.stage == p - 1
        self.prev = None if self.is_first else global_rank - 1  # the process rank of the previous stage
        self.next = None if self.is_last else global_rank + 1  # ... and of the next one
        self.module = modules[self.stage].to(device)
        cfg = job.cfg  # every message's shape: one micro-batch's activations (or their gradient)
        self.shape = (cfg.batch_size // cfg.microbatches, cfg.seq_len, cfg.d_model)
        self.dtype = torch.float32
        self._batch, self._now = batch, now
        self._watch: MessageWatch | None = None  # set by the harness
        self._inputs: dict[int, Tensor] = {}  # micro-batch -> the input its backward ends at
        self.spans: list[tuple[Action, float, float]] = []
        self.losses: list[float] = []  # on the last stage: what each backward started from
        self.peak_held = 0  # most micro-batches whose forward ran and whose backward has not
        self.backwards = 0
        self.after_backward: Callable[[int], None] | None = None  # data parallelism's door (_DataParallel)
        self.cfg = cfg  # the run's sizes and seed (an observing rank rebuilds the model from them)
        self.observed: list[str] = []  # what a grader's rank noticed about its peers' messages
        self.private = private  # the arguments only this rank received (run_own_pipeline's `private`)

    def tokens(self, i: int) -> Tensor:
        """Micro-batch `i`'s token ids (stage 0's input)."""
        return self._batch[i][0].to(self.device)

    def targets(self, i: int) -> Tensor:
        """Micro-batch `i`'s targets (the last stage's loss reads them)."""
        return self._batch[i][1].to(self.device)

    @staticmethod
    def loss_fn(logits: Tensor, targets: Tensor) -> Tensor:
        """The mean next-token cross-entropy of one micro-batch (the reference's ``lm_loss``)."""
        return lm_loss(logits, targets)

    def forward(self, i: int, x: Tensor) -> Tensor:
        """F of micro-batch `i`: this stage's layers on `x` (token ids on stage 0, else the received
        activation); returns the output, its graph kept here for ``backward``."""
        require(0 <= i < self.m, f"micro-batch {i} is not one of 0..{self.m - 1}")
        require(i not in self._inputs, f"stage {self.stage} already ran the forward of micro-batch {i}")
        if self._watch is not None:
            self._watch.check_arrived(x, "forward", i)
        start = self._now()
        if not self.is_first:
            x = x.to(self.device).detach().requires_grad_(True)  # a leaf: its .grad goes back to prev
        y = self.module(x)
        self._inputs[i] = x
        self.peak_held = max(self.peak_held, len(self._inputs))
        self.spans.append((Action(self.stage, Kind.F, i), start, self._now()))
        return y

    def backward(self, i: int, y: Tensor, dy: Tensor | None = None) -> Tensor | None:
        """B of micro-batch `i`: back through the graph from `y` (the last stage: its loss; else the
        output of ``forward``) with `dy`, the gradient received for it (None on the last stage). Returns
        the gradient of this stage's input, to send to prev (None on stage 0)."""
        require(i in self._inputs, f"stage {self.stage} has no forward of micro-batch {i} to go back through")
        require(self.is_last or dy is not None, f"stage {self.stage} needs the gradient of its output for B")
        if self._watch is not None:
            self._watch.check_arrived(dy, "backward", i)
        start = self._now()
        if self.is_last:
            require(y.numel() == 1, f"the last stage's B starts from the loss; got {tuple(y.shape)}")
            self.losses.append(y.item())
        torch.autograd.backward(y, None if self.is_last else dy.to(self.device))
        x = self._inputs.pop(i)
        self.spans.append((Action(self.stage, Kind.B, i), start, self._now()))
        self.backwards += 1
        if self.after_backward is not None:
            self.after_backward(i)
        return None if self.is_first else x.grad


# ---- the parent's side ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Job:
    """One run of a student's rank function: where it is, and the sizes (checked in ``make_job``)."""

    path: str
    function: str
    p: int
    m: int
    cfg: TrainConfig
    stall_s: float
    dp: int = 1
    sync: str = "last"
    peers: tuple[tuple[int, str, str], ...] = ()  # (rank, path, function): ranks running another file's
    repeats: int = 1  # calls of the function in one launch (timings want several)
    limit_s: float = 120.0  # the whole run's wall clock: a rank that computes without end is stopped


@dataclass
class RankResult:
    """What one rank hands back."""

    rank: int
    stage: int
    spans: list[tuple[Action, float, float]]
    losses: list[float]
    grads: dict[str, Tensor | None]
    sent: list[MessageSeen]
    received: list[MessageSeen]
    mistakes: list[str]
    peak_held: int
    waited_s: float
    sync_s: list[float]  # per call: seconds this rank spent all-reducing gradients (data parallelism)
    observed: list[str]  # what this rank's function noted (a grader's rank: its peers' messages)
    sync_bytes: int  # bytes it all-reduced in its last call
    step_s: list[float]  # per call: seconds from the common start to its function's end
    stamp: str = ""  # what its function's finish hook stamped on it (a grader's rank: its report's seal)


@dataclass
class OwnRun:
    """The outcome of ``run_own_pipeline``: how the student's ranks did against the reference."""

    job: Job
    ranks: list[RankResult] = field(default_factory=list)
    loss: float | None = None
    reference_loss: float | None = None
    grad_diff: float | None = None
    stalls: list[Stall] = field(default_factory=list)
    error: str | None = None  # the run failed (the launcher's words), or None

    @property
    def ok(self) -> bool:
        """Loss and gradients equal the reference's, and nothing failed."""
        if self.error is not None or self.grad_diff is None:
            return False
        return self.grad_diff < TOLERANCE and math.isclose(self.loss, self.reference_loss, rel_tol=TOLERANCE)

    @property
    def mistakes(self) -> list[str]:
        return [m for r in self.ranks for m in r.mistakes]

    @property
    def peak_held(self) -> list[int]:
        """Per stage (pipeline 0): the most micro-batches held at once."""
        return [r.peak_held for r in self.ranks[: self.job.p]]

    @property
    def sync_bytes(self) -> int:
        """Bytes one replica's stages all-reduced in the last call (data parallelism; 0 without)."""
        return sum(r.sync_bytes for r in self.ranks[: self.job.p])

    def sync_seconds(self, skip: int = 1) -> list[float]:
        """Per call after the first `skip` (warm-up): seconds the slowest rank spent all-reducing."""
        return [max(r.sync_s[k] for r in self.ranks) for k in range(skip, self.job.repeats)]

    @property
    def timeline(self) -> Timeline:
        """What pipeline 0's ranks did, when: measured wall clock of real processes."""
        mine = self.ranks[: self.job.p]
        t0 = min((s for r in mine for _, s, _ in r.spans), default=0.0)
        spans = [Span(r.stage, a, s - t0, e - t0) for r in mine for a, s, e in r.spans]
        return Timeline(source=MEASURED, n_devices=self.job.p, spans=spans, schedule_name="your ranks",
                        n_stages=self.job.p, n_microbatches=self.job.m)  # fmt: skip

    def summary(self) -> str:
        """A few lines: the verdict against the reference, the memory held (beside GPipe's m and 1F1B's
        bound, with no verdict: a function may implement either), the mistakes seen."""
        if self.stalls:
            lines = [f"stalled past the limit of {self.job.stall_s:g} s, the run was stopped:"]
            lines += [f"  {s}" for s in self.stalls]
            pairs = {(s.rank, s.peer) for s in self.stalls}
            if any((b, a) in pairs for a, b in pairs):
                lines.append("  two neighbours wait for each other: neither reaches the call the other needs")
            return "\n".join(lines)
        if self.error is not None:
            return "\n".join([f"the run failed: {self.error}", *(f"  {m}" for m in self.mistakes)])
        lines = [
            f"loss {self.loss:.6f}, reference {self.reference_loss:.6f}; largest gradient difference "
            f"{self.grad_diff:.1e}: {'equal to the reference' if self.ok else 'NOT the reference'}",
            f"micro-batches held at once per stage: {self.peak_held} (GPipe holds all m: "
            f"{[self.job.m] * self.job.p}; 1F1B's bound: {one_f_one_b_bound(self.job.p, self.job.m)})",
        ]  # fmt: skip
        return "\n".join(lines + [f"  {m}" for m in self.mistakes])


def one_f_one_b_bound(p: int, m: int) -> list[int]:
    """The most micro-batches stage s of 1F1B holds at once: min(p - s, m)."""
    return [min(p - s, m) for s in range(p)]


def make_job(path: str | Path, p: int = 2, m: int = 4, *, function: str = "one_f_one_b", n_layers: int = 4,
             d_model: int = 32, seq_len: int = 16, samples_per_microbatch: int = 1, stall_s: float = STALL_S,
             dp: int = 1, sync: str = "last", seed: int = 0, repeats: int = 1, limit_s: float = 120.0,
             peers: dict[int, tuple[str | Path, str]] | None = None) -> Job:  # fmt: skip
    """Check the inputs before any process starts. `n_layers` blocks (plus embedding and head) are cut
    evenly into p stages; a batch of m micro-batches of `samples_per_microbatch` samples each per replica.
    `peers`: ranks that run another file's function instead (the grader's)."""
    path = Path(path)
    require(path.is_file(), f"no file {str(path)!r}: write your rank function there first (%%writefile)")
    p, m = whole("p", p, low=2, high=8), whole("m", m, high=64)
    dp = whole("dp", dp, high=2)
    require(sync in SYNCS, f"sync must be one of {SYNCS}, got {sync!r}")
    require(stall_s > 0, f"stall_s must be > 0 seconds, got {stall_s!r}")
    require(n_layers + 2 >= p, f"{n_layers} blocks plus embedding and head cannot fill {p} stages")
    cfg = TrainConfig(n_layers=n_layers, d_model=d_model, seq_len=seq_len, microbatches=m * dp,
                      batch_size=m * dp * whole("samples_per_microbatch", samples_per_microbatch), steps=1,
                      eval_batches=1, seed=seed)  # fmt: skip
    cfg.check()
    others = tuple((r, str(Path(f)), fn) for r, (f, fn) in sorted((peers or {}).items()))
    repeats = whole("repeats", repeats, high=20)
    require(limit_s > stall_s, f"limit_s must be above the stall limit of {stall_s:g} s, got {limit_s!r}")
    return Job(str(path.resolve()), function, p, m, cfg, float(stall_s), dp, sync, others, repeats, limit_s)


def run_own_pipeline(path: str | Path, p: int = 2, m: int = 4, *, guard: Guard | None = None,
                     private: dict[int, tuple] | None = None, **options) -> OwnRun:  # fmt: skip
    """Run the rank function in `path` on p real processes (module doc); ``make_job``'s options.
    `guard` and `private` go to ``launcher.spawn`` (module doc)."""
    job = make_job(path, p, m, **options)
    world = job.p * job.dp
    backend = "nccl" if gpu_count() >= world else "gloo"
    run = OwnRun(job)
    deadline = time.monotonic() + job.limit_s
    try:
        run.ranks = spawn(_rank_target, world, (job,), backend=backend, timeout_s=job.stall_s,
                          should_stop=lambda: time.monotonic() > deadline, private=private,
                          guard=guard)  # fmt: skip
    except KeyboardInterrupt:
        if time.monotonic() <= deadline:  # Ctrl-C: the student's, not the clock's
            raise
        run.error = (f"the run passed its wall clock of {job.limit_s:g} s and every rank was stopped: a rank "
                     "that computes without end (a loop that never ends?) waits for no message")  # fmt: skip
        return run
    except DistributedError as err:
        message, _, rest = str(err).partition(" (ranks' tracebacks: ")
        log = Path(rest.removesuffix(")")) if rest else None
        # the ranks that waited out the limit, not those that only saw a peer go
        run.stalls = [s for s in _stalls(err) if s.waited_s >= 0.9 * job.stall_s]
        if run.stalls and log is not None:  # the stall report says what the log would (gloo's timeouts):
            log.unlink(missing_ok=True)  # no file left for each "break it" run
        run.error = message if run.stalls or log is None else f"{message} (the ranks' tracebacks: {log})"
        return run
    last = [r for r in run.ranks if r.stage == job.p - 1]
    run.loss = sum(sum(r.losses) for r in last) / job.dp
    grads = {n: g for r in run.ranks[: job.p] for n, g in r.grads.items()}
    run.reference_loss, want = reference_gradients(job.cfg)
    run.grad_diff = max_grad_diff(grads, want)
    return run


def _stalls(err: DistributedError) -> list[Stall]:
    """Every rank whose wait failed, read from the ranks' own reports (``MessageWatch.wait``)."""
    found = []
    for text in err.outcomes.values():
        if (match := _STALL.search(text)) is not None:
            rank, waited, op, peer = match.groups()
            found.append(Stall(int(rank), op, int(peer), float(waited)))
    return sorted(found, key=lambda s: s.rank)


def load_function(path: str, function: str) -> Callable:
    """The function `function` of the module file at `path`, imported by path (each call: afresh)."""
    name = f"own_rank_{abs(hash((path, time.perf_counter_ns())))}"
    spec = importlib.util.spec_from_file_location(name, path)
    require(spec is not None and spec.loader is not None, f"cannot import {path!r} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    fn = getattr(module, function, None)
    require(callable(fn), f"{path} defines no function {function}()")
    return fn


def _rank_target(ctx: RankContext, job: Job, *private) -> RankResult:
    """One spawned rank: build its stage from the seed, call the rank function in its file (`repeats`
    times, gradients zeroed between), report what the last call did and what every call took (`private`:
    this rank's own arguments, ``rank.private``; the function's hooks, module doc)."""
    torch.set_num_threads(1)  # tiny matrices, and p ranks share the machine's cores
    file, function = next(((f, fn) for r, f, fn in job.peers if r == ctx.rank), (job.path, job.function))
    fn = load_function(file, function)
    corpus, model = corpus_and_model(job.cfg)  # the same weights on every rank, from the seed
    layers = model.layers
    modules = stage_modules(layers, uniform(len(layers), job.p))
    x, y = first_batch(corpus, job.cfg)
    replica, stage = divmod(ctx.rank, job.p)
    batch = split_microbatches(x, y, job.m * job.dp)[replica * job.m : (replica + 1) * job.m]
    # every rank creates every group, in the same order (torch.distributed's rule): stage s of each replica
    dp_groups = [dist.new_group([s + k * job.p for k in range(job.dp)]) for s in range(job.p) if job.dp > 1]
    if (prepare := getattr(fn, "prepare", None)) is not None:  # work a function does before any rank starts
        prepare(OwnRank(job, ctx.rank, ctx.device, modules, batch, time.perf_counter, private))
    t0 = common_clock()

    def now() -> float:
        return time.perf_counter() - t0

    mistakes, step_s, sync_s = [], [], []
    for _ in range(job.repeats):
        modules[stage].zero_grad(set_to_none=True)
        rank = OwnRank(job, ctx.rank, ctx.device, modules, batch, now, private)
        sync = _DataParallel(job, rank, dp_groups[stage]) if dp_groups else None
        watch = rank._watch = MessageWatch(ctx.rank, (rank.shape, rank.dtype), now)
        dist.barrier()  # every rank starts the step together: its time is the step's, not the launch's
        start = now()
        with watch:
            fn(rank)
            watch.finish()
        if sync is not None:
            sync.finish()
        step_s.append(now() - start)
        sync_s.append(sync.seconds if sync else 0.0)
        mistakes += [m for m in watch.mistakes if m not in mistakes]
    owned = {id(p) for p in rank.module.parameters()}
    grads = {n: None if p.grad is None else p.grad.detach().cpu().clone()
             for n, p in layers.named_parameters(prefix="layers") if id(p) in owned}  # fmt: skip
    result = RankResult(ctx.rank, stage, rank.spans, rank.losses, grads, watch.sent, watch.received, mistakes,
                        rank.peak_held, watch.waited_s, sync_s, rank.observed, sync.nbytes if sync else 0,
                        step_s)  # fmt: skip
    if (finish := getattr(fn, "finish", None)) is not None:  # work a function does on its own report
        finish(rank, result)
    return result


class _DataParallel:
    """Two pipeline replicas: each stage's gradients all-reduced with the same stage of the other replica,
    once after its last micro-batch's backward ("last") or after every micro-batch's ("every")."""

    def __init__(self, job: Job, rank: OwnRank, group: object):
        self.job, self.rank, self.group = job, rank, group
        self.params = list(rank.module.parameters())
        self.seconds, self.nbytes = 0.0, 0
        self.before: list[Tensor | None] = []
        rank.after_backward = self.after_backward
        self._wrap_backward()

    def _wrap_backward(self) -> None:
        """Sync "every" all-reduces each micro-batch's gradient alone: what came before is set aside."""
        if self.job.sync != "every":
            return
        inner = self.rank.backward

        def backward(i: int, y: Tensor, dy: Tensor | None = None) -> Tensor | None:
            self.before = [p.grad for p in self.params]
            for p in self.params:
                p.grad = None
            return inner(i, y, dy)

        self.rank.backward = backward

    def after_backward(self, i: int) -> None:
        if self.job.sync == "every":
            self._all_reduce()
            for p, b in zip(self.params, self.before, strict=True):
                if b is not None:
                    p.grad += b
        elif self.rank.backwards == self.job.m:  # "last": this stage's gradients are complete now
            self._all_reduce()

    def _all_reduce(self) -> None:
        start = time.perf_counter()
        for p in self.params:
            if p.grad is not None:
                p.grad /= self.job.dp  # the mean over the replicas: the reference's loss is the batch mean
                dist.all_reduce(p.grad, group=self.group)
                self.nbytes += p.grad.nbytes
        self.seconds += time.perf_counter() - start

    def finish(self) -> None:
        require(
            self.rank.backwards == self.job.m,
            f"stage {self.rank.stage} ran {self.rank.backwards} backwards, not m = {self.job.m}",
        )
