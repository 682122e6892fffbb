"""An automatic zero-bubble scheduler under a memory limit (Qi et al. 2024, arXiv 2401.10241 sec 3).

ZB-H1 and ZB-H2 are two hand-drawn points. The paper's sec 3 builds a schedule for *given* costs
(T_F, T_B, T_W per stage; our I is its B), a link time T_comm and a limit on activation memory, with
a greedy heuristic and a small grid over its switches (it then polishes the result with an ILP, which
this course does not do). This module is that heuristic, written for this course's IR:

1. **Warm-up:** a device runs as many forwards as the memory limit allows before its first input
   gradient (I) arrives. Switch ``delay_i``: may a forward start if an I arrives before it would end?
2. **Steady state:** one F, one I in turn, the first I as soon as it arrives; a pending weight
   gradient (W) runs when nothing else may, which is also what frees memory. With the limit reached
   this settles into 1F-1I-1W.
3. **Gaps:** when nothing else is ready a pending W fills the gap if the gap is at least
   ``fill * T_W`` long (``fill`` = 0: always; 1: only if the whole W fits), else the device waits.
4. **Tail:** once a device's forwards and I's are done it runs its pending W's.

Decisions are taken in time order over all devices with the simulator's rules (an action starts when
its device is free and its inputs have arrived; a message takes ``comm`` seconds), so the times the
heuristic sees are the simulated ones (a test checks it). It waits for late messages and fills the
wait with forwards while memory lasts: spare memory hides link latency, where ZB-H1's fixed warm-up
cannot. The grid's best plan is then compared with the handcrafted schedules that fit the same limit
(ZB-H1 needs ``min(p, m)``, ZB-H2 ``min(2p-1, m)``) and the best simulated step wins, so the result is
never worse than them at the same memory.

**Placement.** ``placement="line"`` puts stage d on device d; ``"v"`` puts 2p stages in a V (stage s and
2p-1-s on device s, as ZB-V), each half a device's layers. On a V a device keeps room for a micro-batch's
second-stage forward before it starts its first-stage one: a device full of first-stage forwards could
not take the second stage's, and no backward could start (a deadlock). The handcrafted schedules it is
compared with there are ZB-V (fits ``limit >= min(p, m)``), V-Half and V-Min (``(p+2)//2`` and
``(p+4)//3``, schedules/controllable_memory.py), each where it fits.

**Memory.** Counted in micro-batches of a device's layers (one stage's micro-batch is 1/2 on a V). A
micro-batch counts 1 from its F's start to its I's end, then ``w_memory`` until its W
ends: what the W still needs (the layers' inputs, not the intermediate activations the I used). This
course's timelines count 1 all the way to W (``w_memory=1``, the default and what ``zb-1p`` / ``zb-2p``
use, so ``Timeline.peak_inflight`` stays within the limit). The Zero Bubble authors count a pending W
as 32h of a forward's 34h + 5as per token (their Table 1; sail-sg/zero-bubble-pipeline-parallelism,
``zerobubble/runtime.py``), about a third of a micro-batch: :func:`paper_memory` gives that share.

Try it::

    from course_lib.autoschedule.auto_zero_bubble import auto_zero_bubble
    from course_lib.shelf.costs import StageCosts
    s = auto_zero_bubble(8, 24, memory_limit=16, costs=StageCosts(18.522, 18.086, 9.337), comm=0.601)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from course_lib.autoschedule.heuristic import Problem, Switches, best_heuristic_order, grid, heuristic_orders
from course_lib.autoschedule.scoring import OBJECTIVES, simulated_score
from course_lib.schedules.controllable_memory import v_half, v_half_memory, v_min, v_min_memory
from course_lib.schedules.v_shape import v_placement, zb_v
from course_lib.schedules.zero_bubble import zb_h1, zb_h2
from course_lib.shelf.costs import StageCosts, per_boundary
from course_lib.shelf.errors import require
from course_lib.shelf.first_schedules import check_sizes
from course_lib.shelf.schedule import Schedule

# the heuristic's engine lives in heuristic.py; these names are importable from here too
__all__ = ["Problem", "Switches", "auto_zero_bubble", "grid", "heuristic_orders", "paper_memory", "problem"]

def paper_memory(hidden: int, heads: int, seq_len: int) -> float:
    """The share of a micro-batch's activations a pending W holds, as the Zero Bubble authors count it
    (per token: a forward keeps 34h + 5as, a W still needs 32h)."""
    return 32 * hidden / (34 * hidden + 5 * heads * seq_len)


PLACEMENTS = ("line", "v")  # stage d on device d; or two stages per device in a V (v_shape.py)


def problem(
    n_devices: int, n_microbatches: int, memory_limit: float, costs: StageCosts | None = None,
    comm: float | Sequence[float] = 0.0, w_memory: float = 1.0, placement: str = "line",
) -> Problem:  # fmt: skip
    """Check the inputs (naming any bad value) and put them in one Problem."""
    p, m = n_devices, n_microbatches
    require(placement in PLACEMENTS, f"placement must be one of {PLACEMENTS}, got {placement!r}")
    v = 2 if placement == "v" else 1
    check_sizes(p, m, v)
    require(
        isinstance(memory_limit, (int, float)) and memory_limit >= 1,
        f"memory_limit is the most micro-batches of activations a device may hold, a number >= 1 (one "
        f"forward's worth); got {memory_limit!r}",
    )
    require(0 <= w_memory <= 1, f"w_memory is a share of a micro-batch, between 0 and 1; got {w_memory!r}")
    f, i, w = (costs or StageCosts()).per_stage(p * v)
    links = [float(c) for c in per_boundary(comm, p * v - 1, "comm", 0.0)]
    require(all(c >= 0 for c in links), f"comm (seconds per message) must be >= 0, got {links}")
    where = tuple(v_placement(p)) if v == 2 else ()
    if where:  # the turn of the V stays on device p-1: no message
        links[p - 1] = 0.0
    return Problem(p, m, tuple(f), tuple(i), tuple(w), tuple(links), float(memory_limit), float(w_memory),
                   where)  # fmt: skip


def auto_zero_bubble(
    n_devices: int, n_microbatches: int, memory_limit: float, costs: StageCosts | None = None,
    comm: float | Sequence[float] = 0.0, *, w_memory: float = 1.0, objective: str = "step",
    placement: str = "line", name: str = "auto-zb",
) -> Schedule:  # fmt: skip
    """The best schedule found for p devices, m micro-batches, at most `memory_limit` micro-batches of
    a device's layers held on any device, stage `costs` (default 1 each) and `comm` seconds per message
    (one number, or one per stage boundary). `objective`: "step" (the simulated makespan) or
    "stage-span" (the Zero Bubble paper's cost: the longest time from a device's first action to its
    last). `placement`: "line" (stage d on device d) or "v" (2p stages in a V, each half a device's
    layers: give one stage's costs). Never worse than the handcrafted schedules of the same placement
    that fit the limit: ZB-H1 / ZB-H2, or ZB-V / V-Half / V-Min (module docstring)."""
    require(objective in OBJECTIVES, f"objective must be one of {OBJECTIVES}, got {objective!r}")
    pb = problem(n_devices, n_microbatches, memory_limit, costs, comm, w_memory, placement)
    best = best_heuristic_order(pb, objective)
    found = Schedule(name, pb.n_stages, pb.m, best.orders(), list(pb.stage_device), split_backward=True)
    p, m = pb.p, pb.m
    line = ((zb_h1, min(p, m)), (zb_h2, min(2 * p - 1, m)))
    v = ((zb_v, min(p, m)), (v_half, min(v_half_memory(p), m)), (v_min, min(v_min_memory(p), m)))
    handcrafted = v if placement == "v" else line
    seeds = [replace(s(p, m), name=name) for s, need in handcrafted if memory_limit >= need]
    if not seeds:
        return found
    scores = [simulated_score(s, costs, pb.comm, objective) for s in seeds] + [best.score(objective)]
    return (seeds + [found])[scores.index(min(scores))]  # a handcrafted one where the heuristic only ties
