"""V-Min and V-Half: V-shape schedules with less activation memory (Qi et al. 2024, "Pipeline
Parallelism with Controllable Memory", arXiv 2405.15362).

**Building blocks.** The paper sees a schedule as one *building block* (every pass of one micro-batch,
on every device) repeated at a fixed interval; the block's *lifespan* on a device (from a micro-batch's
first forward there to its last weight gradient) over the interval is the device's peak activation
memory. So memory is chosen by how tightly the block's passes follow each other.

This module builds the block on the V placement of ZB-V (``v_shape.v_placement``: stage s and stage
2p-1-s on device s), at T_F = T_I = T_W, counting time in slots of one pass of one stage. A device runs
six passes per micro-batch (F, I and W of its two stages), so the block repeats every 6 slots, and the
six passes of a device must sit in six different slots modulo 6 (else two micro-batches' passes would
collide). Passes are placed in dependency order, each in the first free slot not before it may start:

1. the forwards, stage 0 to 2p-1: one slot per hop (V-Min), or, for V-Half, one slot more per hop
   on the way back up (stages p to 2p-1) -- a longer lifespan that buys a shorter fill and drain;
2. the input gradients, stage 2p-1 back to 0, one slot per hop;
3. each weight gradient in the first slot left after its input gradient.

Each device's order is its actions sorted by their slot. The order holds for any costs; the slots are
only how it was made (the simulator runs each action as soon as its inputs arrive).

What comes out, checked by tests/schedules/test_schedules_controllable_memory.py for p <= 32:

- peak activations on every device: ``min(2m, 2*((p+4)//3))`` stages' micro-batches for V-Min and
  ``min(2m, 2*((p+2)//2))`` for V-Half; a stage is half a device's layers, so that is (p+4)//3 and
  (p+2)//2 micro-batches of a device's layers, the paper's figures (1F1B: p);
- idle time per device at equal costs: 4p-5 slots for V-Min (4p-3 when p is a multiple of 3 and
  p >= 6), (7p-8)//2 for V-Half: a bubble of about 2p/3m and 7p/12m. The authors' summary gives about
  2p/3m and p/2m; their V-Half block is not this one (this course's is the simplest with their memory).

Try it::

    from course_lib.schedules.controllable_memory import v_min, v_half
    print(v_min(n_devices=4, n_microbatches=8))
"""

from __future__ import annotations

import course_lib.schedules.closed_forms as closed_forms
from course_lib.schedules.closed_forms import Case, ClosedForm
from course_lib.schedules.v_shape import V_STAGES_PER_DEVICE, check_virtual, v_placement
from course_lib.shelf.first_schedules import check_sizes
from course_lib.shelf.schedule import Action, Kind, Schedule

PASSES_PER_DEVICE = 6  # F, I and W of two stages: the block's interval, in slots
SlotBlock = dict[tuple[int, Kind], int]  # (stage, kind) -> the slot it starts in, for micro-batch 0


def building_block(p: int, up_gap: int) -> SlotBlock:
    """Micro-batch 0's slot for every pass; `up_gap` extra slots per hop for the forwards going back
    up the V (0: V-Min, 1: V-Half)."""
    device = v_placement(p)
    taken: list[set[int]] = [set() for _ in range(p)]
    slots: SlotBlock = {}

    def place(stage: int, kind: Kind, earliest: int) -> int:
        d, slot = device[stage], earliest
        while slot % PASSES_PER_DEVICE in taken[d]:
            slot += 1
        taken[d].add(slot % PASSES_PER_DEVICE)
        slots[stage, kind] = slot
        return slot

    slot = place(0, Kind.F, 0)
    for stage in range(1, 2 * p):
        hop = device[stage] != device[stage - 1]  # stage p-1 to p stays on device p-1
        slot = place(stage, Kind.F, slot + 1 + (up_gap if hop and stage >= p else 0))
    for stage in range(2 * p - 1, -1, -1):
        slot = place(stage, Kind.I, slot + 1)
    for stage in range(2 * p):
        place(stage, Kind.W, slots[stage, Kind.I] + 1)
    return slots


def repeat_block(name: str, p: int, m: int, block: SlotBlock) -> Schedule:
    """The block repeated every PASSES_PER_DEVICE slots for m micro-batches; each device's actions in
    slot order."""
    device = v_placement(p)
    timed: list[list[tuple[int, Action]]] = [[] for _ in range(p)]
    for (stage, kind), slot in block.items():
        for mb in range(m):
            timed[device[stage]].append((slot + PASSES_PER_DEVICE * mb, Action(stage, kind, mb)))
    orders = [[a for _, a in sorted(t, key=lambda x: x[0])] for t in timed]
    return Schedule(name, 2 * p, m, orders, device, split_backward=True)


def v_min(n_devices: int, n_microbatches: int, virtual: int = V_STAGES_PER_DEVICE) -> Schedule:
    """V-Min (arXiv 2405.15362): the tightest V block, about a third of 1F1B's activation memory."""
    check_virtual("v-min", virtual)
    n_devices, n_microbatches, _ = check_sizes(n_devices, n_microbatches)  # 0: refused
    return repeat_block("v-min", n_devices, n_microbatches, building_block(n_devices, up_gap=0))


def v_half(n_devices: int, n_microbatches: int, virtual: int = V_STAGES_PER_DEVICE) -> Schedule:
    """V-Half (arXiv 2405.15362): a looser V block, about half of 1F1B's activation memory."""
    check_virtual("v-half", virtual)
    n_devices, n_microbatches, _ = check_sizes(n_devices, n_microbatches)  # 0: refused
    return repeat_block("v-half", n_devices, n_microbatches, building_block(n_devices, up_gap=1))


# ---- closed forms (registered in builders.py beside the others of closed_forms.py) ----------------
def v_min_memory(p: int) -> int:
    """V-Min's peak activations, in micro-batches of a device's layers: (p+4)//3 (1F1B: p)."""
    return (p + 4) // 3


def v_half_memory(p: int) -> int:
    """V-Half's: (p+2)//2."""
    return (p + 2) // 2


def v_min_idle_slots(p: int) -> int:
    """V-Min's idle slots per device at equal costs (p >= 2, m >= 2)."""
    return 4 * p - 5 + (2 if p % 3 == 0 and p >= 6 else 0)


def v_half_idle_slots(p: int) -> int:
    """V-Half's idle slots per device at equal costs (p >= 2, m >= (p+1)//2)."""
    return (7 * p - 8) // 2


def _equal_costs(c: Case) -> bool:
    return c.f == c.i == c.w


def _share(idle_slots: int, c: Case) -> float:
    return idle_slots / (PASSES_PER_DEVICE * c.m + idle_slots)


_PAPER = "Pipeline Parallelism with Controllable Memory, Qi et al. 2024, arXiv 2405.15362"
V_MIN_BUBBLE = closed_forms._bubble(
    "k / (6m + k), k = 4p-5 (4p-3 if p % 3 == 0 and p >= 6)",
    lambda c: _share(v_min_idle_slots(c.p), c),
    lambda c: c.p >= 2 and c.m >= 2 and _equal_costs(c),
    "p >= 2, m >= 2, F = I = W (one stage's costs)", megatron_text="k / 6m",
    source=f"{_PAPER} (the authors' summary: about 2p/3m at T_F = T_B = T_W); this block's exact idle, "
    "found with the simulator",
)
V_HALF_BUBBLE = closed_forms._bubble(
    "k / (6m + k), k = (7p-8)//2", lambda c: _share(v_half_idle_slots(c.p), c),
    lambda c: c.p >= 2 and c.m >= (c.p + 1) // 2 and _equal_costs(c),
    "p >= 2, m >= (p+1)//2, F = I = W (one stage's costs)", megatron_text="k / 6m",
    source=f"{_PAPER} (the authors' summary: about p/2m; this block's fill is longer, about 7p/12m); "
    "this block's exact idle, found with the simulator",
)
V_MIN_PEAK = ClosedForm(
    "min(2m, 2*((p+4)//3))", lambda c: min(2 * c.m, 2 * v_min_memory(c.p)), closed_forms._always,
    "any p, m; in stages' micro-batches (each half a device's layers): (p+4)//3 of a device's",
    source=f"{_PAPER}: (p+4)//3 micro-batches against 1F1B's p (the authors' summary)",
)
V_HALF_PEAK = ClosedForm(
    "min(2m, 2*((p+2)//2))", lambda c: min(2 * c.m, 2 * v_half_memory(c.p)), closed_forms._always,
    "any p, m; in stages' micro-batches (each half a device's layers): (p+2)//2 of a device's",
    source=f"{_PAPER}: (p+2)//2 micro-batches against 1F1B's p (the authors' summary)",
)
