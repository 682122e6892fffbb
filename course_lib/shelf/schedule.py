"""The schedule IR, and the one rule that says what waits for what and which outputs travel (lessons 02-04).

Read top to bottom: the actions, the Schedule, then the rule (:func:`inputs_of`) and what derives
from it: an action's dependencies, its producer and consumer, and the messages that cross devices. The
validator, the simulator, both engines and the TP accounting read the rule from here; the fast
simulator (course_lib/fast_simulator.py) re-encodes it as tables, and a test holds the two equal.

A pipeline schedule is a list of actions per device. Each action says *which stage*, *what kind of
work* and *which micro-batch*, written the way torch.distributed.pipelining writes it: ``2F0`` is
stage 2, forward, micro-batch 0.

Kinds of work use PyTorch's letters: ``F`` forward, ``B`` full backward, or ``I`` + ``W`` when a
schedule splits backward into the input gradient and the weight gradient (see :class:`Kind`).

Try it::

    from course_lib.shelf.schedule import Action
    Action.parse("2F0")   # Action(stage=2, kind=Kind.F, microbatch=0)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum


class Kind(StrEnum):
    F = "F"  # forward
    B = "B"  # full backward: input grad + weight grad
    I = "I"  # noqa: E741  backward, input grad only (Zero Bubble's "B")
    W = "W"  # backward, weight grad only (Zero Bubble's "W")


_ACTION_RE = re.compile(r"^\s*(\d+)\s*([FBIW])\s*(\d+)\s*$")


@dataclass(frozen=True, order=True)
class Action:
    """One unit of work: run `kind` for `microbatch` on pipeline `stage`."""

    stage: int
    kind: Kind
    microbatch: int

    def __str__(self) -> str:
        return f"{self.stage}{self.kind.value}{self.microbatch}"

    @classmethod
    def parse(cls, text: str) -> Action:
        """Parse PyTorch's notation, e.g. ``"2F0"`` or ``"1W3"``."""
        match = _ACTION_RE.match(text) if isinstance(text, str) else None
        if not match:
            raise ValueError(
                f"cannot read action {text!r}: expected <stage><kind><micro-batch> with kind one of "
                "F (forward), B (full backward), I (input-grad backward), W (weight-grad backward), "
                "for example '2F0'"
            )
        return cls(int(match.group(1)), Kind(match.group(2)), int(match.group(3)))


@dataclass
class Schedule:
    """Per-device ordered actions, plus where each stage lives.

    ``orders[d]`` is the list of actions device ``d`` runs, in that order. ``stage_to_device[s]`` says
    which device holds stage ``s``; with virtual stages (interleaving) a device holds several.
    ``split_backward`` is True when backward is written as I + W instead of B. ``forward_only`` is True for
    inference (lesson 15): every stage runs F for every micro-batch and nothing else; the validator and
    the simulator take it, the engines (which train) refuse it."""

    name: str
    n_stages: int
    n_microbatches: int
    orders: list[list[Action]]
    stage_to_device: list[int]
    split_backward: bool = False
    forward_only: bool = False

    @property
    def n_devices(self) -> int:
        return len(self.orders)

    @property
    def stages_per_device(self) -> int:
        return self.n_stages // max(self.n_devices, 1)

    def device_of(self, stage: int) -> int:
        return self.stage_to_device[stage]

    def stages_of(self, device: int) -> list[int]:
        return [s for s, d in enumerate(self.stage_to_device) if d == device]

    def actions(self) -> list[Action]:
        """Every action of every device (device 0 first)."""
        return [a for order in self.orders for a in order]

    def to_text(self) -> str:
        """One line per device, PyTorch notation: ``device 0: 0F0 0F1 0B0 ...``."""
        width = len(str(self.n_devices - 1))
        return "\n".join(
            f"device {d:>{width}}: " + " ".join(str(a) for a in order) for d, order in enumerate(self.orders)
        )

    __str__ = to_text


# ---- the one rule: what each action reads ---------------------------------------------------------
# An action as plain data, (stage, kind letter, micro-batch): cheap to hash where a validator or an
# engine keys a dictionary by 100k actions. ``key_of(Action(2, Kind.F, 0)) == (2, "F", 0)``.
Key = tuple[int, str, int]


def key_of(action: Action) -> Key:
    return (action.stage, action.kind._value_, action.microbatch)  # _value_: Enum's plain attribute


def inputs_of(
    stage: int, kind: str, mb: int, n_stages: int, split_backward: bool
) -> tuple[Key | None, Key | None]:
    """(own, producer): what action (stage, kind, mb) reads, as keys; None where it reads nothing.

    `own` ran earlier on the same stage: a backward (B or I) reads its own forward's stash, W reads
    its I's. `producer` ran on the neighbouring stage: F(s, m) reads F(s-1, m)'s activation, and a
    backward of stage s reads the input gradient of stage s+1's backward (B, or I when split). The
    first stage's F reads token ids, the last stage's backward reads the loss: nothing from a stage.
    This is the whole rule; everything below derives from it."""
    if kind == "F":
        return None, ((stage - 1, "F", mb) if stage > 0 else None)
    if kind == "W":
        return (stage, "I", mb), None
    nxt = (stage + 1, "I" if split_backward else "B", mb) if stage < n_stages - 1 else None
    return (stage, "F", mb), nxt


def _action(k: Key | None) -> Action | None:
    return None if k is None else Action(k[0], Kind(k[1]), k[2])


def dependencies(action: Action, schedule: Schedule) -> list[Action]:
    """The actions that must finish before `action` may start: its own stage's, then its producer."""
    own, producer = inputs_of(*key_of(action), schedule.n_stages, schedule.split_backward)
    return [a for a in (_action(own), _action(producer)) if a is not None]


def producer_of(action: Action, schedule: Schedule) -> Action | None:
    """The action on another stage whose output `action` consumes (None: token ids or the loss)."""
    return _action(inputs_of(*key_of(action), schedule.n_stages, schedule.split_backward)[1])


def consumer_of(action: Action, schedule: Schedule) -> Action | None:
    """The action on a neighbouring stage that reads `action`'s output: the one whose producer it is
    (None: W's output, the last forward's and the first backward's stay on their stage)."""
    n, split, k = schedule.n_stages, schedule.split_backward, key_of(action)
    for stage in (action.stage + 1, action.stage - 1):
        for kind in ("F", "I" if split else "B"):
            if 0 <= stage < n and inputs_of(stage, kind, k[2], n, split)[1] == k:
                return Action(stage, Kind(kind), k[2])
    return None


# ---- messages: which outputs cross devices ---------------------------------------------------------
# PyTorch's pipelining *lowers* a compute-only order into one with SEND and RECV actions the same way:
# an output becomes a message exactly when the action that reads it lives on another device. Where
# both stages of a boundary live on one device it is no message at all (``local_producer`` finds the
# output there): with a single device, or at the turn of a V shape (ZB-V, DualPipeV: stages p-1 and p
# both on device p-1). Try it::
#
#     s = build_schedule("1f1b", 2, 4)
#     len(messages(s))                 # 8: 4 activations up, 4 gradients down
#     incoming_messages(s, device=1)   # what device 1 receives, in the sender's order

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
    """The message `action`'s output becomes, or None if it stays on its device (or goes nowhere)."""
    consumer = consumer_of(action, schedule)
    if consumer is None:
        return None
    src, dst = schedule.stage_to_device[action.stage], schedule.stage_to_device[consumer.stage]
    return Message(action, src, dst) if src != dst else None


def input_message(action: Action, schedule: Schedule) -> Message | None:
    """The message `action` must receive before it can run (None if its input is local)."""
    producer = producer_of(action, schedule)
    return None if producer is None else message_of(producer, schedule)


def local_producer(action: Action, schedule: Schedule) -> Action | None:
    """The producer of `action`'s input when it runs on the same device (None if remote or none)."""
    producer = producer_of(action, schedule)
    return producer if producer is not None and message_of(producer, schedule) is None else None


def messages(schedule: Schedule) -> list[Message]:
    """Every message of one step, device by device in each sender's order."""
    return [msg for order in schedule.orders for a in order if (msg := message_of(a, schedule)) is not None]


def incoming_messages(schedule: Schedule, device: int) -> list[Message]:
    """Every message `device` receives in one step, grouped per sender in the sender's order."""
    return [msg for msg in messages(schedule) if msg.dst == device]
