"""The schedule IR: what every device runs, in order, as plain data.

A pipeline schedule is a list of actions per device. Each action says *which stage*, *what kind of
work* and *which micro-batch*, written the way torch.distributed.pipelining writes it: ``2F0`` is
stage 2, forward, micro-batch 0. The simulator, both engines, the plots and the assignments all read
this one representation.

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
        match = _ACTION_RE.match(text)
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
    ``split_backward`` is True when backward is written as I + W instead of B."""

    name: str
    n_stages: int
    n_microbatches: int
    orders: list[list[Action]]
    stage_to_device: list[int]
    split_backward: bool = False

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


def loop_placement(n_stages: int, n_devices: int) -> list[int]:
    """Stage s on device s % n_devices: Megatron's and PyTorch's placement for interleaving."""
    return [s % n_devices for s in range(n_stages)]


def producer_of(action: Action, n_stages: int, split_backward: bool) -> Action | None:
    """The action on another stage whose output `action` consumes (None: token ids or the loss).

    F(s, m) reads F(s-1, m)'s activation; a backward of stage s reads the input gradient that the
    backward (B, or I when split) of stage s+1 produced. W reads nothing from another stage."""
    s, m = action.stage, action.microbatch
    if action.kind is Kind.F and s > 0:
        return Action(s - 1, Kind.F, m)
    if action.kind in (Kind.B, Kind.I) and s < n_stages - 1:
        return Action(s + 1, Kind.I if split_backward else Kind.B, m)
    return None


def dependencies(action: Action, n_stages: int, split_backward: bool) -> list[Action]:
    """The actions that must finish before `action` may start: its producer on the stage before
    (forward) or after (backward), a backward's own forward, and W's I."""
    s, m = action.stage, action.microbatch
    if action.kind is Kind.W:
        return [Action(s, Kind.I, m)]
    own = [Action(s, Kind.F, m)] if action.kind is not Kind.F else []
    producer = producer_of(action, n_stages, split_backward)
    return own + ([producer] if producer is not None else [])
