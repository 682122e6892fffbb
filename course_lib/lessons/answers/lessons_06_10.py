"""Exercises of lessons 06 to 10: pipelines across WANs, beyond 1F1B, scaling out, planning a real run.
Each answer is computed by the library from the question's inputs (`given`). Lesson 10 has none."""

from __future__ import annotations

from course_lib.lessons.answers.registry import add, whole_number
from course_lib.network import Gbit, fiber_rtt_s
from course_lib.planner import model, plan
from course_lib.planner.layout import Layout
from course_lib.planner.memory import memory_per_gpu
from course_lib.schedules.closed_forms import Case
from course_lib.schedules.latency_aware import extra_in_flight, plain_1f1b_step
from course_lib.shelf.costs import Link
from course_lib.shelf.first_schedules import SCHEDULES, build_schedule
from course_lib.shelf.simulator import StageCosts, simulate
from course_lib.tp.accounting import pp_log_from_schedule, pp_sends


def link_growth_ms(p: int, m: int, low_s: float, high_s: float, t_f: float = 0.01, t_b: float = 0.02) -> int:
    """How many ms plain 1F1B's step grows when the link's latency goes from low_s to high_s (whole ms for
    the questions' latencies)."""
    grown_s = plain_1f1b_step(p, m, t_f, t_b, high_s) - plain_1f1b_step(p, m, t_f, t_b, low_s)
    return whole_number(grown_s * 1e3)


def blocking_growth_ms(p: int, m: int, latency_s: float, t_f: float = 0.01, t_b: float = 0.02) -> int:
    """How many ms plain 1F1B's step grows when its sends wait for their last byte (simulated, no bytes)."""
    schedule, costs, link = build_schedule("1f1b", p, m), StageCosts.fused(f=t_f, b=t_b), Link(latency_s)
    held = simulate(schedule, costs, links=link, sends="blocking").makespan
    return whole_number((held - simulate(schedule, costs, links=link).makespan) * 1e3)


def zb_h1_idle_ms(p: int, m: int, t_ms: float) -> int:
    """The longest idle time of a device under ZB-H1 with T_F = T_I = T_W = t_ms, simulated."""
    tl = simulate(build_schedule("zb-h1", p, m), StageCosts(f=t_ms, i=t_ms, w=t_ms))
    return whole_number(max(tl.idle(d) for d in range(p)))


def message_count(schedule: str, p: int, m: int, v: int | None = None) -> int:
    """Point-to-point messages of one step, counted from the schedule's actions."""
    return len(pp_log_from_schedule(build_schedule(schedule, p, m, v), 1).events)


def model_states_gib(t: int, p: int, d: int, batch: int, zero1: bool) -> float:
    """GiB per GPU of weights, gradients and optimizer states of megatron-145b (planner's memory model)."""
    mem = memory_per_gpu(model("megatron-145b"), Layout(t=t, p=p, d=d, b=1, zero1=zero1), batch)
    return (mem.weights + mem.gradients + mem.optimizer) / 2**30


add(
    "06.1",
    "NY-London RTT floor (ms)",
    lambda km: fiber_rtt_s(km) * 1e3,
    "light in fiber covers a fixed distance per microsecond (section 1); a round trip goes there and back",
    given=dict(km=5570.0),
)
add(
    "06.2",
    "extra in flight to hide a 43.5 ms link",
    extra_in_flight,
    "while one message goes down and its gradient comes back, how many micro-batches' work can the "
    "upper stage do?",
    given=dict(latency_s=0.0435, t_f=0.01, t_b=0.02),
)
add(
    "06.3",
    "plain 1F1B step (ms), p = 2, m = 8, L = 30 ms",
    lambda p, m, t_f, t_b, latency_s: plain_1f1b_step(p, m, t_f, t_b, latency_s) * 1e3,
    "start from the step on free links, then count how many times a stage waits for the link (section 3)",
    given=dict(p=2, m=8, t_f=0.01, t_b=0.02, latency_s=0.03),
)
add(
    "06.4",
    "plain 1F1B growth 70 -> 230 ms (ms)",
    link_growth_ms,
    "only the waits on the link depend on L: count them, they do not depend on t_f or t_b",
    given=dict(p=2, m=8, low_s=0.07, high_s=0.23),
)
add(
    "06.5",
    "bottleneck bandwidth (Gb/s)",
    lambda nbytes, stage_s: nbytes / stage_s / Gbit,
    "the wire is the bottleneck when sending one micro-batch takes longer than computing it",
    given=dict(nbytes=64 * 2**20, stage_s=0.060),
)
add(
    "06.6",
    "plain 1F1B, blocking against overlapped sends (ms), p = 2, m = 8, L = 40 ms",
    blocking_growth_ms,
    "in the steady state a send's wait hides inside the round trip plain 1F1B waits for anyway; look for "
    "the sends made while nothing else was awaited, in the warm-up",
    given=dict(p=2, m=8, latency_s=0.04),
)

add(
    "07a.1",
    "interleaved bubble, p = 4, m = 8, v = 2",
    lambda p, m, v: SCHEDULES["interleaved-1f1b"].bubble.at(Case(p=p, m=m, v=v)),
    "the ramp-up and ramp-down are made of chunks v times smaller than 1F1B's",
    given=dict(p=4, m=8, v=2),
)

add(
    "07a.2",
    "interleaved messages, p = 4, v = 2, m = 8",
    lambda p, m, v: message_count("interleaved-1f1b", p, m, v),
    "with v chunks per device, how many stage boundaries does a micro-batch cross, each way?",
    given=dict(p=4, m=8, v=2),
)

add(
    "07a.3",
    "interleaved memory factor, p = 8, v = 4, m = 16",
    lambda p, m, v: SCHEDULES["interleaved-1f1b"].peak.at(Case(p=p, m=m, v=v)) / (p * v),
    "the first device warms up with extra chunks before its first backward (Korthikanti et al. 2022); "
    "compare what it holds with 1F1B's p micro-batches",
    given=dict(p=8, m=16, v=4),
)

add(
    "07b.1",
    "ZB-H1 idle per device (ms), p = 8, 10 ms each",
    zb_h1_idle_ms,
    "which of 1F1B's gaps can a deferred W fill, and which stays idle? read section 1's picture",
    given=dict(p=8, m=16, t_ms=10.0),
)

add(
    "07b.2",
    "ZB-H2 peak, p = 8, m = 32",
    lambda p, m: SCHEDULES["zb-h2"].peak.at(Case(p=p, m=m)),
    "ZB-H2 fills the warm-up's gaps with more forwards: count them in its picture",
    given=dict(p=8, m=32),
)

add(
    "07c.1",
    "latency-aware 1F1B peak in flight, device 0, p = 8, m = 32, slow links",
    lambda p, m: SCHEDULES["latency-aware-1f1b"].peak.at(Case(p=p, m=m)),
    "start from what 1F1B keeps in flight on the first device, then add what each slow link below it needs",
    given=dict(p=8, m=32),
)

add(
    "08.1",
    "WORLD_SIZE",
    lambda nodes, per_node: nodes * per_node,
    "WORLD_SIZE counts every process of the run, on every node",
    given=dict(nodes=2, per_node=4),
)
add(
    "08.2",
    "added by the link (ms), p = 2, m = 4, L = 50 ms",
    link_growth_ms,
    "count the times a stage waits for the link in plain 1F1B (lesson 06)",
    given=dict(p=2, m=4, low_s=0.0, high_s=0.05),
)
add(
    "08.3",
    "messages per step, p = 4, m = 8",
    pp_sends,
    "count the boundaries a micro-batch crosses, down and back up",
    given=dict(p=4, microbatches=8),
)

add(
    "09.1",
    "micro-batches per pipeline",
    lambda t, p, d, b, batch: Layout(t=t, p=p, d=d, b=b).microbatches(batch),
    "the global batch is shared by the replicas first, then cut into micro-batches",
    given=dict(t=8, p=8, d=24, b=2, batch=1536),
)
add(
    "09.2",
    "1F1B bubble at that m",
    lambda t, p, d, b, batch: SCHEDULES["1f1b"].bubble.value(
        Case(p=p, m=Layout(t=t, p=p, d=d, b=b).microbatches(batch))
    ),
    "lesson 03's idle share, with the m you found",
    given=dict(t=8, p=8, d=24, b=2, batch=1536),
)
add(
    "09.3",
    "model states per GPU, GiB",
    model_states_gib,
    "bytes per parameter times the parameters of one GPU: its stage's layers split t ways, plus the "
    "embedding on the first stage",
    given=dict(t=8, p=8, d=24, batch=1536, zero1=False),
)
add(
    "09.4",
    "with ZeRO-1, GiB",
    model_states_gib,
    "which of the 16 bytes per parameter does ZeRO-1 shard over the replicas?",
    given=dict(t=8, p=8, d=24, batch=1536, zero1=True),
)
add(
    "09.5",
    "t for 162B on 64 GPUs",
    lambda name, cluster, gpus, batch: plan(name, cluster, gpus, batch).best.t,
    "run the planner; then ask why tensor parallelism stops where it does",
    given=dict(name="megatron-162b", cluster="a100-selene", gpus=64, batch=128),
)
