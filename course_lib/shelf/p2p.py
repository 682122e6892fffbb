"""Point-to-point messages between pipeline ranks: one rank's sends and receives (lessons 04c, 06, 08).

The rank loop (``rank_loop.run_schedule``) calls four of them by name: ``recv_activation`` and
``send_activation`` (a forward's output, stage s -> s+1), ``recv_grad`` and ``send_grad`` (a backward's
input gradient, stage s+1 -> s). Both ends list a step's messages from the Schedule alone
(``schedule.py``), so a receiver knows in advance what will arrive, from whom, and in which order.

How messages are matched, so that nothing deadlocks: the receiver posts all of a step's receives at the
start of the step (``begin_step``), into buffers allocated once and reused every step, so data moves in
the background while the rank computes, and a ``recv_*`` that finds its message already there costs
nothing.

- gloo (CPU): every message has its own tag (``message_tag``), so the order of posting is free.
- NCCL (GPU): NCCL ignores tags, matches messages in posting order, and queues one communicator's
  sends and receives on one stream, so a receive posted early would hold up a send behind it. Hence
  one process group per direction of each pair of ranks (``direction_groups``): on it only one rank
  sends and only the other receives, and the receiver posts in the sender's order.

Sends never block compute: ``isend`` returns at once (``hand_over``), and a rank waits for its sends
only at the end of the step (``finish``), before the optimizer step. Injected links (a 50 ms WAN between
processes on one laptop) hand a message over when it would have arrived: ``engines/injected_links.py``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist

from course_lib.shelf.errors import require
from course_lib.shelf.launcher import PeerFailure
from course_lib.shelf.schedule import (
    BACKWARD,
    FORWARD,
    Action,
    Message,
    Schedule,
    incoming_messages,
    messages,
)

WAITED_S = 1e-4  # a receive that waited longer than this found its message not there yet


def message_tag(msg: Message, schedule: Schedule, step: int) -> int:
    """A tag unique to the message within two consecutive steps (gloo matches on (sender, tag))."""
    n_st, n_mb = schedule.n_stages, schedule.n_microbatches
    key = ((step % 2) * n_mb + msg.producer.microbatch) * n_st + msg.producer.stage
    return key * 2 + msg.direction


def direction_groups(
    schedule: Schedule, pipelines: Sequence[Sequence[int]] | None = None, mine: int = 0
) -> dict[tuple[int, int], object]:
    """One process group per (sender, receiver) pair that exchanges messages, keyed by the pair's
    stages. `pipelines`: the global ranks of each pipeline's stages (default: one pipeline, rank =
    stage); the groups of pipeline `mine` are returned. Every rank must call this (in the same
    order), members or not: that is how torch.distributed creates groups."""
    pairs = sorted({(m.src, m.dst) for m in messages(schedule)})
    pipelines = pipelines or [range(schedule.n_devices)]
    made = [{(a, b): dist.new_group([ranks[a], ranks[b]]) for a, b in pairs} for ranks in pipelines]
    return made[mine]


@dataclass
class RecvEvent:
    """When this rank asked for a message and when it had it (perf_counter seconds since t0)."""

    producer: Action
    src: int
    wait_start: float
    wait_end: float

    @property
    def waited(self) -> bool:
        """Was the message not there yet when the rank asked for it?"""
        return self.wait_end - self.wait_start > WAITED_S


@dataclass
class SendEvent:
    """When this rank handed a message over, and when an injected link delivers it (or None)."""

    producer: Action
    dst: int
    handoff: float
    deliver_at: float | None
    nbytes: int


@dataclass
class RankComm:
    """One rank's sends and receives, step after step."""

    schedule: Schedule
    rank: int  # this rank's place in the pipeline (its device in the schedule)
    shape: tuple[int, ...]  # of every message: a micro-batch's activations, or their gradients
    torch_device: torch.device
    t0: float  # the rank's aligned clock origin
    groups: dict[tuple[int, int], object] | None = None  # from direction_groups (NCCL), or None
    peers: Sequence[int] | None = None  # the process-group rank of each pipeline rank (None: the same)
    pipeline_group: object = None  # the group the pipeline talks over (None: the default group)
    dtype: torch.dtype = torch.float32  # of every message: what the stages compute in (the CPU: float32)

    def __post_init__(self) -> None:
        self.step = 0
        self.pending: dict[Action, tuple[torch.Tensor, object]] = {}
        self.handles: list[object] = []
        self.recv_events: list[RecvEvent] = []
        self.send_events: list[SendEvent] = []
        self.incoming = incoming_messages(self.schedule, self.rank)  # the same every step
        # one receive buffer per message, reused step after step: a step's inputs are all consumed
        # (and its backward done) before the next step posts its receives into them
        self.buffers: dict[Action, torch.Tensor] = {}

    def now(self) -> float:
        return time.perf_counter() - self.t0

    def begin_step(self, step: int) -> None:
        """Post every receive of `step` at once (per sender, in the sender's order); start new logs."""
        self.step, self.recv_events, self.send_events = step, [], []
        for producer in self.pending:  # an interrupted step's receive may still land in its buffer
            self.buffers.pop(producer, None)
        self.pending.clear()
        for msg in self.incoming:
            buf = self.buffers.get(msg.producer)
            if buf is None:
                buf = self.buffers[msg.producer] = torch.empty(
                    self.shape, dtype=self.dtype, device=self.torch_device
                )
            tag = message_tag(msg, self.schedule, step)
            work = dist.irecv(buf, src=self._global(msg.src), group=self._group(msg), tag=tag)
            self.pending[msg.producer] = (buf, work)

    # ---- the four the rank loop calls ----------------------------------------------------------------
    def recv_activation(self, msg: Message) -> torch.Tensor:
        """The previous stage's activation for this forward (waits only if it is not here yet)."""
        require(msg.direction == FORWARD, f"{msg.producer} is not an activation")
        return self._wait(msg)

    def recv_grad(self, msg: Message) -> torch.Tensor:
        """The next stage's gradient for this backward (waits only if it is not here yet)."""
        require(msg.direction == BACKWARD, f"{msg.producer} is not a gradient")
        return self._wait(msg)

    def send_activation(self, msg: Message, activation: torch.Tensor) -> None:
        """A forward's output to the next stage's rank; returns at once."""
        require(msg.direction == FORWARD, f"{msg.producer} is not an activation")
        self._send(msg, activation)

    def send_grad(self, msg: Message, grad: torch.Tensor) -> None:
        """A backward's input gradient to the previous stage's rank; returns at once."""
        require(msg.direction == BACKWARD, f"{msg.producer} is not a gradient")
        self._send(msg, grad)

    # ---- how ------------------------------------------------------------------------------------------
    def _group(self, msg: Message):
        return self.pipeline_group if self.groups is None else self.groups[(msg.src, msg.dst)]

    def _global(self, stage_rank: int) -> int:
        """The process-group rank of a pipeline rank (they differ when several pipelines run)."""
        return stage_rank if self.peers is None else self.peers[stage_rank]

    def _wait(self, msg: Message) -> torch.Tensor:
        """Block until `msg` (posted by ``begin_step``) is here and return it."""
        buf, work = self.pending.pop(msg.producer)
        start = self.now()
        try:
            work.wait()
        except Exception as err:  # gloo: peer closed the connection, or the timeout passed
            what = "activation" if msg.direction == FORWARD else "gradient"
            raise PeerFailure(
                f"rank {self.rank} waited for {msg.producer} from rank {msg.src} and the wait failed: "
                f"{type(err).__name__}: {err} (receive of the {what} of {msg.producer}, given up after "
                f"{self.now() - start:.1f} s)",
                peer=msg.src,
            ) from err
        self.recv_events.append(RecvEvent(msg.producer, msg.src, start, self.now()))
        return buf

    def _send(self, msg: Message, tensor: torch.Tensor) -> None:
        """Hand `tensor` over without waiting for it to arrive, and note when (``hand_over`` says how)."""
        require(
            tensor.dtype == self.dtype and tuple(tensor.shape) == self.shape,
            f"rank {self.rank} sends {msg.producer} as {tensor.dtype} {tuple(tensor.shape)}, but rank "
            f"{msg.dst} receives into {self.dtype} {self.shape}: all messages share one dtype and shape",
        )
        tensor, handoff = tensor.detach().contiguous(), self.now()
        deliver_at = self.hand_over(msg, tensor, message_tag(msg, self.schedule, self.step))
        self.send_events.append(SendEvent(msg.producer, msg.dst, handoff, deliver_at, tensor.nbytes))

    def hand_over(self, msg: Message, tensor: torch.Tensor, tag: int) -> float | None:
        """Door: start sending at once; when it is delivered (None: as fast as the network goes). An
        injected link's room delivers it later instead (``course_lib/engines/injected_links.py``)."""
        dst, group = self._global(msg.dst), self._group(msg)
        try:  # gloo: a peer that died since our last receive shows here, before any wait
            self.handles.append(dist.isend(tensor, dst=dst, group=group, tag=tag))
        except Exception as err:
            raise PeerFailure(
                f"rank {self.rank} could not send {msg.producer} to rank {msg.dst}; the connection from "
                f"rank {msg.dst} failed: {type(err).__name__}: {err}",
                peer=msg.dst,
            ) from err
        return None

    def finish(self) -> None:
        """Wait until every send of the step has left (before the optimizer step)."""
        try:
            for work in self.handles:
                work.wait()
        except Exception as err:
            raise PeerFailure(f"rank {self.rank}: a send failed: {type(err).__name__}: {err}") from err
        self.handles.clear()

    def close(self) -> None:
        """Door: let go of what a room started beside the sends (an injected link's threads)."""
