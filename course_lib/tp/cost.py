"""Alpha-beta cost model: step time and waiting share of TP and PP as the link latency grows.

Every message costs latency plus bytes over bandwidth (``links.Link``). A ring all-reduce of n bytes
over t ranks costs 2(t-1)*alpha + 2(t-1)/t * n/B (``network.ring_all_reduce_s``; all sources:
REFERENCES.md). Then, with C = compute of one layer for one micro-batch on one device (forward plus
backward in training, forward only in decoding), L layers, m micro-batches and n devices:

- TP (t = n): every rank computes L*C/t per micro-batch and waits for 4L all-reduces (2L in decoding):
  ``T_tp = m * (L*C/t + 4L * allreduce)``. Each all-reduce blocks the next matmul, so none of it hides.
  Assumption: TP never overlaps compute (``TP_OVERLAPS``; the planner's ``Overlap`` says the same).
  Real stacks hide part of it by splitting the matmul (Megatron Core's TP communication overlap), which
  this model leaves out: TP's line is its worst case.
- PP (p = n, GPipe with sends that overlap compute, the simulator's default ``sends``):
  ``T_pp = (m+p-1)*(f+b) + 2(p-1)*(alpha + n/B)``
  where f + b = L*C/p is a stage's work per micro-batch: the fill-and-drain bubble plus one latency per
  hop each way on the critical path. In decoding one token walks the p stages once: p*f + (p-1)*hop.

Both are straight lines in alpha, so the crossover latency where PP overtakes TP is a closed form:
TP's slope is 8(t-1)*L*m (train), PP's is 2(p-1).

    from course_lib.tp.cost import Scenario, crossover_latency, sweep
    sc = Scenario.h200_70b_training()
    crossover_latency(sc)        # seconds of per-hop latency above which PP's step is the shorter
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from course_lib.network import ring_all_reduce_s
from course_lib.shelf.costs import Link
from course_lib.shelf.errors import require

TP_OVERLAPS = False  # the model's assumption: every TP all-reduce blocks the next matmul (module docstring)


def stall_fraction(sync_s: float, compute_s: float) -> float:
    """Share of the time the compute units wait: sync / (sync + compute)."""
    require(sync_s >= 0 and compute_s >= 0, f"times must be >= 0, got sync={sync_s}, compute={compute_s}")
    return sync_s / (sync_s + compute_s) if sync_s + compute_s > 0 else 0.0


@dataclass(frozen=True)
class Scenario:
    name: str
    n_layers: int
    devices: int  # t for TP, p for PP
    compute_per_layer_s: float  # one layer, one micro-batch, ONE device (unsplit)
    message_bytes: float  # b*s*h*bytes per value: an all-reduce and a boundary send
    bandwidth_Bps: float
    microbatches: int = 1
    decode: bool = False  # forward only (one generated token): 2 all-reduces per layer, not 4

    def __post_init__(self) -> None:
        require(self.devices >= 2, f"devices must be >= 2 to compare TP with PP, got {self.devices}")
        require(min(self.n_layers, self.microbatches) >= 1, f"n_layers and microbatches must be >= 1: {self}")
        require(
            self.compute_per_layer_s > 0, f"compute_per_layer_s must be > 0, got {self.compute_per_layer_s}"
        )
        require(self.bandwidth_Bps > 0, f"bandwidth_Bps must be > 0, got {self.bandwidth_Bps}")

    @classmethod
    def h200_70b_training(cls, devices: int = 8, microbatches: int = 8) -> Scenario:
        """70B-class layer (h=8192), b*s=4096 bf16 tokens per micro-batch.

        Compute: about 0.86e9 parameters per layer, 6 flops per parameter per token (forward+backward),
        4096 tokens, at 500 TFLOP/s sustained: ~42 ms per layer per micro-batch on one GPU.
        Links: NVLink-class 376 GB/s one way (measured H100 peer-to-peer, NVIDIA/nccl issue 1264).
        """
        flops = 6 * 0.86e9 * 4096
        return cls(
            "70B-class training step, H200", 80, devices, flops / 500e12, 4096 * 8192 * 2, 376e9, microbatches
        )

    @classmethod
    def h200_70b_decode(cls, devices: int = 8) -> Scenario:
        """One generated token, TP=8: about 42 us of weight streaming per layer per GPU (assumed), so
        42 us * 8 for the unsplit layer; the message is one token's activations, h=8192 bf16 values."""
        name = "70B-class decode (one token), H200"
        return cls(name, 80, devices, 42e-6 * devices, 8192 * 2, 376e9, decode=True)


@dataclass(frozen=True)
class StepCost:
    total_s: float
    compute_s: float  # busy time of one device
    wait_s: float  # time that device's compute units wait (syncs for TP; bubble and hops for PP)

    @property
    def wait_share(self) -> float:
        return self.wait_s / self.total_s if self.total_s > 0 else 0.0


def tp_step(sc: Scenario, alpha_s: float) -> StepCost:
    t, L = sc.devices, sc.n_layers
    syncs = (2 if sc.decode else 4) * L
    compute = sc.microbatches * L * sc.compute_per_layer_s / t
    link = Link(latency_s=alpha_s, bandwidth_Bps=sc.bandwidth_Bps)
    comm = sc.microbatches * syncs * ring_all_reduce_s(sc.message_bytes, t, link)
    return StepCost(compute + comm, compute, comm)


def pp_step(sc: Scenario, alpha_s: float) -> StepCost:
    p, m = sc.devices, sc.microbatches
    stage = sc.n_layers * sc.compute_per_layer_s / p  # forward (+ backward) of one stage, one micro-batch
    hop = alpha_s + sc.message_bytes / sc.bandwidth_Bps
    if sc.decode:  # one token walks the stages in turn; each device is busy for one stage
        total = p * stage + (p - 1) * hop
        return StepCost(total, stage, total - stage)
    total = (m + p - 1) * stage + 2 * (p - 1) * hop
    return StepCost(total, m * stage, total - m * stage)


def crossover_latency(sc: Scenario) -> float | None:
    """Per-hop latency where PP's step time equals TP's; None if one is faster at every latency."""
    tp0, pp0 = tp_step(sc, 0.0).total_s, pp_step(sc, 0.0).total_s
    tp_slope, pp_slope = tp_step(sc, 1.0).total_s - tp0, pp_step(sc, 1.0).total_s - pp0
    if tp_slope == pp_slope:
        return None
    alpha = (pp0 - tp0) / (tp_slope - pp_slope)
    return alpha if alpha > 0 and math.isfinite(alpha) else None


@dataclass
class Sweep:
    scenario: Scenario
    alphas_s: np.ndarray
    tp_s: np.ndarray
    pp_s: np.ndarray
    tp_wait: np.ndarray  # share of the step the compute units wait
    pp_wait: np.ndarray
    crossover_s: float | None


def sweep(sc: Scenario, alphas_s: np.ndarray | None = None) -> Sweep:
    """Step times and waiting shares from ~1 us (NVLink class) to 50 ms (across an ocean)."""
    alphas = np.logspace(-6, math.log10(5e-2), 61) if alphas_s is None else np.asarray(alphas_s, float)
    tp = [tp_step(sc, a) for a in alphas]
    pp = [pp_step(sc, a) for a in alphas]
    return Sweep(
        sc, alphas, np.array([c.total_s for c in tp]), np.array([c.total_s for c in pp]),
        np.array([c.wait_share for c in tp]), np.array([c.wait_share for c in pp]), crossover_latency(sc),
    )  # fmt: skip


def describe_sweep(sw: Sweep) -> str:
    """Text version of the sweep: a few latencies and the crossover."""
    sc = sw.scenario
    lines = [
        f"{sc.name}: {sc.n_layers} layers, {sc.devices} devices, m={sc.microbatches} (source: model)",
        f"{'latency':>10} {'TP step':>12} {'TP waits':>9} {'PP step':>12} {'PP waits':>9}",
    ]
    for a in (1e-6, 2e-6, 1e-5, 1e-4, 1e-3, 1e-2, 5e-2):
        tp, pp = tp_step(sc, a), pp_step(sc, a)
        lines.append(
            f"{a * 1e6:>8.0f}us {tp.total_s * 1e3:>10.3f}ms {tp.wait_share:>8.1%} "
            f"{pp.total_s * 1e3:>10.3f}ms {pp.wait_share:>8.1%}"
        )
    x = sw.crossover_s
    lines.append(f"crossover: PP's step is shorter above {x * 1e6:.2f} us per hop" if x else
                 "crossover: none: one scheme is faster at every latency")  # fmt: skip
    return "\n".join(lines)
