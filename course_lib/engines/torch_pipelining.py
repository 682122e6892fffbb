"""The course's model on PyTorch's own pipeline runtime, torch.distributed.pipelining.

What the course teaches carries over to production code: the same 80-layer toy, cut into the same
stages, trained by ``PipelineStage`` + ``ScheduleGPipe`` / ``Schedule1F1B`` /
``ScheduleInterleaved1F1B``, or by PyTorch's generic runtime fed a schedule **we** built and exported
as PyTorch's CSV (``course_lib.schedules.torch_csv``). One process per rank (gloo on CPU; NCCL when
every rank has a GPU), spawned from here, so it runs from a notebook too.

Try it::

    from course_lib.reference import TrainConfig
    from course_lib.engines.torch_pipelining import run_torch_pipelining
    cfg = TrainConfig(n_layers=8, steps=3, batch_size=8, seq_len=32, microbatches=4)
    r = run_torch_pipelining(cfg, "gpipe", stages=2)           # torch's ScheduleGPipe
    r = run_torch_pipelining(cfg, "1f1b", stages=2, from_csv=True)  # our 1F1B, via CSV
    r.losses          # per step: equal (to float rounding) to the reference trainer's

Both sides compute the same thing: each rank builds the model from the seed, keeps its stages
(stage s on rank s % p, torch's and Megatron's placement), sees the reference trainer's batches in
its order, and steps AdamW once per batch; torch divides the summed micro-batch gradients by m
(``scale_grads=True``), as our reference does with its 1/m.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass, replace

import torch
from torch import nn

from course_lib.devices import gpu_count
from course_lib.engines.launch import RankContext, spawn
from course_lib.engines.plan import resolve_schedule
from course_lib.errors import require
from course_lib.reference import TrainConfig, make_optimizer, setup
from course_lib.schedules.builders import build_schedule, resolve_name

# our schedule name -> torch.distributed.pipelining class that builds the same order itself
TORCH_CLASSES = {
    "gpipe": "ScheduleGPipe",
    "1f1b": "Schedule1F1B",
    "interleaved-1f1b": "ScheduleInterleaved1F1B",
}


@dataclass(frozen=True)
class TorchRunSpec:
    """One run: `schedule` (our name) on `ranks` processes with `virtual` stages each.

    ``from_csv``: build the order with our builder, write it as PyTorch CSV and let torch's generic
    runtime (``_PipelineScheduleRuntime._load_csv``) execute it; otherwise torch's own class builds it.
    """

    cfg: TrainConfig
    schedule: str = "gpipe"
    ranks: int = 2
    virtual: int = 1
    from_csv: bool = False
    threads: int = 1


@dataclass
class TorchPipelineResult:
    schedule: str
    runner: str  # the torch class (or "_PipelineScheduleRuntime + our CSV") that ran it
    ranks: int
    losses: list[float]  # the batch's mean training loss, per step
    step_times_s: list[float]  # wall clock of each step on the last rank
    csv_text: str | None = None  # the CSV torch executed, when from_csv


def make_spec(
    cfg: TrainConfig,
    schedule: str = "gpipe",
    stages: int = 2,
    *,
    virtual: int = 1,
    from_csv: bool = False,
    threads: int = 1,
) -> TorchRunSpec:
    """Check everything before any process starts (bad input: a CourseError naming the value)."""
    cfg.check()
    name = resolve_name(schedule)
    require(
        from_csv or name in TORCH_CLASSES,
        f"torch.distributed.pipelining has no class for schedule {name!r} here; choose one of "
        f"{', '.join(TORCH_CLASSES)}, or pass from_csv=True to run our order through torch's runtime",
    )
    if name == "1f1b" and not from_csv:
        # Schedule1F1B refuses m < p in its constructor; say so before spawning anything
        require(
            cfg.microbatches >= stages,
            f"torch's Schedule1F1B needs at least as many micro-batches as ranks: m={cfg.microbatches}, "
            f"p={stages}",
        )
    resolve_schedule(cfg, name, stages, virtual)  # the engines' checks: p, m, v, layers; validated
    return TorchRunSpec(cfg, name, stages, virtual, from_csv, threads)


def _torch_schedule(spec: TorchRunSpec, stages: list, loss_fn, csv_path: str | None):
    """The torch schedule object for this rank's stages (a list; single-stage classes take one)."""
    from torch.distributed.pipelining import schedules as S

    m = spec.cfg.microbatches
    if spec.from_csv:
        runtime = S._PipelineScheduleRuntime(stages, m, loss_fn=loss_fn)
        runtime._load_csv(csv_path, format="compute_only")  # torch validates the order here
        return runtime
    cls = getattr(S, TORCH_CLASSES[spec.schedule])
    if issubclass(cls, S.PipelineScheduleSingle):
        return cls(stages[0], m, loss_fn=loss_fn)
    return cls(stages, m, loss_fn=loss_fn)


def _run_rank(spec: TorchRunSpec, rank: int, device: torch.device, csv_path: str | None) -> dict:
    from torch.distributed.pipelining import PipelineStage

    from course_lib.model import lm_loss
    from course_lib.partition import stage_modules, uniform

    torch.set_num_threads(spec.threads)
    cfg = spec.cfg
    corpus, model = setup(replace(cfg, device="cpu"))  # same weights on every rank, from the seed
    n_stages = spec.ranks * spec.virtual
    modules = stage_modules(model.layers, uniform(len(model.layers), n_stages))
    mine = [s for s in range(n_stages) if s % spec.ranks == rank]
    stages = [PipelineStage(modules[s].to(device), s, n_stages, device) for s in mine]
    schedule = _torch_schedule(spec, stages, lm_loss, csv_path)
    optimizer = make_optimizer(nn.ModuleList([modules[s] for s in mine]), cfg)
    has_first, has_last = 0 in mine, n_stages - 1 in mine
    gen = torch.Generator().manual_seed(cfg.seed)  # the reference trainer's batches, in its order
    losses, times = [], []
    for _ in range(cfg.steps):
        x, y = corpus.batch("train", cfg.batch_size, cfg.seq_len, gen)
        t0 = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        mb_losses: list[torch.Tensor] = []
        args = (x.to(device),) if has_first else ()
        if has_last:
            schedule.step(*args, target=y.to(device), losses=mb_losses)
        else:
            schedule.step(*args)
        optimizer.step()
        times.append(time.perf_counter() - t0)
        if has_last:  # equal micro-batches: the mean of their losses is the batch's mean loss
            losses.append(torch.stack([loss.detach() for loss in mb_losses]).mean().item())
    return {"rank": rank, "losses": losses, "times": times}


def _run_specs(ctx: RankContext, specs: list[TorchRunSpec], csvs: list) -> list[dict]:
    """One spawned rank: every spec in turn, in one process group."""
    return [_run_rank(spec, ctx.rank, ctx.device, csv) for spec, csv in zip(specs, csvs, strict=True)]


def launch(specs: list[TorchRunSpec], timeout_s: float = 120.0) -> list[TorchPipelineResult]:
    """Spawn the ranks once and run every spec in turn (starting processes is the slow part).
    `timeout_s`: how long a rank waits for a silent peer before the run fails (DistributedError)."""
    from course_lib.schedules.torch_csv import write_csv

    require(specs, "launch needs at least one TorchRunSpec")
    world = specs[0].ranks
    require(all(s.ranks == world for s in specs), "every spec of one launch needs the same number of ranks")
    # one GPU per rank, or all on the CPU: decided here, the same way for every spec
    device = "cuda" if specs[0].cfg.device in ("cuda", "auto") and gpu_count() >= world else "cpu"
    specs = [replace(s, cfg=replace(s.cfg, device=device)) for s in specs]
    with tempfile.TemporaryDirectory() as tmp:
        csvs, texts = [], []
        for i, spec in enumerate(specs):
            if not spec.from_csv:
                csvs.append(None)
                texts.append(None)
                continue
            ours = build_schedule(spec.schedule, world, spec.cfg.microbatches, spec.virtual)
            path = os.path.join(tmp, f"{i}_{spec.schedule}.csv")
            write_csv(ours, path)
            csvs.append(path)
            with open(path) as f:
                texts.append(f.read())
        backend = "nccl" if device == "cuda" else "gloo"
        records = spawn(_run_specs, world, (specs, csvs), backend=backend, timeout_s=timeout_s)
    out = []
    for i, spec in enumerate(specs):
        last = records[(world * spec.virtual - 1) % world][i]  # the rank holding the last stage
        runner = "_PipelineScheduleRuntime + our CSV" if spec.from_csv else TORCH_CLASSES[spec.schedule]
        out.append(TorchPipelineResult(spec.schedule, runner, world, last["losses"], last["times"], texts[i]))
    return out


def run_torch_pipelining(
    cfg: TrainConfig,
    schedule: str = "gpipe",
    stages: int = 2,
    *,
    virtual: int = 1,
    from_csv: bool = False,
    threads: int = 1,
    timeout_s: float = 120.0,
) -> TorchPipelineResult:
    """Train `cfg` with torch.distributed.pipelining on `stages` spawned processes (see the module doc)."""
    spec = make_spec(cfg, schedule, stages, virtual=virtual, from_csv=from_csv, threads=threads)
    return launch([spec], timeout_s)[0]
