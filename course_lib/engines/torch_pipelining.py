"""The course's model on PyTorch's own pipeline runtime, torch.distributed.pipelining.

What the course teaches carries over to production code: the same 80-layer toy, cut into the same
stages, trained by ``PipelineStage`` + ``ScheduleGPipe`` / ``Schedule1F1B`` /
``ScheduleInterleaved1F1B`` (``runner="torch"``), or by PyTorch's generic runtime fed a schedule **we**
built and exported as PyTorch's CSV (``runner="torch-csv"``, ``course_lib.schedules.torch_csv``). The
spec, the launch and the result are the distributed engine's (``distributed_engine.make_spec``,
``launch``, ``DistributedResult``), so the two engines compare field by field. A room of its own:
importing it adds ``runner=`` to ``make_spec``, and a run with a torch runner replaces each rank of the
shelf's rank loop by ``TorchRank`` (one rank's side of torch's runtime).

Try it::

    import course_lib.engines.torch_pipelining  # noqa: F401 (adds runner=; course_lib.lesson imports it)
    from course_lib.shelf.reference import TrainConfig
    from course_lib.shelf.distributed_engine import launch, make_spec
    cfg = TrainConfig(n_layers=8, steps=3, batch_size=8, seq_len=32, microbatches=4)
    theirs, ours = launch([make_spec(cfg, "gpipe", 2, runner="torch"),        # torch's ScheduleGPipe
                           make_spec(cfg, "1f1b", 2, runner="torch-csv")])   # our 1F1B, via CSV
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
from collections.abc import Callable
from dataclasses import replace

import torch
from torch import nn

from course_lib.schedules.torch_csv import to_csv_text
from course_lib.shelf.distributed_engine import RoomOption, add_room_option
from course_lib.shelf.errors import require
from course_lib.shelf.model import autocast, lm_loss, stage_modules
from course_lib.shelf.rank_loop import PipelineRank
from course_lib.shelf.reference import corpus_and_model, make_optimizer, train_batches
from course_lib.shelf.run_spec import RUNNERS, DistributedResult, RankRecord, RunSpec, StepRecord, torch_class

# schedules run by their own torch class (the registry's torch_class); any other runs from our CSV
TORCH_CLASS_RUNS = ("gpipe", "1f1b", "interleaved-1f1b")


def _widen(spec: RunSpec, given: dict, local_ranks: int | None) -> RunSpec:
    """A runner of RUNNERS, and what torch's can run: refused before any process starts (options only
    our engine implements, left unset)."""
    runner, cfg, schedule = given["runner"], spec.cfg, spec.schedule
    require(runner in RUNNERS, f"runner must be one of {', '.join(RUNNERS)}, got {runner!r}")
    name, csv = schedule.name, runner == "torch-csv"
    require(
        csv or name in TORCH_CLASS_RUNS,
        f"torch.distributed.pipelining has no class for schedule {name!r} here; choose one of "
        f"{', '.join(TORCH_CLASS_RUNS)}, or runner 'torch-csv' (--runner torch-csv) to run our order through "
        "torch's runtime",
    )
    require(  # Schedule1F1B refuses m < p in its constructor; say so before spawning anything
        name != "1f1b" or csv or cfg.microbatches >= schedule.n_devices,
        f"torch's Schedule1F1B needs m >= p (micro-batches >= ranks): m={cfg.microbatches}, "
        f"p={schedule.n_devices}",
    )
    ours_only = dict(links=spec.links, checkpoint=spec.checkpoint != "never", return_grads=spec.return_grads)
    ours_only |= {k: spec.extras.get(k) for k in ("fault", "tp", "dp", "pace_s")}
    # the tied copies' gradient sum and the global clipping run between the flush and the optimizer step,
    # which torch's schedule.step() does not expose to us
    ours_only |= dict(tie_embeddings=cfg.tie_embeddings, clip_grad_norm=cfg.clip_grad_norm is not None)
    # a layout's empty stages (E||t|L): a rank left with no weights has nothing for torch's optimizer
    ours_only["empty stages"] = 0 in spec.partition.sizes
    given = [option for option, value in ours_only.items() if value]
    require(
        not given, f"runner {runner!r} (torch.distributed.pipelining) takes no {', '.join(given)}: "
        "only the distributed engine (runner='distributed') implements them",
    )  # fmt: skip
    return replace(spec, runner=runner, track_memory=False, rooms=(TorchRank,))


def _torch_schedule(spec: RunSpec, stages: list):
    """The torch schedule object for this rank's stages (a list; single-stage classes take one)."""
    from torch.distributed.pipelining import schedules as S

    m, cls = spec.cfg.microbatches, getattr(S, torch_class(spec.runner, spec.schedule.name))
    if spec.runner == "torch-csv":
        runtime = cls(stages, m, loss_fn=lm_loss)
        with tempfile.NamedTemporaryFile("w", suffix=".csv", newline="") as f:  # torch reads a file
            f.write(to_csv_text(spec.schedule))
            f.flush()
            runtime._load_csv(f.name, format="compute_only")  # torch validates the order here
        return runtime
    return cls(stages[0] if issubclass(cls, S.PipelineScheduleSingle) else stages, m, loss_fn=lm_loss)


class TorchRank(PipelineRank):
    """One rank of torch's runtime: what it measured (step times and CPU time, no spans: torch runs
    the actions inside ``step()``)."""

    def __init__(self, spec: RunSpec, rank: int, device: torch.device, shared: dict | None = None):
        self.spec, self.global_rank, self.index, self.device = spec, rank, rank, device

    def train(self, on_loss: Callable[[float], None] | None = None) -> RankRecord:
        """Train `spec.cfg.steps` batches on torch's runtime (as ``PipelineRank.train``)."""
        from torch.distributed.pipelining import PipelineStage

        spec, rank, device = self.spec, self.index, self.device
        torch.set_num_threads(spec.threads)
        cfg = spec.cfg
        corpus, model = corpus_and_model(replace(cfg, device="cpu"))  # same weights on every rank (the seed)
        n_stages = spec.schedule.n_stages
        modules = stage_modules(model.layers, spec.partition)
        mine = spec.schedule.stages_of(rank)
        stages = [PipelineStage(modules[s].to(device), s, n_stages, device) for s in mine]
        schedule = _torch_schedule(spec, stages)
        optimizer = make_optimizer(nn.ModuleList([modules[s] for s in mine]), cfg)
        has_first, has_last = 0 in mine, n_stages - 1 in mine
        losses, steps = [], []
        for x, y in train_batches(corpus, cfg):  # the reference trainer's batches, in its order
            t0, cpu0 = time.perf_counter(), time.thread_time()
            optimizer.zero_grad(set_to_none=True)
            mb_losses: list[torch.Tensor] = []
            args = (x.to(device),) if has_first else ()
            with autocast(cfg.precision, device):  # torch's stages run their forward inside step()
                schedule.step(*args, **(dict(target=y.to(device), losses=mb_losses) if has_last else {}))
            optimizer.step()  # this thread's CPU time: waits cost none
            steps.append(StepRecord(t0, time.perf_counter(), [], [], [], 0, cpu_s=time.thread_time() - cpu0))
            if has_last:  # equal micro-batches: the mean of their losses is the batch's mean loss
                losses.append(torch.stack([loss.detach() for loss in mb_losses]).mean().item())
                if on_loss is not None:
                    on_loss(losses[-1])
        owned = {id(p): p.numel() for s in mine for p in modules[s].parameters()}  # each counted once
        return RankRecord(
            stage=rank, global_rank=rank, steps=steps, losses=losses, n_params=sum(owned.values())
        )

    @classmethod
    def merge(cls, records: list[RankRecord], spec: RunSpec, result: DistributedResult) -> DistributedResult:
        """The CSV torch's runtime executed (runner "torch-csv")."""
        return replace(result, csv_text=to_csv_text(spec.schedule) if spec.runner == "torch-csv" else None)


add_room_option(RoomOption(("runner",), {"runner": "distributed"}, _widen, order=2))
