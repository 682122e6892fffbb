"""Exercises of lessons 11 to 15: recomputation, PP with DP, micro-batch size, asynchronous pipelines,
inference. Each answer is computed by the library from the question's inputs (`given`); 13.1 and 15.4 also
take the costs the notebook measured (`measured`), because their questions are about this machine: which b
wins on it (13.1), and what the toy's measured stages predict for a batch the lesson did not run (15.4)."""

from __future__ import annotations

from course_lib.lessons.answers.lessons_00_05 import peak
from course_lib.lessons.answers.registry import add, first_m
from course_lib.lessons.async_pipeline import pipedream, time_per_batch, two_bw
from course_lib.lessons.inference import forward_only, lap_makespan
from course_lib.lessons.microbatch import predicted_step_ms
from course_lib.lessons.pp_dp import last_backwards, step_with_dp, zero_traffic
from course_lib.lessons.recompute import at_scale
from course_lib.schedules.closed_forms import gpipe_bubble
from course_lib.shelf.first_schedules import build_schedule
from course_lib.shelf.simulator import StageCosts, simulate


def selective_share(name: str, t: int) -> float:
    """Activation bytes per layer under selective recomputation over those without any (at_scale's rows)."""
    rows = {row.mode: row.bytes_per_layer for row in at_scale(name, t=t, b=1)}
    return rows["selective"] / rows["none"]


def lesson12_timeline(p: int, m: int):
    """Lesson 12's pipeline: 1F1B over p equal stages, a backward twice a forward."""
    return simulate(build_schedule("1f1b", p, m), StageCosts.fused(1, 2))


def recomputed_bubble(p: int, m: int, t_f: float, t_b: float) -> float:
    """1F1B's simulated idle share when every backward also runs its forward again (full recomputation)."""
    return simulate(build_schedule("1f1b", p, m), StageCosts.fused(t_f, t_b + t_f)).bubble_fraction


def first_complete(p: int, m: int) -> int:
    """The device whose last backward ends first: its gradients are complete before the others'."""
    ends = [end for _, end in last_backwards(lesson12_timeline(p, m))]
    return min(range(p), key=ends.__getitem__)


def queued_after_flush(p: int, m: int) -> int:
    """By how many all-reduces the step grows when all of them queue on one link after the flush."""
    tl = lesson12_timeline(p, m)
    return round(step_with_dp(tl, 1.0, "after-flush", shared=True) - tl.makespan)


def best_b(slot_ms: dict, batch: int, p: int) -> int:
    """The b, among the measured ones that divide the batch, with the shortest predicted 1F1B step."""
    steps = {b: predicted_step_ms(ms, batch, b, p) for b, ms in slot_ms.items() if batch % b == 0}
    return min(steps, key=steps.get)


def token_time(p: int, m: int, t_f: float, hop: float) -> float:
    """Steady-state time between two tokens of one sequence: the 11th token's makespan less the 10th's."""
    return lap_makespan(p, m, 11, t_f, hop) - lap_makespan(p, m, 10, t_f, hop)


def prefill_busy(p: int, m: int) -> float:
    return 1 - simulate(forward_only(p, m), StageCosts.fused(1.0, 0.0)).bubble_fraction


add(
    "11.1",
    "stage inputs held, 1F1B stage 1, checkpointed, p = 4, m = 8",
    lambda p, m, stage: peak("1f1b", p, m, stage),
    "a checkpointed micro-batch keeps its input until its backward; count the forwards stage 1 runs before "
    "its first backward",
    given=dict(p=4, m=8, stage=1),
)
add(
    "11.2",
    "selective / none, bytes per layer",
    selective_share,
    "read both rows of section 3's table; what selective drops is the part of attention that grows with s^2",
    given=dict(name="megatron-145b", t=8),
)
add(
    "11.3",
    "layer inputs held, 1F1B stage 0, (t, p) = (8, 16)",
    lambda p, m, layers: peak("1f1b", p, m) * (layers // p),
    "micro-batches in flight on stage 0 (lesson 04), each keeping one input per layer of its stage",
    given=dict(p=16, m=64, layers=80),
)

add(
    "11.4",
    "1F1B idle share with full recomputation, p = 4, m = 8",
    recomputed_bubble,
    "which slots does recomputation lengthen: only the steady state's backwards, or the ramps' as well?",
    given=dict(p=4, m=8, t_f=1.0, t_b=2.0),
)

add(
    "12.1",
    "first device with complete gradients, p = 8",
    first_complete,
    "follow the last micro-batch's backward in section 1's printout: which stage runs it first, at any p?",
    given=dict(p=8, m=16),
)
add(
    "12.2",
    "ZeRO-2 / DP bytes, m = 64, d = 8",
    lambda m, d: zero_traffic(m, d)["ZeRO-2"] / zero_traffic(m, d)["DP"],
    "count the reduce-scatters a GPU needs when it keeps only its shard of gradients that accumulate; "
    "section 3's table shows how it grows with m",
    given=dict(m=64, d=8),
)
add(
    "12.3",
    "all-reduces queued after the flush, p = 8",
    queued_after_flush,
    "who else wants the link when the flush ends? section 2's table gives the case of 4 stages",
    given=dict(p=8, m=16),
)


add(
    "13.1",
    "best b at p = 8, B = 32 (your measured costs)",
    best_b,
    "with more stages the ramp-up and ramp-down weigh more against the per-kernel gain of a large b: "
    "weigh both with section 1's costs",
    given=dict(batch=32, p=8),
    measured=("slot_ms",),
)
add(
    "13.2",
    "bubble at b = 4, B = 64, p = 8",
    lambda batch, b, p: gpipe_bubble(p, batch // b),
    "first count the micro-batches of 4 sequences the batch makes, then take lesson 03's idle share",
    given=dict(batch=64, b=4, p=8),
)

add(
    "14.1",
    "batches per unit time, async / sync, p = 8, m = 8",
    lambda p, m, batches: time_per_batch(p, m, batches)[0] / time_per_batch(p, m, batches)[1],
    "what does every synchronous step pay that a long stream pays only once?",
    given=dict(p=8, m=8, batches=100),
)
add(
    "14.2",
    "PipeDream stage 0 versions, p = 8",
    lambda p: pipedream(p).versions[0],
    "one for every micro-batch that has run its forward on the stage and not yet its backward",
    given=dict(p=8),
)
add(
    "14.3",
    "PipeDream's weights over 2BW's, p = 8 equal stages",
    lambda p: sum(pipedream(p).versions) / sum(two_bw(p).versions),
    "add up the versions every stage keeps under each, as in section 3's table",
    given=dict(p=8),
)
add(
    "15.1",
    "fewest requests for 80% busy, p = 8",
    lambda p, busy: first_m(lambda m: prefill_busy(p, m) >= busy - 1e-12, limit=200),
    "a forward-only batch fills and drains the pipeline as a training step does",
    given=dict(p=8, busy=0.8),
)
add(
    "15.2",
    "per-token latency, one sequence, p = 8, hop = 0.03 T (in T)",
    token_time,
    "follow one token from stage 0 until the next one can start on stage 0",
    given=dict(p=8, m=1, t_f=0.125, hop=0.03),
)
add(
    "15.3",
    "sequences that fill the ring, p = 8, hop = 0.03 T",
    lambda p, t_f, hop: first_m(lambda m: token_time(p, m, t_f, hop) <= m * t_f + 1e-12, limit=100),
    "a stage stays busy if it has another sequence's token ready every time it finishes one",
    given=dict(p=8, t_f=0.125, hop=0.03),
)
add(
    "15.4",
    "the toy's makespan for m = 64 requests (ms, your measured stage costs)",
    lambda costs, m: simulate(forward_only(len(costs.f), m), costs).makespan * 1e3,
    "the first request passes every stage once; after it, how often does a request leave the last stage?",
    given=dict(m=64),
    measured=("costs",),
)
