"""V-shape schedules: ZB-V (Qi et al. 2024) and DualPipeV (DeepSeek-V3), two stages per device.

**V placement.** The model is cut into 2p stages; stage s lives on device s for s < p and on device
2p-1-s after, so device 0 holds the first stage *and the last*, device p-1 holds stages p-1 and p.
A micro-batch goes down the devices and comes back up: a "V". Two things follow:

- the message from stage p-1 to stage p (and its gradient back) never leaves device p-1: it is a
  local hand-over, which ``schedule.message_of`` already reads off the placement, so the simulator and
  both engines treat it as free;
- device 0, which holds the most micro-batches in flight under 1F1B, now also finishes them (it
  runs the last stage's backward first): its activations are released early and the memory spreads
  evenly over the devices (Zero Bubble paper, arXiv 2401.10241 sec 6).

**ZB-V** (torch's ``ScheduleZBVZeroBubble``): backward split into I (input grad) and W (weight
grad); a warm-up of 2(p-d)-1 forwards of the device's first stage, then forwards interleaved with
the second stage's, a steady state of F / I / W on both stages, and a cool-down that runs W's
late. With T_F = T_I = T_W and m >= 2p-1 no device ever waits except while the pipe fills.

**DualPipeV** (torch's ``ScheduleDualPipeV``, DualPipe "cut in half": deepseek-ai/DualPipe): the same
placement; its main phase pairs a forward of one stage with a full backward of the other, which
DeepSeek runs *overlapped* (torch: one ``OVERLAP_F_B`` action with two sub-actions) so that one's
communication hides behind the other's compute.

How this IR writes DualPipeV (a deliberate, documented difference from torch's list):

1. an overlapped pair ``OVERLAP_F_B(F, B)`` is its two sub-actions in torch's order, the forward
   first, then the backward, on the same device. Our devices run one action at a time, so the pair
   takes F + B instead of DeepSeek's max-like "F&B": the simulator shows DualPipeV without the
   overlap's gain (``closed_forms`` says so);
2. a full backward ``B`` is written as ``I`` immediately followed by ``W`` of the same stage and
   micro-batch: our IR has one kind of backward per schedule (``split_backward``), and DualPipeV also
   uses split I + W. B costs I + W in the simulator, so the timeline is the same, and the weight
   gradients are the same numbers.

``torch_orders.torch_order`` applies the same two rules to torch's ``pipeline_order``, and
``torch_csv`` to the ``(0F3;3B1)OVERLAP_F_B`` cells of torch's CSV;
tests/schedules/test_schedules_vshape.py checks that the results equal these builders.

Sizes: ZB-V builds any m >= 1 (so does torch: it plans for max(2p-1, m) micro-batches and drops the
rest); DualPipeV needs m >= 2p (torch's rule too: its phases count m - 2p + d + 1 steady pairs).

Try it::

    from course_lib.schedules.v_shape import zb_v, dualpipe_v
    print(zb_v(n_devices=2, n_microbatches=4))
    print(dualpipe_v(n_devices=2, n_microbatches=4).stage_to_device)   # [0, 1, 1, 0]
"""

from __future__ import annotations

from course_lib.shelf.errors import require
from course_lib.shelf.first_schedules import check_sizes
from course_lib.shelf.schedule import Action, Kind, Schedule

V_STAGES_PER_DEVICE = 2


def split_full_backwards(orders: list[list[Action]]) -> list[list[Action]]:
    """Rule 2 above, for an order that mixes full backwards with split ones (torch's DualPipeV, read by
    torch_orders and torch_csv): each B becomes I then W of the same stage and micro-batch, at once."""
    return [
        [part for a in order for part in (_as_i_then_w(a) if a.kind is Kind.B else (a,))] for order in orders
    ]


def _as_i_then_w(action: Action) -> tuple[Action, Action]:
    return Action(action.stage, Kind.I, action.microbatch), Action(action.stage, Kind.W, action.microbatch)


def v_placement(n_devices: int) -> list[int]:
    """Stage s on device s for s < p, on device 2p-1-s after: the V."""
    return [s if s < n_devices else 2 * n_devices - 1 - s for s in range(2 * n_devices)]


def check_virtual(name: str, virtual: int) -> None:
    """V-shape schedules hold exactly two stages per device; refuse any other v by name."""
    require(
        virtual == V_STAGES_PER_DEVICE,
        f"schedule {name!r} places exactly two stages per device (V shape: stage s and stage 2p-1-s), so "
        f"virtual must be 2, got {virtual!r}",
    )


def _zb_v_order(p: int, m: int, d: int) -> list[Action]:
    """Device d's ZB-V order, counted as torch counts it (for max(2p-1, m) micro-batches)."""
    n = max(2 * p - 1, m)  # plan for enough micro-batches to fill the V; the extra are dropped below
    first, second = d, 2 * p - 1 - d
    count = {(s, k): 0 for s in (first, second) for k in Kind}
    order: list[Action] = []

    def run(*steps: tuple[int, Kind]) -> None:
        """Append each (stage, kind) for that pair's next micro-batch."""
        for stage, kind in steps:
            order.append(Action(stage, kind, count[stage, kind]))
            count[stage, kind] += 1

    F, I, W = Kind.F, Kind.I, Kind.W  # noqa: N806, E741
    for _ in range(2 * (p - d) - 1):  # warm-up 1: the first stage's forwards
        run((first, F))
    for _ in range(d):  # warm-up 2: both stages' forwards, alternating
        run((second, F), (first, F))
    for _ in range(p - d):  # warm-up 3: the second stage's F, I and W
        run((second, F), (second, I), (second, W))
    while count[second, F] < count[first, F] or count[first, F] < n:  # steady state
        if count[first, F] < n:
            run((first, F))
        run((first, I), (first, W), (second, F), (second, I), (second, W))
    for _ in range(d):  # cool-down: input gradients first, weight gradients late
        run((first, I), (second, I))
    for _ in range(p - d):
        run((first, I), (first, W))
    for stage in (second, first):
        while count[stage, W] < count[stage, I]:
            run((stage, W))
    return [a for a in order if a.microbatch < m]


def zb_v(n_devices: int, n_microbatches: int, virtual: int = V_STAGES_PER_DEVICE) -> Schedule:
    """ZB-V (arXiv 2401.10241 sec 6): 2p stages in a V, backward split into I and W."""
    n_devices, n_microbatches, virtual = check_sizes(n_devices, n_microbatches, virtual)  # 0: refused
    check_virtual("zb-v", virtual)
    p, m = n_devices, n_microbatches
    orders = [_zb_v_order(p, m, d) for d in range(p)]
    return Schedule("zb-v", 2 * p, m, orders, v_placement(p), split_backward=True)


class _DualPipeVDevice:
    """One device's DualPipeV order, built phase by phase with torch's counters (see the docstring)."""

    def __init__(self, p: int, m: int, d: int):
        self.first, self.second = d, 2 * p - 1 - d
        self.order: list[Action] = []
        self.next = {(s, k): 0 for s in (self.first, self.second) for k in (Kind.F, Kind.I)}
        self.pending_w: list[Action] = []  # W's owed by split backwards (I), oldest first

    def forward(self, stage: int) -> None:
        self.order.append(Action(stage, Kind.F, self.next[stage, Kind.F]))
        self.next[stage, Kind.F] += 1

    def backward(self, stage: int, split: bool) -> None:
        """A full backward (written I then W at once) or, with `split`, an I whose W waits its turn."""
        mb = self.next[stage, Kind.I]
        self.next[stage, Kind.I] += 1
        self.order.append(Action(stage, Kind.I, mb))
        (self.pending_w if split else self.order).append(Action(stage, Kind.W, mb))

    def overlapped(self, f_stage: int, b_stage: int) -> None:
        """torch's OVERLAP_F_B: its sub-actions in its order, the forward then the full backward."""
        self.forward(f_stage)
        self.backward(b_stage, split=False)

    def pending_weight(self) -> None:
        if self.pending_w:
            self.order.append(self.pending_w.pop(0))


def _dualpipe_v_order(p: int, m: int, d: int) -> list[Action]:
    """Device d's order: DeepSeek's eight phases, as torch's ScheduleDualPipeV counts them."""
    dev = _DualPipeVDevice(p, m, d)
    first, second = dev.first, dev.second
    for _ in range(2 * (p - d - 1)):  # 1: forwards of the first stage
        dev.forward(first)
    for _ in range(d + 1):  # 2: forwards of both stages
        dev.forward(first)
        dev.forward(second)
    for _ in range(p - d - 1):  # 3: zero-bubble I, W, F on the second stage
        dev.backward(second, split=True)
        dev.pending_weight()
        dev.forward(second)
    for k in range(m - 2 * p + d + 1):  # 4: the main phase, forward and backward paired
        if k == 0 and d == p - 1:  # not overlapped, to shorten the bubble (torch's note)
            dev.forward(first)
            dev.backward(second, split=False)
        else:
            dev.overlapped(first, second)
        dev.overlapped(second, first)
    for _ in range(p - d - 1):  # 5: B of the second stage, then F / B paired
        dev.backward(second, split=False)
        dev.overlapped(second, first)
    split = False
    for k in range(d + 1):  # 6: backwards of both stages; the second half zero-bubble style
        split = split or (k == (d + 1) // 2 and d % 2 == 1)
        dev.backward(second, split)
        split = split or (k == (d + 1) // 2 and d % 2 == 0)
        dev.backward(first, split)
    for _ in range(p - d - 1):  # 7: a pending W, then a backward of the first stage
        dev.pending_weight()
        dev.backward(first, split)
    for _ in range(d + 1):  # 8: the W's still pending
        dev.pending_weight()
    return dev.order


def dualpipe_v(n_devices: int, n_microbatches: int, virtual: int = V_STAGES_PER_DEVICE) -> Schedule:
    """DualPipeV (DeepSeek-V3 arXiv 2412.19437 sec 3.2.1, cut in half): 2p stages in a V, m >= 2p."""
    n_devices, n_microbatches, virtual = check_sizes(n_devices, n_microbatches, virtual)  # 0: refused
    check_virtual("dualpipe-v", virtual)
    p, m = n_devices, n_microbatches
    require(
        m >= 2 * p,
        f"dualpipe-v needs at least as many micro-batches as stages: m >= 2p = {2 * p} for p={p}, got "
        f"m={m} (its main phase pairs m - 2p + d + 1 forward/backward steps on device d; torch's "
        "ScheduleDualPipeV has the same rule)",
    )
    orders = [_dualpipe_v_order(p, m, d) for d in range(p)]
    return Schedule("dualpipe-v", 2 * p, m, orders, v_placement(p), split_backward=True)
