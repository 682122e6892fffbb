"""Lesson 11's runs: activation recomputation measured on the toy, and its price at scale in the cost model.

    from course_lib.lessons.recompute import at_scale, checkpoint_cpu_ms, measure_checkpointing
    runs = measure_checkpointing(p=4, m=8, n_layers=80, repeats=3)   # GPipe and 1F1B, with and without
    runs["gpipe", "always"].peak_bytes[0]    # median bytes stage 0 held for backward
    checkpoint_cpu_ms(n_blocks=20)              # one micro-batch's F + B, CPU time, per checkpoint mode
    at_scale("megatron-145b", t=8, b=1)      # bytes per layer and FLOPs spent again, per mode

The engines checkpoint a whole stage (``checkpoint="always"``: a micro-batch keeps only the stage's input,
and its forward runs again just before its backward, as GPipe's re-materialisation does). Megatron-LM's
full recomputation checkpoints every transformer layer's input instead; selective recomputation (Korthikanti
et al. 2022) recomputes only attention's s x s part. The last two live in the planner's cost model.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median

from course_lib.lessons import cpu_clock
from course_lib.lessons.repeats import Spread, repeat_all
from course_lib.lessons.runs import LessonRun, train_pipeline
from course_lib.planner.memory import RECOMPUTE_MODES, activation_bytes
from course_lib.planner.shapes import model

CONFIGS = (("gpipe", "never"), ("gpipe", "always"), ("1f1b", "never"), ("1f1b", "always"))


@dataclass(frozen=True)
class CheckpointRuns:
    """One (schedule, checkpoint mode) measured `repeats` times."""

    schedule: str
    checkpoint: str
    peak_bytes: list[int]  # per stage: bytes held for backward (the median over runs)
    last: LessonRun


def measure_checkpointing(
    p: int = 4, m: int = 8, n_layers: int = 80, repeats: int = 3
) -> dict[tuple[str, str], CheckpointRuns]:
    """Train GPipe and 1F1B with and without checkpointing, the four taking turns `repeats` times."""
    common = dict(stages=p, microbatches=m, steps=2, n_layers=n_layers, batch_size=m, seq_len=32,
                  eval_batches=1, device="auto", progress=False)  # fmt: skip
    runs = {f"{s}/{c}": (lambda s=s, c=c: train_pipeline(s, checkpoint=c, **common)) for s, c in CONFIGS}
    done = repeat_all(runs, repeats)
    out = {}
    for (schedule, mode), key in zip(CONFIGS, runs, strict=True):
        peaks = [int(median(r.result.peak_saved_bytes[s] for r in done[key])) for s in range(p)]
        out[schedule, mode] = CheckpointRuns(schedule, mode, peaks, done[key][-1])
    return out


def checkpoint_cpu_ms(
    n_blocks: int = 20, repeats: int = 7, passes: int = 8, seed: int = 0
) -> dict[str, Spread]:
    """CPU time of one micro-batch's forward + backward through `n_blocks` toy blocks, per checkpoint mode
    ("never", "always"): ``cpu_clock.stage_cpu_ms``, whose CPU clock a busy laptop does not blur."""
    configs = {"never": (1, "never"), "always": (1, "always")}
    return cpu_clock.stage_cpu_ms(configs, n_blocks=n_blocks, repeats=repeats, passes=passes, seed=seed)


@dataclass(frozen=True)
class ModeAtScale:
    mode: str
    bytes_per_layer: float  # one micro-batch of b sequences, on one of t GPUs
    flops_again_share: float  # FLOPs spent again over the step's FLOPs without recomputation


def at_scale(name: str = "megatron-145b", t: int = 8, b: int = 1) -> list[ModeAtScale]:
    """Per layer and micro-batch: activation bytes and the share of the step's FLOPs run a second time."""
    shape = model(name)
    plain = shape.step_flops(b, recompute=False)
    return [
        ModeAtScale(mode, activation_bytes(shape, b, t, mode), shape.recompute_flops(b, mode) / plain)
        for mode in RECOMPUTE_MODES
    ]
