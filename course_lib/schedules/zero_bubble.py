"""Zero Bubble schedules (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", arXiv 2401.10241).

The backward of a stage is two jobs: I, the gradient for the stage's *input* (the next device up
waits for it), and W, the gradient for the stage's *weights* (nobody waits for it until the
optimizer step). Running I at once and W later lets W fill gaps that 1F1B leaves idle.

- ZB-H1 (sec 2.1) keeps 1F1B's warm-up, so no device holds more than p micro-batches, and with
  T_F = T_I = T_W its idle time is (p-1)(T_F + T_I - T_W): a third of 1F1B's (p-1)(T_F + T_I + T_W).
  The rule is short: device d runs 1F1B with I in place of B and keeps its first d weight gradients
  pending, so after its k-th I it runs a W only if k >= d; the W's still pending run at the end.
- Interleaved zero bubble (torch's ScheduleInterleavedZeroBubble, "ZB1P") is the same rule on an
  interleaved order: v stages per device, stage s on device s % p, a warm-up of (v-1)*r + (p-1-d)
  forwards (one per hop, not interleaved 1F1B's two: I does not wait for W). At v = 1 it is ZB-H1.
- ZB-H2 (sec 2.2) buys zero bubble with memory: a deeper warm-up of 2(p-1-d)+1 forwards on device d
  (2p-1 on the first), and W's moved to the tail, so that every device works without a gap from its
  first forward to its last W (a parallelogram instead of 1F1B's trapezoid).

Try it::

    from course_lib.schedules.zero_bubble import zb_h1, zb_h2
    print(zb_h1(n_devices=4, n_microbatches=8))
    print(zb_h2(n_devices=4, n_microbatches=8))
"""

from __future__ import annotations

from dataclasses import replace

from course_lib.schedules.interleaved import chunk_action, loop_placement, rounds_of
from course_lib.shelf.first_schedules import check_sizes
from course_lib.shelf.schedule import Action, Kind, Schedule


def _zb1p_order(p: int, m: int, v: int, d: int, r: int) -> list[Action]:
    """Device d's order under the ZB-H1 rule on an interleaved order (torch's ZB1P): 1F1B with I for B,
    W after the k-th I only once k >= d, the W's still pending at the end."""
    total = v * m

    def at(k: int, kind: Kind) -> Action:
        return chunk_action(k, kind, p, v, d, r)

    warmup = min((v - 1) * r + (p - 1 - d), total)
    order = [at(k, Kind.F) for k in range(warmup)]
    next_w = 0
    for k in range(total):  # the k-th input-gradient backward
        if warmup + k < total:
            order.append(at(warmup + k, Kind.F))
        order.append(at(k, Kind.I))
        if k >= d:  # device d keeps d weight gradients pending to fill its cool-down gaps
            order.append(at(next_w, Kind.W))
            next_w += 1
    order += [at(k, Kind.W) for k in range(next_w, total)]
    return order


def zb_h1(n_devices: int, n_microbatches: int) -> Schedule:
    """ZB-H1: one stage per device, any m (torch's interleaved class at v = 1, without its rounds rule)."""
    n_devices, n_microbatches, _ = check_sizes(n_devices, n_microbatches)  # 0, 2.5: refused, named
    p, m = n_devices, n_microbatches
    orders = [_zb1p_order(p, m, 1, d, r=max(m, 1)) for d in range(p)]  # v = 1: r plays no part
    return Schedule("zb-h1", p, m, orders, list(range(p)), split_backward=True)


def interleaved_zero_bubble(n_devices: int, n_microbatches: int, virtual: int = 2) -> Schedule:
    """Interleaved zero bubble (torch's ScheduleInterleavedZeroBubble) with `virtual` stages per device;
    m must fit PyTorch's rounds rule, as for interleaved 1F1B."""
    n_devices, n_microbatches, virtual = check_sizes(n_devices, n_microbatches, virtual)  # 0: refused
    p, m, v = n_devices, n_microbatches, virtual
    _, r = rounds_of(p, m)
    orders = [_zb1p_order(p, m, v, d, r) for d in range(p)]
    return Schedule("interleaved-zb", p * v, m, orders, loop_placement(p * v, p), split_backward=True)


def _zb_h2_order(p: int, m: int, d: int) -> list[Action]:
    """Device d's ZB-H2 order (free links, T_F = T_I = T_W: no gap between its first and last action).

    1. warm-up: 2(p-1-d)+1 forwards, so the first I arrives just as they end;
    2. while every device still has forwards to feed (k < m-2p+1): I, W, F, three units per step;
    3. then I followed by a forward while any remain (2d of them), otherwise by a W: the I's now pass
       up the pipe every two units, and the W's they leave pending fill the tail;
    4. the W's still pending (2d+1 of them when m >= 2p-1)."""
    warmup = min(2 * (p - 1 - d) + 1, m)
    steady = max(0, m - 2 * p + 1)  # steps with I, W and F
    order = [Action(d, Kind.F, mb) for mb in range(warmup)]
    next_f = warmup
    next_w = 0
    for k in range(m):
        order.append(Action(d, Kind.I, k))
        if k < steady:
            order.append(Action(d, Kind.W, next_w))
            next_w += 1
        if next_f < m:
            order.append(Action(d, Kind.F, next_f))
            next_f += 1
        elif k >= steady and k < m - 1:
            order.append(Action(d, Kind.W, next_w))
            next_w += 1
    order += [Action(d, Kind.W, mb) for mb in range(next_w, m)]
    return order


def zb_h2(n_devices: int, n_microbatches: int) -> Schedule:
    """ZB-H2 for p devices and m micro-batches: up to 2p-1 micro-batches in flight on every device."""
    n_devices, n_microbatches, _ = check_sizes(n_devices, n_microbatches)  # 0, 2.5: refused, named
    p, m = n_devices, n_microbatches
    orders = [_zb_h2_order(p, m, d) for d in range(p)]
    return Schedule("zb-h2", p, m, orders, list(range(p)), split_backward=True)


# ---- ZB-1p and ZB-2p at equal costs and free links (Qi et al. 2024 sec 3, Table 5) -----------------
# The automatic scheduler (course_lib/autoschedule/zero_bubble.py) builds a schedule for given costs under
# a memory limit of p or 2p micro-batches. At equal costs and free links it finds no shorter step than
# these handcrafted ones and keeps them on a tie (tests/autoschedule/test_zero_bubble_frontier.py holds
# the two equal), so the registry's names need no search, and the spine no simulator.
def zb_1p(n_devices: int, n_microbatches: int) -> Schedule:
    """ZB-1p at equal costs and free links: ZB-H1's order (limit p, 1F1B's memory)."""
    n_devices, n_microbatches, _ = check_sizes(n_devices, n_microbatches)  # 0, 2.5: refused, named
    return replace(zb_h1(n_devices, n_microbatches), name="zb-1p")


def zb_2p_keeps_h1(p: int, m: int) -> bool:
    """Where ZB-2p at equal costs is ZB-H1's order: the two tie on the step and ZB-H1 has the shorter
    stage span, the tie-break (closed_forms.py reads this too)."""
    p, m, _ = check_sizes(p, m)  # 0, 2.5: refused, named
    return m <= p and p >= 3


def zb_2p(n_devices: int, n_microbatches: int) -> Schedule:
    """ZB-2p at equal costs and free links: ZB-H2's order, or ZB-H1's where ``zb_2p_keeps_h1``."""
    n_devices, n_microbatches, _ = check_sizes(n_devices, n_microbatches)  # 0, 2.5: refused, named
    keeps_h1 = zb_2p_keeps_h1(n_devices, n_microbatches)
    return replace((zb_h1 if keeps_h1 else zb_h2)(n_devices, n_microbatches), name="zb-2p")
