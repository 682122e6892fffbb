"""Exercises of lessons 00 to 05: the model and the trainer, TP against PP (01, and 04b for the step time),
the naive pipeline, GPipe, 1F1B, balancing stages. Each answer is computed by the library from the question's
inputs (`given`)."""

from __future__ import annotations

from course_lib.lessons.answers.registry import add, first_m, whole_number
from course_lib.lessons.tp_or_pp import first_m_pp_wins
from course_lib.network import ring_all_reduce_s
from course_lib.schedules.closed_forms import Case, gpipe_bubble
from course_lib.schedules.latency_aware import warmup_forwards
from course_lib.shelf.costs import Link
from course_lib.shelf.first_schedules import SCHEDULES, build_schedule
from course_lib.shelf.model import ModelConfig, build_model, count_parameters
from course_lib.shelf.simulator import StageCosts, simulate
from course_lib.tp.accounting import pp_sends, tp_allreduces


def block_parameters(d_model: int) -> int:
    """Parameters of layers[1], the first transformer block (its count does not depend on the vocabulary)."""
    return count_parameters(build_model(ModelConfig(n_layers=1, d_model=d_model), seed=0).layers[1])


def naive_timeline(p: int, m: int, per_microbatch: float):
    """The naive schedule on p equal stages, a micro-batch costing `per_microbatch` on one device, F:B 1:2."""
    stage = per_microbatch / p
    return simulate(build_schedule("naive", p, m), StageCosts.fused(stage / 3, 2 * stage / 3))


def peak(schedule: str, p: int, m: int, stage: int = 0) -> int:
    """Micro-batches whose activations `stage` holds at its peak, read off the simulated timeline."""
    return simulate(build_schedule(schedule, p, m)).peak_inflight(stage)


add(
    "00.1",
    "parameters in one block (d = 64)",
    block_parameters,
    "count each weight matrix of the block (attention's projections, the MLP's two), then the biases and the "
    "LayerNorms' scales and shifts, as a formula in d; the printout at width 32 checks the formula",
    given=dict(d_model=64),
)
add(
    "01.1",
    "all-reduces in one step (L = 32, t = 4, m = 4)",
    tp_allreduces,
    "count the all-reduces of one block in the forward (section 2's picture), then the backward, then "
    "multiply by what repeats",
    given=dict(n_layers=32, t=4, microbatches=4),
)
add(
    "01.2",
    "boundary messages in one step (p = 4, m = 4)",
    pp_sends,
    "count the boundaries between stages, and how often each micro-batch crosses one",
    given=dict(p=4, microbatches=4),
)
add(
    "01.3",
    "all-reduce time for a 50% stall (us)",
    lambda compute_us, t: compute_us / tp_allreduces(1, t, 1, backward=False),
    "a 50% stall means waiting as long as computing; how many all-reduces does one decode layer wait for?",
    given=dict(compute_us=42.0, t=8),
)
add(
    "01.4",
    "latency terms in one ring all-reduce (t = 8)",
    lambda t: whole_number(ring_all_reduce_s(0, t, Link(latency_s=1.0))),
    "an all-reduce is a reduce-scatter then an all-gather; count the steps each takes around the ring",
    given=dict(t=8),
)

add(
    "02.1",
    "naive idle share at p = 8",
    lambda p: naive_timeline(p, 1, 1.0).bubble_fraction,
    "in the naive picture, how many devices work at any moment?",
    given=dict(p=8),
)
add(
    "02.2",
    "naive step time (ms)",
    lambda p, m, t_ms: whole_number(naive_timeline(p, m, t_ms).makespan),
    "the stages take turns: does cutting the model into p stages shorten what one micro-batch costs in all?",
    given=dict(p=4, m=8, t_ms=40.0),
)
add(
    "02.3",
    "optimizer steps",
    lambda batches, m: batches,
    "when does a synchronous pipeline step its optimizer: after each micro-batch, or after the flush "
    "(section 5)?",
    given=dict(batches=10, m=4),
)

add(
    "03.1",
    "GPipe bubble, p = 4, m = 8",
    gpipe_bubble,
    "count the idle slots of one device in the GPipe picture and divide by all of its slots",
    given=dict(p=4, m=8),
)
add(
    "03.2",
    "Megatron's bubble, p = 4, m = 8",
    lambda p, m: gpipe_bubble(p, m, convention="megatron"),
    "the same idle slots, now over the ideal compute time instead of the whole step",
    given=dict(p=4, m=8),
)
add(
    "03.3",
    "smallest m for a bubble of at most 10%, p = 8",
    lambda p, limit: first_m(lambda m: gpipe_bubble(p, m) <= limit + 1e-12),
    "the idle slots stay fixed as m grows while the busy ones grow: find where they become a tenth",
    given=dict(p=8, limit=0.1),
)
add(
    "03.4",
    "GPipe peak in flight, m = 32",
    lambda p, m: peak("gpipe", p, m),
    "when does stage 0 run its first backward, and how many forwards has it run by then?",
    given=dict(p=4, m=32),
)

add(
    "04.1",
    "1F1B bubble, p = 8, m = 32",
    lambda p, m: SCHEDULES["1f1b"].bubble.at(Case(p=p, m=m)),
    "1F1B reorders the work of GPipe: does it change the idle time at the start and the end?",
    given=dict(p=8, m=32),
)
add(
    "04.2",
    "1F1B peak in flight, stage 0, p = 8, m = 32",
    lambda p, m: peak("1f1b", p, m),
    "count the forwards stage 0 runs before its first backward, in section 1's orders",
    given=dict(p=8, m=32),
)
add(
    "04.3",
    "GPipe / 1F1B memory on stage 0, p = 8, m = 32",
    lambda p, m: whole_number(peak("gpipe", p, m) / peak("1f1b", p, m)),
    "compare what each schedule keeps alive on stage 0 at its peak (your two answers above)",
    given=dict(p=8, m=32),
)
add(
    "04.4",
    "warm-up forwards, device 1, p = 4",
    lambda p, device: warmup_forwards(p)[device],
    "count the forwards device 1 runs before its steady state opens, in the orders of section 1",
    given=dict(p=4, device=1),
)

add(
    "04b.1",
    "first m at which PP wins, NVLink 4, 16 devices",
    first_m_pp_wins,
    "more devices means more hops in every all-reduce and more stages to fill: which step grows faster "
    "with the device count? then find where the widget's two curves cross",
    given=dict(name="nvlink4", devices=16),
)

add(
    "05.1",
    "bubble at p = 4, m = 16",
    lambda p, m: SCHEDULES["1f1b"].bubble.at(Case(p=p, m=m)),
    "equal stages: the idle slots of lesson 03's picture, over all the slots",
    given=dict(p=4, m=16),
)
add(
    "05.2",
    "in flight on stage 0 under GPipe, p = 4, m = 8",
    lambda p, m: peak("gpipe", p, m),
    "when does GPipe run its first backward?",
    given=dict(p=4, m=8),
)
add(
    "05.3",
    "in flight on stage 1 under 1F1B, p = 4, m = 8",
    lambda p, m, stage: peak("1f1b", p, m, stage),
    "a stage closer to the end waits less for its first backward: count its warm-up",
    given=dict(p=4, m=8, stage=1),
)
