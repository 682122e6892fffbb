"""ZB-H1 (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", arXiv 2401.10241): 1F1B with B split.

The backward of a stage is two jobs: I, the gradient for the stage's *input* (the next device up
waits for it), and W, the gradient for the stage's *weights* (nobody waits for it until the
optimizer step). Running I at once and W later lets W fill gaps that 1F1B leaves idle. ZB-H1 keeps
1F1B's warm-up, so no device holds more than p micro-batches, and with T_F = T_I = T_W its idle time
is (p-1)(T_F + T_I - T_W): a third of 1F1B's (p-1)(T_F + T_I + T_W).

The rule is short: device d (of p) runs 1F1B with I in place of B, and keeps its first d weight
gradients pending, so after its k-th I it runs a W only if k >= d; the W's still pending run at the
end. This is the order torch.distributed.pipelining's ScheduleInterleavedZeroBubble produces with
one stage per device.

Try it::

    from course_lib.schedules.zero_bubble import zb_h1
    print(zb_h1(n_devices=4, n_microbatches=8))
"""

from __future__ import annotations

from course_lib.schedules.ir import Action, Kind, Schedule


def zb_h1(n_devices: int, n_microbatches: int) -> Schedule:
    p, m = n_devices, n_microbatches
    orders = []
    for d in range(p):
        order: list[Action] = []
        warmup = min(p - 1 - d, m)  # same warm-up as 1F1B: same memory
        order += [Action(d, Kind.F, mb) for mb in range(warmup)]
        next_w = 0
        for k in range(m):  # the k-th input-gradient backward
            if warmup + k < m:
                order.append(Action(d, Kind.F, warmup + k))
            order.append(Action(d, Kind.I, k))
            if k >= d:  # device d keeps d weight gradients pending to fill its cool-down gaps
                order.append(Action(d, Kind.W, next_w))
                next_w += 1
        order += [Action(d, Kind.W, mb) for mb in range(next_w, m)]
        orders.append(order)
    return Schedule("zb-h1", p, m, orders, list(range(p)), split_backward=True)
