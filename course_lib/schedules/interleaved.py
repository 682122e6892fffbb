"""Interleaved 1F1B (Narayanan et al. 2021, sec. 2.2.2): v stages per device, bubble divided by v.

The model is cut into p*v stages and stage s lives on device s % p ("loop" placement), so device 0
holds stages 0, p, 2p, ... Each device runs a 1F1B-style warm-up / steady state / cool-down, but
its forwards cycle through its v stages in blocks of r micro-batches (r = micro-batches per round),
and its backwards cycle through them in the reverse stage order.

The order is the one Megatron-LM and torch.distributed.pipelining (ScheduleInterleaved1F1B) use,
including PyTorch's relaxation of Megatron's "m must be a multiple of p": micro-batches are grouped
in rounds of r = m // max(1, m // p), which needs m to be a multiple of the number of rounds.

Try it::

    from course_lib.schedules.interleaved import interleaved_1f1b
    print(interleaved_1f1b(n_devices=2, n_microbatches=4, virtual=2))
"""

from __future__ import annotations

from course_lib.shelf.errors import CourseError
from course_lib.shelf.first_schedules import check_sizes
from course_lib.shelf.schedule import Action, Kind, Schedule


def loop_placement(n_stages: int, n_devices: int) -> list[int]:
    """Stage s on device s % n_devices: Megatron's and PyTorch's placement for interleaving."""
    return [s % n_devices for s in range(n_stages)]


def _fits(n_devices: int, n_microbatches: int) -> bool:
    return n_microbatches % max(1, n_microbatches // n_devices) == 0


def _nearest_valid(n_devices: int, n_microbatches: int) -> str:
    below = next(m for m in range(n_microbatches - 1, 0, -1) if _fits(n_devices, m))
    above = next(m for m in range(n_microbatches + 1, 2 * n_microbatches + n_devices) if _fits(n_devices, m))
    return f"m={below} or m={above}"


def rounds_of(n_devices: int, n_microbatches: int) -> tuple[int, int]:
    """(number of rounds, micro-batches per round) as PyTorch computes them; raise if they don't fit."""
    n_devices, n_microbatches, _ = check_sizes(n_devices, n_microbatches)  # 0 devices: named, not a // 0
    n_rounds = max(1, n_microbatches // n_devices)
    if n_microbatches % n_rounds != 0:  # (not require(): the hint below is only computable when it fails)
        raise CourseError(
            f"interleaved 1F1B sends micro-batches round by round through a device's stages: with "
            f"p={n_devices} devices the m={n_microbatches} micro-batches make max(1, m // p) = {n_rounds} "
            f"rounds, and m must be a multiple of that (PyTorch's rule; Megatron asks for m a multiple of "
            f"p). Nearest that work: {_nearest_valid(n_devices, n_microbatches)}"
        )
    return n_rounds, n_microbatches // n_rounds


def chunk_action(k: int, kind: Kind, p: int, v: int, d: int, r: int) -> Action:
    """Device d's k-th action of `kind` in an interleaved order (k = 0 .. v*m - 1).

    Forwards cycle through the device's v stages in blocks of r micro-batches (r per round); backward
    pieces (B, I, W) cycle through them last stage first. Interleaved zero bubble counts the same way."""
    local = (k // r) % v  # which of the device's stages: 0 = its first
    if kind is not Kind.F:
        local = v - 1 - local  # backwards visit the device's stages last-first
    mb = (k // (r * v)) * r + k % r  # r micro-batches per block, v blocks per round
    return Action(local * p + d, kind, mb)


def _interleaved_order(p: int, m: int, v: int, d: int, r: int) -> list[Action]:
    """Device d's order. Its k-th forward (k = 0 .. v*m - 1) and k-th backward are found by counting."""
    total = v * m  # forwards this device runs: m micro-batches through each of its v stages

    def at(k: int, kind: Kind) -> Action:
        return chunk_action(k, kind, p, v, d, r)

    # Warm-up: enough forwards that the last device's first backward finds its inputs: the first
    # v-1 blocks of every device, plus 2 per device further from the end (a forward going down and
    # a backward coming back up per hop).
    warmup = min((v - 1) * r + 2 * (p - 1 - d), total)
    order = [at(k, Kind.F) for k in range(warmup)]
    for k in range(total - warmup):  # steady state: one forward, one backward
        order += [at(warmup + k, Kind.F), at(k, Kind.B)]
    order += [at(k, Kind.B) for k in range(total - warmup, total)]  # cool-down
    return order


def interleaved_1f1b(n_devices: int, n_microbatches: int, virtual: int = 2) -> Schedule:
    """Interleaved 1F1B with `virtual` stages per device (p*v stages in all, stage s on device s % p)."""
    p, m, v = check_sizes(n_devices, n_microbatches, virtual)  # 0: refused
    _, r = rounds_of(p, m)
    orders = [_interleaved_order(p, m, v, d, r) for d in range(p)]
    return Schedule("interleaved-1f1b", p * v, m, orders, loop_placement(p * v, p))
