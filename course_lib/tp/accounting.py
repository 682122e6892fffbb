"""Communication accounting: how many messages, how big, TP against PP on the same model.

Formulas (checked against the counts the real runs log, in tests/tp/test_tp_accounting.py):

- TP, t > 1 ranks, L blocks: 2L all-reduces in a forward pass, 2L more in the backward pass (Megatron,
  Shoeybi et al. 2019). A training step of m micro-batches issues 4Lm; one generated token (a forward
  pass) issues 2L: 160 for 80 blocks. Each carries the activations b*s*h values (b sequences of s tokens,
  width h); in a ring every rank sends 2(t-1)/t of that.
- PP, p stages: p-1 boundary sends per micro-batch forward (activations, b*s*h values) and p-1 backward
  (their gradients); a generated token crosses p-1 boundaries once.

The PP count also comes from the schedule itself: ``pp_log_from_schedule`` logs one send per message
the schedule makes cross devices (``schedules.messages``, the rule both engines follow), and the
tests check it against the formula ``pp_sends``.

    from course_lib.tp.accounting import Workload, comparison
    print(comparison(Workload(n_layers=80, hidden=8192, tokens=4096, microbatches=8, bytes_per_value=2), 8))
"""

from __future__ import annotations

from dataclasses import dataclass

import course_lib.schedules  # noqa: F401  (registers every schedule by name in the shelf's registry)
from course_lib.network import ring_all_reduce_bytes
from course_lib.shelf.errors import require
from course_lib.shelf.first_schedules import build_schedule
from course_lib.shelf.schedule import FORWARD, Schedule, messages
from course_lib.shelf.timeline import format_bytes
from course_lib.tp.comm import CommLog


@dataclass(frozen=True)
class Workload:
    n_layers: int = 80
    hidden: int = 8192  # h, the width of the residual stream
    tokens: int = 4096  # b*s: tokens in one micro-batch (training) or context (decode, no KV cache)
    microbatches: int = 1
    bytes_per_value: int = 2  # bf16; the toy model runs fp32 (4)
    decode_tokens: int = 1  # positions one generated token's messages carry: 1 with a KV cache (toy: none)

    def __post_init__(self) -> None:
        for name in ("n_layers", "hidden", "tokens", "microbatches", "bytes_per_value"):
            require(getattr(self, name) >= 1, f"{name} must be >= 1, got {getattr(self, name)}")

    @property
    def message_bytes(self) -> int:
        """One activation tensor (b*s*h values): the size of a TP all-reduce and of a PP boundary send."""
        return self.tokens * self.hidden * self.bytes_per_value

    @property
    def decode_message_bytes(self) -> int:
        return self.decode_tokens * self.hidden * self.bytes_per_value


def tp_allreduces(n_layers: int, t: int, microbatches: int = 1, backward: bool = True) -> int:
    """All-reduces per step: 2 per block forward, 2 backward, per micro-batch; none when t = 1."""
    return 0 if t == 1 else (4 if backward else 2) * n_layers * microbatches


def pp_sends(p: int, microbatches: int = 1, backward: bool = True) -> int:
    """Boundary messages per step: p-1 per micro-batch forward, as many backward."""
    return (2 if backward else 1) * (p - 1) * microbatches


def pp_log_from_schedule(schedule: Schedule, message_bytes: int) -> CommLog:
    """One 'send' per message that crosses devices: activations forward, their gradients backward."""
    log = CommLog()
    for msg in messages(schedule):
        log.add("send", "forward" if msg.direction == FORWARD else "backward", numel=0, nbytes=message_bytes)
    return log


@dataclass(frozen=True)
class CommRow:
    scheme: str
    what: str
    messages: int
    message_bytes: int
    bytes_per_device: float  # what one device puts on the wire

    def line(self) -> str:
        return (
            f"{self.scheme:<4} {self.what:<16} {self.messages:>8} msgs"
            f"  {format_bytes(self.message_bytes):>10} each"
            f"  {format_bytes(self.bytes_per_device):>10} sent per device"
        )


def comparison_rows(work: Workload, ways: int, schedule: str = "1f1b") -> list[CommRow]:
    """TP over `ways` ranks against PP over `ways` stages: one training step and one generated token.

    PP messages are read off the schedule IR; bytes per device for PP counts a middle stage (it sends
    forward and backward once per micro-batch each)."""
    require(ways >= 2, f"compare at least 2 devices, got {ways}")
    n, m, nd = work.message_bytes, work.microbatches, work.decode_message_bytes
    step = pp_log_from_schedule(build_schedule(schedule, ways, m), n)
    token = pp_log_from_schedule(build_schedule(schedule, ways, 1), n).count(phase="forward")
    tp_step, tp_token = tp_allreduces(work.n_layers, ways, m), tp_allreduces(work.n_layers, ways, 1, False)
    return [
        CommRow("TP", "training step", tp_step, n, tp_step * ring_all_reduce_bytes(n, ways)),
        CommRow("PP", "training step", step.count(), n, 2 * m * n),
        CommRow("TP", "generated token", tp_token, nd, tp_token * ring_all_reduce_bytes(nd, ways)),
        CommRow("PP", "generated token", token, nd, nd),
    ]


def comparison(work: Workload, ways: int, schedule: str = "1f1b") -> str:
    head = (
        f"{work.n_layers} layers, h={work.hidden}, {work.tokens} tokens per micro-batch, "
        f"m={work.microbatches}, {work.bytes_per_value} bytes per value, {ways} devices; "
        f"a generated token carries {work.decode_tokens} position(s)"
    )
    return "\n".join([head, *(row.line() for row in comparison_rows(work, ways, schedule))])
