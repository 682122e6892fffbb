"""A layout: how a run splits its GPUs and its global batch, and the schedule it runs.

    Layout(t=8, p=64, d=6, b=1, schedule="interleaved-1f1b", v=2, recompute=True)

t GPUs split each layer (tensor parallelism), p pipeline stages (each of v virtual stages per GPU),
d replicas (data parallelism): t * p * d GPUs. Each replica takes B / d of the global batch B, in
m = B / (d * b) micro-batches of b sequences. So the pipeline's m, the knob of lessons 03-08, is
not free: it is the global batch divided by the replicas and the micro-batch size (sec 3.3 of
Narayanan et al. 2021, arXiv 2104.04473).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from course_lib.shelf.errors import require, whole


@dataclass(frozen=True)
class Layout:
    t: int
    p: int
    d: int
    b: int
    schedule: str = "1f1b"
    v: int = 1
    recompute: bool = True
    zero1: bool = False  # optimizer states sharded over the d replicas (ZeRO stage 1)
    # blocks in each of the p*v stages, from a Megatron layout string (plan(..., layout=...)); None: the
    # layers spread as evenly as they go, ceil(layers / (p*v)) on the busiest stage
    stage_blocks: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        """Each count a whole number >= 1 (numpy's too): Layout(0, 1, 1, 1) was a layout of 0 GPUs."""
        for name in ("t", "p", "d", "b", "v"):
            value = getattr(self, name)
            if type(value) is not int or value < 1:  # the planner's own are ints >= 1: no cost there
                object.__setattr__(self, name, whole(name, value))

    @property
    def gpus(self) -> int:
        return self.t * self.p * self.d

    def microbatches(self, global_batch: int) -> int:
        """m = B / (d * b): what one replica's pipeline runs per step."""
        require(
            global_batch % (self.d * self.b) == 0,
            f"global batch {global_batch} must divide by d * b = {self.d} * {self.b}",
        )
        return global_batch // (self.d * self.b)

    def gpu_blocks(self, r: int) -> int:
        """Blocks on GPU `r` under `stage_blocks`: its stages r, r + p, ... (Megatron's order)."""
        require(self.stage_blocks is not None, "gpu_blocks needs stage_blocks (a layout string's)")
        return sum(self.stage_blocks[r :: self.p])

    def as_dict(self) -> dict:
        return asdict(self)
