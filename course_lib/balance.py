"""Balancing stages (lesson 05): measure what each layer costs, then cut the model so no stage is the
bottleneck (``optimal``: the contiguous cut whose largest stage is smallest, by dynamic programming).

    from course_lib.shelf.model import ModelConfig, build_model
    from course_lib.balance import profile_layers, balanced, stage_memory, check_memory
    model = build_model(ModelConfig(n_layers=80), seed=0)
    prof = profile_layers(model, batch_size=4, seq_len=64)   # time, parameters, activations per layer
    part = balanced(prof, 4, by="time")                      # minimise the slowest stage
    part = balanced(prof, 4, by="time", schedule="1f1b", microbatches=8, budget_bytes=2**22)
    check_memory(part, prof, "1f1b", 8, budget_bytes=2**22)  # raises OutOfMemory like a GPU would
    stage_memory("Ettt|" + "t" * 76 + "|tL", prof)            # a Megatron layout string is a partition too

What a stage holds (bytes):

- weights, gradients and AdamW's two moments: 16 bytes per parameter (fp32 here; mixed-precision
  Adam also comes to 16: Rajbhandari et al. 2019, ZeRO, arXiv 1910.02054 sec. 3.1);
- activations saved for backward, for every micro-batch in flight: GPipe keeps all m, 1F1B at most
  p - stage (Narayanan et al. 2021, arXiv 2104.04473 sec. 2.2.1). ``inflight_per_stage`` reads the
  count off any Schedule, so uneven schedules (latency-aware 1F1B) are charged what they really hold.

Activations are *measured*: autograd's saved-tensor hooks see every tensor a layer keeps for its
backward pass, so the number is what PyTorch really stores, not a formula.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import accumulate

import torch

import course_lib.schedules  # noqa: F401  (registers every schedule by name in the shelf's registry)
from course_lib.shelf.errors import CourseError, require
from course_lib.shelf.first_schedules import build_schedule
from course_lib.shelf.local_engine import inflight_per_stage  # the plan checks fit with it too
from course_lib.shelf.model import Partition, ToyGPT, count_parameters, layer_names, lm_loss, uniform
from course_lib.shelf.schedule import Schedule
from course_lib.shelf.stage import SavedBytes
from course_lib.shelf.timeline import format_bytes
from course_lib.stage_layout import parse_layout

BYTES_PER_PARAM = 16  # weight 4 + gradient 4 + AdamW exp_avg 4 + exp_avg_sq 4 (fp32)
STRATEGIES = ("uniform", "params", "time", "memory")


# ---- cutting a list of per-layer numbers ----------------------------------------------------------
def as_partition(partition: Partition | str, n_layers: int) -> Partition:
    """`partition` as given, or the Partition of a Megatron layout string such as "Et|tt|tL"
    (``course_lib/stage_layout.py``) for a model of `n_layers` layers, embedding and head included."""
    if isinstance(partition, str):
        return parse_layout(partition).partition(n_layers - 2)
    require(
        isinstance(partition, Partition),
        f"partition must be a Partition or a layout string, got {partition!r}",
    )
    return partition


def stage_totals(costs: Sequence[float], partition: Partition | str) -> list[float]:
    """The sum of `costs` (one number per layer) over each stage of `partition` (or of a layout string)."""
    partition = as_partition(partition, len(costs))
    partition.check(len(costs))
    return [float(sum(costs[start:end])) for start, end in partition.bounds]


StageCheck = Callable[[int, int, int], bool]  # fits(stage, start, end): may layers[start:end] be `stage`?
StageCost = Callable[[int, int, int], float]  # cost(stage, start, end), where not a plain sum of layers


def optimal(
    costs: Sequence[float], n_stages: int, fits: StageCheck | None = None, stage_cost: StageCost | None = None
) -> Partition:
    """The contiguous partition whose largest stage (sum of `costs`) is as small as possible.

    Dynamic programming over (stage, last layer): best[s][j] is the smallest achievable largest
    stage when stages 0..s cover layers 0..j-1. O(n_stages * n_layers^2), instant for 82 layers.
    `fits(stage, start, end)` may forbid stages (for example: over a memory budget); if no partition
    passes it, CourseError says so. `stage_cost(stage, start, end)`, if given, replaces the plain sum
    of `costs` over the stage (`costs` then only gives the number of layers). Among equally good
    partitions the one with the lightest *first* stages is returned (stage 0 holds the most
    micro-batches under 1F1B, so leaving it light costs nothing)."""
    n = len(costs)
    require(n_stages >= 1, f"number of stages must be >= 1, got {n_stages}")
    require(n_stages <= n, f"{n_stages} stages cannot split {n} layers: use at most {n} stages")
    bad = [c for c in costs if not (math.isfinite(c) and c >= 0)]
    require(not bad, f"layer costs must be finite and >= 0, got {bad[:1]}")
    prefix = [0.0, *accumulate(float(c) for c in costs)]
    inf = math.inf
    # best[s][j]: stages 0..s cover layers [0, j); cut[s][j]: where stage s starts in that optimum
    best = [[inf] * (n + 1) for _ in range(n_stages)]
    cut = [[-1] * (n + 1) for _ in range(n_stages)]
    for j in range(1, n - n_stages + 2):
        if fits is None or fits(0, 0, j):
            best[0][j] = prefix[j] if stage_cost is None else stage_cost(0, 0, j)
            cut[0][j] = 0
    for s in range(1, n_stages):
        for j in range(s + 1, n - (n_stages - 1 - s) + 1):
            # the earlier the cut, the heavier stage s: scanning i upwards, ties keep early stages light
            for i in range(s, j):
                if best[s - 1][i] == inf or (fits is not None and not fits(s, i, j)):
                    continue
                own = prefix[j] - prefix[i] if stage_cost is None else stage_cost(s, i, j)
                value = max(best[s - 1][i], own)
                if value < best[s][j]:
                    best[s][j], cut[s][j] = value, i
    if best[n_stages - 1][n] == inf:
        raise CourseError(
            f"no way to cut {n} layers into {n_stages} stages passes the per-stage check (for a memory "
            "budget: every stage would be over it). Try more stages, a bigger budget, fewer micro-batches "
            "in flight (1F1B instead of GPipe) or smaller micro-batches"
        )
    sizes, j = [], n
    for s in range(n_stages - 1, -1, -1):  # walk the cuts back from the last layer
        sizes.append(j - cut[s][j])
        j = cut[s][j]
    return Partition.from_sizes(sizes[::-1])


@dataclass(frozen=True)
class LayerProfile:
    """Per-layer costs of one model at one micro-batch shape (lists indexed by layer)."""

    names: list[str]
    params: list[int]
    time_s: list[float]  # forward + backward of one micro-batch, median of repeats
    activation_bytes: list[int]  # saved for backward, one micro-batch
    batch_size: int
    seq_len: int

    @property
    def n_layers(self) -> int:
        return len(self.names)

    def static_bytes(self) -> list[int]:  # weights + gradients + optimizer state, per layer
        return [BYTES_PER_PARAM * p for p in self.params]

    def costs(self, by: str) -> list[float]:
        """The per-layer numbers a strategy balances (`by`: one of STRATEGIES, checked by balanced())."""
        if by == "uniform":
            return [1.0] * self.n_layers
        if by == "params":
            return [float(p) for p in self.params]
        if by == "time":
            return list(self.time_s)
        # memory with one micro-batch in flight; balanced() charges each stage its real in-flight count
        return [float(s + a) for s, a in zip(self.static_bytes(), self.activation_bytes, strict=True)]


def profile_layers(
    model: ToyGPT, batch_size: int = 4, seq_len: int | None = None, repeats: int = 5, seed: int = 0
) -> LayerProfile:
    """Measure every layer of `model` on this machine: forward + backward time of one micro-batch of
    `batch_size` sequences (median of `repeats`, after one warm-up run), parameter count, and bytes of
    activations saved for backward. The head's time includes the loss, as the last stage computes it."""
    require(batch_size >= 1, f"batch_size must be >= 1, got {batch_size}")
    require(repeats >= 1, f"repeats must be >= 1, got {repeats}")
    cfg = model.config
    seq_len = seq_len or cfg.seq_len
    require(1 <= seq_len <= cfg.seq_len, f"seq_len must be in 1..{cfg.seq_len}, got {seq_len}")
    gen = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, cfg.vocab_size, (batch_size, seq_len), generator=gen)
    targets = torch.randint(0, cfg.vocab_size, (batch_size, seq_len), generator=gen)
    layers = list(model.layers)
    saved_bytes = SavedBytes({p.untyped_storage().data_ptr() for p in model.parameters()})

    inputs = [idx]  # each layer's input, computed once without autograd
    with torch.no_grad():
        for layer in layers[:-1]:
            inputs.append(layer(inputs[-1]))

    def one_pass(i: int) -> torch.Tensor:
        x = inputs[i] if i == 0 else inputs[i].detach().requires_grad_(True)
        y = layers[i](x)
        return lm_loss(y, targets) if i == len(layers) - 1 else y

    saved, grads = [], []
    for i in range(len(layers)):  # warm-up run (first calls allocate), counting saved bytes
        saved_bytes.clear()
        with saved_bytes.counting([]):
            out = one_pass(i)
        saved.append(saved_bytes.total)
        grads.append(torch.ones_like(out) if out.dim() else None)
        out.backward(grads[i])
    times: list[list[float]] = [[] for _ in layers]
    # round-robin over layers, so a burst of load from elsewhere on the machine hits one repeat of
    # every layer rather than every repeat of one layer; the median then drops it
    for _ in range(repeats):
        for i in range(len(layers)):
            t0 = time.perf_counter()
            one_pass(i).backward(grads[i])
            times[i].append(time.perf_counter() - t0)
    model.zero_grad(set_to_none=True)
    return LayerProfile(
        names=layer_names(model), params=[count_parameters(layer) for layer in layers],
        time_s=[statistics.median(t) for t in times], activation_bytes=saved, batch_size=batch_size,
        seq_len=seq_len,
    )  # fmt: skip


def _schedule(schedule: str | Schedule, n_stages: int, microbatches: int) -> Schedule:
    if isinstance(schedule, Schedule):
        require(
            schedule.n_stages == n_stages,
            f"the schedule has {schedule.n_stages} stages but the partition has {n_stages}",
        )
        return schedule
    return build_schedule(schedule, n_stages, microbatches)


@dataclass(frozen=True)
class StageMemory:
    stage: int
    layers: tuple[int, int]
    static_bytes: int  # weights + gradients + optimizer state
    activation_bytes: int  # one micro-batch's saved activations
    inflight: int  # micro-batches held at the peak

    @property
    def total_bytes(self) -> int:
        return self.static_bytes + self.inflight * self.activation_bytes


def stage_memory(
    partition: Partition | str, profile: LayerProfile, schedule: str | Schedule = "1f1b",
    microbatches: int = 8,
) -> list[StageMemory]:
    """Peak bytes each stage needs under `schedule` (a name or a built Schedule) with m micro-batches;
    `partition` may be a Megatron layout string ("Ettt|tttL")."""
    partition = as_partition(partition, profile.n_layers)
    partition.check(profile.n_layers)
    inflight = inflight_per_stage(_schedule(schedule, partition.n_stages, microbatches))
    static = stage_totals(profile.static_bytes(), partition)
    act = stage_totals(profile.activation_bytes, partition)
    return [
        StageMemory(s, partition.bounds[s], int(static[s]), int(act[s]), inflight[s])
        for s in range(partition.n_stages)
    ]


class OutOfMemory(CourseError):
    """A simulated device ran out of memory: raised where a real GPU would fail to allocate."""


def check_memory(
    partition: Partition | str, profile: LayerProfile, schedule: str | Schedule = "1f1b",
    microbatches: int = 8, budget_bytes: int | Sequence[int] = 0,
) -> list[StageMemory]:  # fmt: skip
    """Raise OutOfMemory, naming the first stage over budget, if any stage needs more than its device
    has (one budget for all, or one per stage). Returns the per-stage figures when everything fits."""
    stages = stage_memory(partition, profile, schedule, microbatches)
    budgets = [budget_bytes] * len(stages) if isinstance(budget_bytes, (int, float)) else list(budget_bytes)
    require(len(budgets) == len(stages), f"got {len(budgets)} budgets for {len(stages)} stages")
    require(all(b > 0 for b in budgets), f"memory budget must be > 0 bytes, got {budgets}")
    for st, budget in zip(stages, budgets, strict=True):
        if st.total_bytes > budget:
            start, end = st.layers
            raise OutOfMemory(
                f"simulated device {st.stage} is out of memory: stage {st.stage} (layers {start}..{end - 1}) "
                f"needs {format_bytes(st.total_bytes)} ({st.total_bytes} bytes) but the budget is "
                f"{format_bytes(budget)} ({int(budget)} bytes): weights+grads+AdamW "
                f"{format_bytes(st.static_bytes)}, plus {st.inflight} micro-batch(es) in flight x "
                f"{format_bytes(st.activation_bytes)} of activations. Try: fewer layers on this stage "
                "(balanced(..., by='time', budget_bytes=...)), 1F1B instead of GPipe, fewer or smaller "
                "micro-batches, or more stages"
            )
    return stages


def balanced(
    profile: LayerProfile, n_stages: int, by: str = "time", schedule: str | Schedule = "1f1b",
    microbatches: int = 8, budget_bytes: int | None = None,
) -> Partition:  # fmt: skip
    """Cut the model into `n_stages` stages. `by`: 'uniform' (equal layer counts), 'params', 'time'
    or 'memory' (each minimises the largest stage's total of that cost; 'memory' counts each stage's
    weights, gradients, optimizer state and its peak in-flight activations under `schedule`).
    With `budget_bytes`, only partitions whose every stage fits its device under `schedule` with m
    micro-batches are allowed: the optimal partition for `by` under a memory budget."""
    require(by in STRATEGIES, f"unknown balancing strategy {by!r}; choose one of {STRATEGIES}")
    require(budget_bytes is None or budget_bytes > 0, f"budget_bytes must be > 0, got {budget_bytes}")
    if budget_bytes is None and by == "uniform":
        return uniform(profile.n_layers, n_stages)
    inflight = inflight_per_stage(_schedule(schedule, n_stages, microbatches))
    static = [0, *accumulate(profile.static_bytes())]  # prefix sums: a stage's bytes in O(1)
    act = [0, *accumulate(profile.activation_bytes)]

    def need(stage: int, start: int, end: int) -> float:
        return static[end] - static[start] + inflight[stage] * (act[end] - act[start])

    def fits(stage: int, start: int, end: int) -> bool:
        return budget_bytes is None or need(stage, start, end) <= budget_bytes

    try:
        # memory is charged per stage (in-flight counts differ); the other costs are plain sums
        return optimal(profile.costs(by), n_stages, fits, need if by == "memory" else None)
    except CourseError as err:
        raise OutOfMemory(
            f"no partition of {profile.n_layers} layers into {n_stages} stages fits a budget of "
            f"{format_bytes(budget_bytes or 0)} per device under {schedule} with {microbatches} "
            f"micro-batches. {err}"
        ) from None
