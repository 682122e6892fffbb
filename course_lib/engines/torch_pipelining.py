"""The course's model on PyTorch's own pipeline runtime, torch.distributed.pipelining.

What the course teaches carries over to production code: the same 80-layer toy, cut into the same
stages, trained by ``PipelineStage`` + ``ScheduleGPipe`` / ``Schedule1F1B`` /
``ScheduleInterleaved1F1B``, or by PyTorch's generic runtime fed a schedule **we** built and exported
as PyTorch's CSV (``course_lib.schedules.torch_csv``). One process per rank (gloo on CPU; NCCL when
every rank has a GPU), spawned from here, so it runs from a notebook too.

Try it::

    from course_lib.reference import TrainConfig
    from course_lib.engines.torch_pipelining import launch, make_spec
    cfg = TrainConfig(n_layers=8, steps=3, batch_size=8, seq_len=32, microbatches=4)
    theirs, ours = launch([make_spec(cfg, "gpipe", stages=2),              # torch's ScheduleGPipe
                           make_spec(cfg, "1f1b", stages=2, from_csv=True)])  # our 1F1B, via CSV
    theirs.losses     # per step: equal (to float rounding) to the reference trainer's

Both sides compute the same thing: each rank builds the model from the seed, keeps its stages
(where our schedule puts them: stage s on rank s % p, torch's and Megatron's placement for
interleaving, or a V for ZB-V and DualPipeV), sees the reference trainer's batches in
its order, and steps AdamW once per batch; torch divides the summed micro-batch gradients by m
(``scale_grads=True``), as our reference does with its 1/m.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, replace

import torch
from torch import nn

from course_lib.devices import gpu_count
from course_lib.engines.plan import resolve_schedule
from course_lib.errors import require
from course_lib.launch import RankContext, spawn
from course_lib.model import autocast, lm_loss
from course_lib.partition import stage_modules, uniform
from course_lib.reference import TrainConfig, make_optimizer, setup, train_batches
from course_lib.schedules.builders import SCHEDULES, build_schedule, resolve_name
from course_lib.schedules.torch_csv import to_csv_text

# schedules run by their own torch class (the registry's torch_class); any other runs from our CSV
TORCH_CLASS_RUNS = ("gpipe", "1f1b", "interleaved-1f1b")


@dataclass(frozen=True)
class TorchRunSpec:
    """One run: `schedule` (our name) on `ranks` processes with `virtual` stages each.

    ``from_csv``: build the order with our builder, write it as PyTorch CSV and let torch's generic
    runtime (``_PipelineScheduleRuntime._load_csv``) execute it; otherwise torch's own class builds it."""

    cfg: TrainConfig
    schedule: str = "gpipe"
    ranks: int = 2
    virtual: int = 1
    from_csv: bool = False
    threads: int = 1
    placement: tuple[int, ...] = ()  # rank of each stage, from our schedule (loop, or a V for ZB-V)


@dataclass
class TorchPipelineResult:
    schedule: str
    runner: str  # the torch class (or "_PipelineScheduleRuntime + our CSV") that ran it
    ranks: int
    losses: list[float]  # the batch's mean training loss, per step
    step_times_s: list[float]  # wall clock of each step on the last rank
    csv_text: str | None = None  # the CSV torch executed, when from_csv


def make_spec(
    cfg: TrainConfig, schedule: str = "gpipe", stages: int = 2, *, virtual: int | None = None,
    from_csv: bool = False, threads: int = 1,
) -> TorchRunSpec:  # fmt: skip
    """Check everything before any process starts (bad input: a CourseError naming the value)."""
    cfg.check()
    name = resolve_name(schedule)
    require(
        from_csv or name in TORCH_CLASS_RUNS,
        f"torch.distributed.pipelining has no class for schedule {name!r} here; choose one of "
        f"{', '.join(TORCH_CLASS_RUNS)}, or pass from_csv=True to run our order through torch's runtime",
    )
    require(  # Schedule1F1B refuses m < p in its constructor; say so before spawning anything
        name != "1f1b" or from_csv or cfg.microbatches >= stages,
        f"torch's Schedule1F1B needs m >= p (micro-batches >= ranks): m={cfg.microbatches}, p={stages}",
    )
    built = resolve_schedule(cfg, name, stages, virtual)  # the engines' checks: p, m, v, layers; validated
    placement = tuple(built.stage_to_device)
    return TorchRunSpec(cfg, name, stages, built.stages_per_device, from_csv, threads, placement)


def _torch_schedule(spec: TorchRunSpec, stages: list, csv_text: str | None):
    """The torch schedule object for this rank's stages (a list; single-stage classes take one)."""
    from torch.distributed.pipelining import schedules as S

    m = spec.cfg.microbatches
    if spec.from_csv:
        runtime = S._PipelineScheduleRuntime(stages, m, loss_fn=lm_loss)
        with tempfile.NamedTemporaryFile("w", suffix=".csv", newline="") as f:  # torch reads a file
            f.write(csv_text)
            f.flush()
            runtime._load_csv(f.name, format="compute_only")  # torch validates the order here
        return runtime
    cls = getattr(S, SCHEDULES[spec.schedule].torch_class)
    return cls(stages[0] if issubclass(cls, S.PipelineScheduleSingle) else stages, m, loss_fn=lm_loss)


def _run_rank(spec: TorchRunSpec, rank: int, device: torch.device, csv_text: str | None) -> dict:
    from torch.distributed.pipelining import PipelineStage

    torch.set_num_threads(spec.threads)
    cfg = spec.cfg
    corpus, model = setup(replace(cfg, device="cpu"))  # same weights on every rank, from the seed
    n_stages = spec.ranks * spec.virtual
    modules = stage_modules(model.layers, uniform(len(model.layers), n_stages))
    mine = [s for s in range(n_stages) if spec.placement[s] == rank]
    stages = [PipelineStage(modules[s].to(device), s, n_stages, device) for s in mine]
    schedule = _torch_schedule(spec, stages, csv_text)
    optimizer = make_optimizer(nn.ModuleList([modules[s] for s in mine]), cfg)
    has_first, has_last = 0 in mine, n_stages - 1 in mine
    losses, times, cpu = [], [], []
    for x, y in train_batches(corpus, cfg):  # the reference trainer's batches, in its order
        t0, cpu0 = time.perf_counter(), time.thread_time()
        optimizer.zero_grad(set_to_none=True)
        mb_losses: list[torch.Tensor] = []
        args = (x.to(device),) if has_first else ()
        with autocast(cfg.precision, device):  # torch's stages run their forward inside step()
            schedule.step(*args, **(dict(target=y.to(device), losses=mb_losses) if has_last else {}))
        optimizer.step()
        times.append(time.perf_counter() - t0)
        cpu.append(time.thread_time() - cpu0)  # this thread's CPU time: waits cost none
        if has_last:  # equal micro-batches: the mean of their losses is the batch's mean loss
            losses.append(torch.stack([loss.detach() for loss in mb_losses]).mean().item())
    return {"rank": rank, "losses": losses, "times": times, "cpu": cpu}


def _run_specs(ctx: RankContext, specs: list[TorchRunSpec], texts: list[str | None]) -> list[dict]:
    """One spawned rank: every spec in turn, in one process group."""
    return [_run_rank(spec, ctx.rank, ctx.device, text) for spec, text in zip(specs, texts, strict=True)]


def launch(specs: list[TorchRunSpec], timeout_s: float = 120.0) -> list[TorchPipelineResult]:
    """Spawn the ranks once and run every spec in turn (starting processes is the slow part).
    `timeout_s`: how long a rank waits for a silent peer before the run fails (DistributedError)."""
    require(specs, "launch needs at least one TorchRunSpec")
    world = specs[0].ranks
    require(all(s.ranks == world for s in specs), "every spec of one launch needs the same number of ranks")
    # one GPU per rank, or all on the CPU: decided here, the same way for every spec
    device = "cuda" if specs[0].cfg.device in ("cuda", "auto") and gpu_count() >= world else "cpu"
    specs = [replace(s, cfg=replace(s.cfg, device=device)) for s in specs]
    texts = [
        to_csv_text(build_schedule(s.schedule, world, s.cfg.microbatches, s.virtual)) if s.from_csv else None
        for s in specs
    ]
    backend = "nccl" if device == "cuda" else "gloo"
    records = spawn(_run_specs, world, (specs, texts), backend=backend, timeout_s=timeout_s)
    out = []
    for i, spec in enumerate(specs):
        last = records[spec.placement[-1]][i]  # the rank holding the last stage
        runner = (
            "_PipelineScheduleRuntime + our CSV" if spec.from_csv else SCHEDULES[spec.schedule].torch_class
        )
        out.append(TorchPipelineResult(spec.schedule, runner, world, last["losses"], last["times"], texts[i]))
    return out
