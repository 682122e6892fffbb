"""Messages derived from a schedule: which outputs cross devices, from whom, to whom.

This is the one place that rule lives. PyTorch's pipelining does the same thing when it *lowers* a
compute-only order (F, B, I, W per rank) into one with SEND and RECV actions: an action's output
becomes a message exactly when the stage that consumes it lives on another device. The simulator's
route table, both engines' communication and the TP accounting all read these functions.

Per micro-batch, two kinds of output cross a stage boundary: the forward's activation (stage s ->
s+1) and the backward's input gradient (stage s+1 -> s). W produces nothing that travels. Where both
stages of a boundary live on one device it is no message at all (``local_producer`` finds the output
there): with a single device, or at the turn of a V-shape schedule (ZB-V, DualPipeV), where stages p-1
and p both live on device p-1.

Try it::

    from course_lib.shelf.registry import build_schedule
    from course_lib.shelf.messages import messages, incoming_messages
    s = build_schedule("1f1b", 2, 4)
    len(messages(s))                 # 8: 4 activations up, 4 gradients down
    incoming_messages(s, device=1)   # what device 1 receives, in the sender's order
"""

from __future__ import annotations

from dataclasses import dataclass

from course_lib.shelf import schedule as ir
from course_lib.shelf.schedule import Action, Kind, Schedule

FORWARD, BACKWARD = 0, 1  # direction of a message: activation going up, gradient going down


@dataclass(frozen=True)
class Message:
    """The output of `producer` (an F or a B/I action) travelling from `src` to `dst`."""

    producer: Action
    src: int
    dst: int

    @property
    def direction(self) -> int:
        return FORWARD if self.producer.kind is Kind.F else BACKWARD

    @property
    def boundary(self) -> int:
        """The stage boundary (s -> s+1) this message crosses: its link."""
        s = self.producer.stage
        return s if self.direction == FORWARD else s - 1


def message_of(action: Action, schedule: Schedule) -> Message | None:
    """The message `action`'s output becomes, or None if it stays on its rank (or goes nowhere)."""
    s, where = action.stage, schedule.stage_to_device
    if action.kind is Kind.F and s < schedule.n_stages - 1:
        nxt = s + 1
    elif action.kind in (Kind.B, Kind.I) and s > 0:
        nxt = s - 1
    else:
        return None
    return Message(action, where[s], where[nxt]) if where[nxt] != where[s] else None


def input_message(action: Action, schedule: Schedule) -> Message | None:
    """The message `action` must receive before it can run (None if its input is local)."""
    producer = producer_of(action, schedule)
    return None if producer is None else message_of(producer, schedule)


def incoming_messages(schedule: Schedule, device: int) -> list[Message]:
    """Every message `device` receives in one step, grouped per sender in the sender's order."""
    return [msg for msg in messages(schedule) if msg.dst == device]


def producer_of(action: Action, schedule: Schedule) -> Action | None:
    """The action whose output `action` consumes, wherever it runs (None: token ids or the loss)."""
    return ir.producer_of(action, schedule.n_stages, schedule.split_backward)


def local_producer(action: Action, schedule: Schedule) -> Action | None:
    """The producer of `action`'s input when it runs on the same device (None if remote or none)."""
    producer = producer_of(action, schedule)
    return producer if producer is not None and message_of(producer, schedule) is None else None


def messages(schedule: Schedule) -> list[Message]:
    """Every message of one step, device by device in each sender's order."""
    return [msg for order in schedule.orders for a in order if (msg := message_of(a, schedule)) is not None]
