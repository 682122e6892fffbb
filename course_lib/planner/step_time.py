"""The time of one training step, part by part: compute, bubble, pipeline messages, TP, DP.

    from course_lib.planner.step_time import estimate
    parts = estimate(model("megatron-1t"), cluster("a100-selene"), layout, global_batch=3072)
    parts.step_s, parts.bubble_s, parts.tp_s

Each part alone:

- compute: the step's FLOPs (``shapes``) on one GPU's share (its stages' layers, over t), at the
  cluster's peak x its calibrated `efficiency`. A backward costs two forwards, plus one more with
  recomputation.
- TP: Megatron's two all-reduces per layer in the forward and two in the backward (two more when the
  forward is recomputed), each of the b*s*h activations in 2 bytes, as a ring over t GPUs:
  2(t-1)/t x bytes / bandwidth + 2(t-1) x latency, over NVLink while t fits in a node.
- pipeline: the schedule's bubble closed form (the registry's ``bubble``) stretches m micro-batches
  of compute into a makespan; the boundary messages (b*s*h activations forward, as many gradients
  back) cross the link joining two stages: the inter-node link once a pipeline leaves the node, with
  Megatron's scatter/gather (each of the t GPUs sends 1/t, an NVLink all-gather rebuilds it; sec 4.1).
  Megatron-LM (2021) sends and receives them blocking, between one stage's compute and the next: so
  every micro-batch pays one message each way per virtual stage, v x more with interleaving (sec
  2.2.2), on top of the fill and drain. ``simulate_pipeline`` replaces the pipeline's closed form
  with the course's simulator for the leading layouts (same stage costs, messages on the links).
- DP: one ring all-reduce of the GPU's gradients (2 bytes each) over the d replicas per step, not
  overlapped with the backward (a pessimistic choice: Megatron-LM overlaps part of it).

What hides behind compute is an assumption, stated in one place, ``Overlap`` (``estimate``'s and
``simulate_pipeline``'s `overlap`; the default, ``MEGATRON_OVERLAP``, is what every lesson's planner figure
uses):

- ``pipeline_sends="blocking"`` (default): the boundary messages above sit between one stage's compute
  and the next, on every micro-batch; ``"overlapped"``: they travel while the sender computes on
  (torch's isend/irecv, the simulator's default ``sends``), so only the fill and drain pay them.
- ``dp_overlapped=False`` (default): the all-reduce starts after the flush; ``True``: it runs during
  the last micro-batch's backward, layer by layer as each gradient becomes final (Megatron Core's
  ``DistributedDataParallelConfig(overlap_grad_sync=True)``), so that backward hides up to its length.
- TP never overlaps: each all-reduce blocks the next matmul (``tp/cost.py`` says the same); not a choice.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import course_lib.fast_simulator  # noqa: F401  (registers the fast path this module asks for: fast=True)
from course_lib.network import ring_all_reduce_s
from course_lib.planner.clusters import Cluster
from course_lib.planner.layout import Layout
from course_lib.planner.memory import GRAD_BYTES, layers_per_gpu, parameters_per_gpu
from course_lib.planner.shapes import ModelShape
from course_lib.schedules.closed_forms import Case
from course_lib.shelf.costs import Link
from course_lib.shelf.errors import require
from course_lib.shelf.first_schedules import SCHEDULES
from course_lib.shelf.simulator import StageCosts, simulate_named
from course_lib.shelf.timeline import Timeline
from course_lib.tp.cost import TP_OVERLAPS

ACTIVATION_BYTES = 2  # fp16/bf16
PIPELINE_SENDS = ("blocking", "overlapped")


@dataclass(frozen=True)
class Overlap:
    """What communication hides behind compute (see the module's docstring). TP never overlaps."""

    pipeline_sends: str = "blocking"  # "blocking": on every micro-batch's path; "overlapped": fill and drain
    dp_overlapped: bool = False  # True: the last micro-batch's backward hides up to its length of the DP
    tp_overlapped: bool = field(default=TP_OVERLAPS, init=False)  # never: each all-reduce blocks a matmul

    def __post_init__(self) -> None:
        require(
            self.pipeline_sends in PIPELINE_SENDS,
            f"pipeline_sends must be one of {', '.join(map(repr, PIPELINE_SENDS))}, "
            f"got {self.pipeline_sends!r}",
        )
        require(
            isinstance(self.dp_overlapped, bool),
            f"dp_overlapped must be True or False, got {self.dp_overlapped!r}",
        )

    def blocking_s(self, layout: Layout, m: int, message_s: float) -> float:
        """What blocking pipeline sends add: every micro-batch, each way, at each of the v stages."""
        return 2 * m * layout.v * message_s if self.pipeline_sends == "blocking" else 0.0

    def exposed_dp_s(self, dp_s: float, backward_s: float) -> float:
        """The DP all-reduce's part on the step: all of it, or what the last backward does not hide."""
        return max(0.0, dp_s - backward_s) if self.dp_overlapped else dp_s


MEGATRON_OVERLAP = Overlap()  # Megatron-LM (2021) as the planner models it: blocking p2p, DP after the flush


@dataclass(frozen=True)
class Parts:
    """Seconds of one step. pipeline_s = compute + bubble + boundary messages on the critical path."""

    compute_s: float  # m micro-batches of forward + backward, TP all-reduces excluded
    tp_s: float  # the TP all-reduces of those m micro-batches
    bubble_s: float  # idle time from the schedule (closed form or simulator)
    boundary_s: float  # pipeline messages on the critical path
    dp_s: float  # gradient all-reduce across replicas
    simulated: bool = False  # True: bubble and boundary come from simulator.simulate

    @property
    def step_s(self) -> float:
        return self.compute_s + self.tp_s + self.bubble_s + self.boundary_s + self.dp_s


def boundary_bytes(shape: ModelShape, b: int) -> int:
    """One micro-batch's activations crossing a stage boundary: b*s*h values."""
    return ACTIVATION_BYTES * b * shape.seq_len * shape.hidden


def compute_times(shape: ModelShape, cluster: Cluster, layout: Layout) -> tuple[float, float]:
    """(forward, backward) seconds of one micro-batch on the busiest GPU: all its v stages, no comms.
    The logits (h x V per token) are spread over the p stages: equal stages, as the closed forms
    assume. (Megatron-LM computes them on the last stage, which makes it slower by under 10% of a
    stage for the presets here: the planner leaves that imbalance out.)"""
    rate = layout.t * cluster.peak_flops * cluster.efficiency  # the t GPUs of a TP group share a layer
    blocks = layers_per_gpu(shape, layout) * shape.layer_forward_flops(layout.b) / rate
    logits = shape.logits_forward_flops(layout.b) / layout.p / rate
    forward = blocks + logits
    return forward, 2 * forward + (blocks if layout.recompute else 0.0)  # recompute: blocks, not logits


def tp_times(shape: ModelShape, cluster: Cluster, layout: Layout) -> tuple[float, float]:
    """(forward, backward) seconds of TP all-reduces for one micro-batch on one GPU."""
    one = ring_all_reduce_s(boundary_bytes(shape, layout.b), layout.t, cluster.tp_link(layout.t))
    layers = layers_per_gpu(shape, layout)
    return 2 * layers * one, (4 if layout.recompute else 2) * layers * one


def boundary_link(cluster: Cluster, layout: Layout, wide: Link | None = None) -> Link:
    """The link one micro-batch's boundary message effectively crosses: NVLink if the whole pipeline
    fits in a node; otherwise the inter-node link (or `wide`) carrying 1/t of it (scatter/gather),
    plus the NVLink all-gather that rebuilds it, folded into the latency."""
    if layout.t * layout.p <= cluster.gpus_per_node and wide is None:
        return cluster.nvlink
    wide = wide or cluster.network
    gather = ring_all_reduce_s(1, layout.t, cluster.nvlink) / 2 if layout.t > 1 else 0.0  # latency only
    return Link(wide.latency_s + gather, wide.bandwidth_Bps * layout.t, name=f"{wide.name} (scatter/gather)")


def boundary_links(cluster: Cluster, layout: Layout) -> list[Link]:
    """One link per boundary of the p*v stages (stage s on GPU s % p): with a site link, the
    boundary between GPU p/2 - 1 and p/2 crosses it (each site holds half of every pipeline), and
    the d pipelines share its bandwidth."""
    links = [boundary_link(cluster, layout)] * (layout.p * layout.v - 1)
    if cluster.site_link is not None and layout.p > 1:
        site = cluster.site_link  # one fiber between the sites carries all d pipelines' messages
        slow = Link(site.latency_s, site.bandwidth_Bps / layout.d, name=f"{site.name}, 1/{layout.d} of it")
        half = layout.p // 2
        links = [slow if (s + 1) % layout.p == half else link for s, link in enumerate(links)]
    return links


def boundary_message_s(shape: ModelShape, cluster: Cluster, layout: Layout) -> float:
    """One micro-batch's boundary message, one way, on the slowest boundary (0 without a pipeline)."""
    if layout.p == 1:
        return 0.0
    nbytes = boundary_bytes(shape, layout.b)
    distinct = {id(link): link for link in boundary_links(cluster, layout)}  # a few among p*v - 1
    return max(link.transfer_time(nbytes) for link in distinct.values())


def dp_time(shape: ModelShape, cluster: Cluster, layout: Layout) -> float:
    link = cluster.nvlink if layout.gpus <= cluster.gpus_per_node else cluster.network
    return ring_all_reduce_s(GRAD_BYTES * parameters_per_gpu(shape, layout), layout.d, link)


def estimate(
    shape: ModelShape, cluster: Cluster, layout: Layout, global_batch: int,
    overlap: Overlap = MEGATRON_OVERLAP,
) -> Parts | None:
    """The step's parts by closed forms, under the `overlap` assumptions; None where the schedule's
    bubble formula does not hold."""
    m = layout.microbatches(global_batch)
    f, b = compute_times(shape, cluster, layout)
    tf, tb = tp_times(shape, cluster, layout)
    bubble = SCHEDULES[layout.schedule].bubble.at(Case(p=layout.p, m=m, v=layout.v))
    if bubble is None:
        return None
    busy = m * (f + b + tf + tb)
    message = boundary_message_s(shape, cluster, layout)
    blocking = overlap.blocking_s(layout, m, message)
    dp = overlap.exposed_dp_s(dp_time(shape, cluster, layout), b + tb)
    return Parts(
        compute_s=m * (f + b), tp_s=m * (tf + tb), bubble_s=busy * bubble / (1 - bubble),
        boundary_s=2 * (layout.p * layout.v - 1) * message + blocking, dp_s=dp,
    )  # fmt: skip


def pipeline_timeline(shape: ModelShape, cluster: Cluster, layout: Layout, m: int) -> Timeline:
    """The simulator's timeline of one replica's pipeline for `m` micro-batches (stage costs include
    the TP all-reduces; boundary messages over ``boundary_link``)."""
    f, b = compute_times(shape, cluster, layout)
    tf, tb = tp_times(shape, cluster, layout)
    share = StageCosts.fused(f + tf, b + tb)  # a device's share of the model
    nbytes, links = boundary_bytes(shape, layout.b), boundary_links(cluster, layout)
    return simulate_named(layout.schedule, layout.p, m, layout.v, share, nbytes, links, fast=True)


def played_microbatches(layout: Layout, global_batch: int) -> int:
    """The micro-batches the simulator plays for a layout: all m, but at most 2p (a multiple of p, as
    interleaving wants). More only repeat the steady state, and draw too thin to read."""
    return min(layout.microbatches(global_batch), 2 * layout.p)


def simulate_pipeline(
    shape: ModelShape, cluster: Cluster, layout: Layout, global_batch: int, parts: Parts,
    timeline: Timeline | None = None, overlap: Overlap = MEGATRON_OVERLAP,
) -> Parts:  # fmt: skip
    """`parts` with bubble and boundary time from the simulator. It plays `played_microbatches` and
    adds one steady-state slot, f + b, per micro-batch beyond: with equal stages each extra
    micro-batch lengthens the makespan by exactly that (the closed forms' m*(f+b)/(1-bubble) grows
    the same way), and it keeps the simulation well under a second for p = 64. `timeline`: that
    simulation, when the caller has it already (``pipeline_timeline`` for the played micro-batches).
    The simulation's sends overlap compute; blocking sends (`overlap`, as `parts` was estimated) add
    their closed form on top, the same as ``estimate``'s."""
    m = layout.microbatches(global_batch)
    played = played_microbatches(layout, global_batch)
    if timeline is None:
        timeline = pipeline_timeline(shape, cluster, layout, played)
    require(
        timeline.n_microbatches == played and timeline.n_devices == layout.p,
        f"the timeline given plays {timeline.n_microbatches} micro-batches on {timeline.n_devices} "
        f"devices; this layout's simulation plays {played} on p = {layout.p}",
    )
    slot = (parts.compute_s + parts.tp_s) / m
    makespan = timeline.makespan + (m - played) * slot
    idle = makespan - m * slot  # the schedule's bubble plus what the links add in fill and drain
    blocking = overlap.blocking_s(layout, m, boundary_message_s(shape, cluster, layout))
    return replace(parts, boundary_s=max(0.0, idle - parts.bubble_s) + blocking, simulated=True)
