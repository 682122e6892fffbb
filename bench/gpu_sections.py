"""The sections of ``make gpu-check`` (see ``bench/gpu_check.py``): each runs one GPU path and says
PASS, SKIP or FAIL, with a reason and the numbers it measured.

Every section gets the same ``CheckRun``: the sizes, the machine, and what earlier sections measured
(the reference's losses, the local engine's memory) for the later ones to compare with. The library is
reached through its public entry points only: ``reference.train``, ``LocalPipelineTrainer``,
``run_distributed``, ``SimulatedTP`` and ``run_tensor_parallel``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from course_lib.planner.clusters import card_peak
from course_lib.planner.toy import toy_shape
from course_lib.shelf.distributed_engine import run_distributed
from course_lib.shelf.errors import require
from course_lib.shelf.local_engine import LocalPipelineTrainer, PipelineResult
from course_lib.shelf.model import Corpus, build_model
from course_lib.shelf.reference import TrainConfig, TrainResult, accumulate_gradients, train
from course_lib.shelf.stage import synchronize
from course_lib.tp.distributed import run_tensor_parallel
from course_lib.tp.simulated import SimulatedTP

PASS, SKIP, FAIL = "PASS", "SKIP", "FAIL"
LOSS_RTOL = 1e-4  # FP32, same weights and batch: only the order of float sums may differ
GRAD_RTOL = 1e-3  # of the largest gradient entry; sharded sums round differently
AMP_LOSS_RTOL = 2e-2  # bf16 / fp16 autocast against FP32: the first loss, same weights and batch
Outcome = tuple[str, str, dict]  # status, reason, numbers


@dataclass
class CheckRun:
    """The sizes, the machine, and what earlier sections measured for later ones."""

    cfg: TrainConfig  # device: the one accelerator (or the CPU) every single-device path uses
    stages: int
    gpus: int
    corpus: Corpus
    reference: TrainResult | None = None
    local: PipelineResult | None = None
    distributed_bubble: float | None = None
    allocator_peak: int | None = None
    tp_reference: tuple[float, dict[str, torch.Tensor]] | None = None  # loss, gradients (CPU)

    @property
    def device(self) -> torch.device:
        return torch.device(self.cfg.device)

    def tp_batch(self) -> tuple[TrainConfig, torch.Tensor, torch.Tensor]:
        """A shorter model (at most 8 blocks) and the first training batch, for the TP sections."""
        cfg = replace(self.cfg, n_layers=min(self.cfg.n_layers, 8))
        gen = torch.Generator().manual_seed(cfg.seed)
        return (cfg, *self.corpus.batch("train", cfg.batch_size, cfg.seq_len, gen))


def _gap(got: float, want: float) -> float:
    return abs(got - want) / max(abs(want), 1e-12)


def _matches_reference(run: CheckRun, losses: list[float]) -> tuple[bool, str]:
    """Same weights, same first batch: the first step's loss must be the reference's."""
    if run.reference is None:
        return True, "no reference loss to compare with"
    gap = _gap(losses[0], run.reference.losses[0])
    return gap <= LOSS_RTOL, f"first loss {losses[0]:.5f} vs reference {run.reference.losses[0]:.5f}"


def check_reference(run: CheckRun) -> Outcome:
    result = train(run.cfg, progress=False)
    run.reference = result
    ok = all(math.isfinite(x) for x in result.losses)
    return (
        PASS if ok else FAIL,
        f"on {run.device}: median step {result.step_time_s * 1e3:.1f} ms, "
        f"val loss {result.val_loss_start:.3f} -> {result.val_loss_end:.3f}",
        {"step_time_s": result.step_time_s, "losses": result.losses, "n_params": result.n_params},
    )


def check_local(run: CheckRun) -> Outcome:
    if run.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(run.device)
    trainer = LocalPipelineTrainer(run.cfg, "1f1b", stages=run.stages, corpus=run.corpus)
    shared = trainer.plan.devices == [run.device] * run.stages
    result = trainer.train(progress=False)
    if run.device.type == "cuda":
        run.allocator_peak = torch.cuda.max_memory_allocated(run.device)
    run.local = result
    same, compared = _matches_reference(run, result.losses)
    where = f"all {run.stages} stages on {run.device}" if shared else f"stages on {trainer.plan.devices}"
    return (
        PASS if shared and same else FAIL,
        f"1F1B, {where}: median step {result.step_time_s * 1e3:.1f} ms; {compared}",
        {
            "step_time_s": result.step_time_s,
            "losses": result.losses,
            "devices": [str(d) for d in trainer.plan.devices],
        },
    )


def check_distributed(run: CheckRun) -> Outcome:
    if run.gpus < 2:
        return (
            SKIP,
            f"NCCL needs one GPU per rank and at least 2 ranks; this machine has {run.gpus} CUDA GPU(s)",
            {},
        )
    result = run_distributed(replace(run.cfg, device="cuda"), "1f1b", stages=run.stages, timeout_s=180.0)
    run.distributed_bubble = result.bubble_fraction
    same, compared = _matches_reference(run, result.losses)
    return (
        PASS if same else FAIL,
        f"1F1B, {run.stages} ranks on cuda:0..{run.stages - 1}: "
        f"median step {result.step_time_s * 1e3:.1f} ms; {compared}",
        {"step_time_s": result.step_time_s, "losses": result.losses, "bubble": result.bubble_fraction},
    )


def _grad_gap(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> float:
    scale = max(g.abs().max().item() for g in want.values())
    return max((got[n].cpu() - g).abs().max().item() for n, g in want.items()) / scale


def _timed_step(
    model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, m: int, device: torch.device
) -> tuple[float, float]:
    """One batch's forward and backward, timed from the accelerator's idle to its idle again."""
    synchronize([device])
    start = time.perf_counter()
    loss = accumulate_gradients(model, x.to(device), y.to(device), m)
    synchronize([device])
    return loss, time.perf_counter() - start


def check_tp_one_process(run: CheckRun) -> Outcome:
    cfg, x, y = run.tp_batch()
    model_cfg = cfg.model_config(run.corpus.tokenizer.vocab_size)
    reference = build_model(model_cfg, seed=cfg.seed).to(run.device)
    want_loss, plain_s = _timed_step(reference, x, y, cfg.microbatches, run.device)
    want = {n: p.grad.cpu() for n, p in reference.named_parameters()}
    run.tp_reference = (want_loss, want)
    tp = SimulatedTP.from_seed(model_cfg, t=2, seed=cfg.seed).to(run.device)
    loss, tp_s = _timed_step(tp, x, y, cfg.microbatches, run.device)
    gap = _grad_gap(tp.full_gradients(), want)
    ok = _gap(loss, want_loss) <= LOSS_RTOL and gap <= GRAD_RTOL
    return (
        PASS if ok else FAIL,
        f"t=2 shards of {cfg.n_layers} blocks on {run.device}: gradients match the unsharded model's "
        f"(largest gap {gap:.1e} of the largest gradient), {len(tp.log.events)} all-reduces per step; "
        f"step {tp_s * 1e3:.1f} ms vs {plain_s * 1e3:.1f} ms unsharded",
        {
            "grad_gap": gap,
            "all_reduces": len(tp.log.events),
            "step_time_s": tp_s,
            "plain_step_time_s": plain_s,
        },
    )


def check_tp_nccl(run: CheckRun) -> Outcome:
    if run.gpus < 2:
        return SKIP, f"NCCL needs one GPU per rank (t=2); this machine has {run.gpus} CUDA GPU(s)", {}
    require(
        run.tp_reference is not None, "the one-process TP section must run first (it computes the reference)"
    )
    cfg, x, y = run.tp_batch()
    model_cfg = cfg.model_config(run.corpus.tokenizer.vocab_size)
    res = run_tensor_parallel(
        model_cfg,
        2,
        x,
        y,
        cfg.microbatches,
        cfg.seed,
        backend="nccl",
        alphas_s=(0.0,),
        repeats=3,
        timeout_s=180.0,
    )
    want_loss, want = run.tp_reference
    gap = _grad_gap(res.gradients, want)
    step_s = sorted(res.timings[0.0])[len(res.timings[0.0]) // 2]
    ok = res.logs_agree and _gap(res.loss, want_loss) <= LOSS_RTOL and gap <= GRAD_RTOL
    return (
        PASS if ok else FAIL,
        f"t=2 ranks on cuda:0,1 ({res.backend}): gradient gap {gap:.1e}, ranks agree: {res.logs_agree}; "
        f"median step {step_s * 1e3:.1f} ms",
        {"grad_gap": gap, "step_time_s": step_s},
    )


def check_autocast(run: CheckRun) -> Outcome:
    """bf16 and fp16 autocast (TrainConfig.precision): the reference and the local engine's 1F1B, each
    close to the FP32 reference's first loss, and equal to each other (the same ops in the same order)."""
    if run.reference is None:
        return SKIP, "the FP32 reference did not run", {}
    numbers, said, ok = {}, [], True
    for precision in ("bfloat16", "float16"):
        cfg = replace(run.cfg, precision=precision, steps=2)
        ref = train(cfg, progress=False).losses
        local = LocalPipelineTrainer(cfg, "1f1b", stages=run.stages, corpus=run.corpus).train(progress=False)
        vs_fp32, vs_ref = _gap(ref[0], run.reference.losses[0]), _gap(local.losses[0], ref[0])
        ok &= all(math.isfinite(x) for x in ref + local.losses) and vs_fp32 <= AMP_LOSS_RTOL
        ok &= vs_ref <= LOSS_RTOL
        numbers[precision] = {"reference": ref, "local": local.losses}
        said.append(f"{precision}: first loss {ref[0]:.4f} ({vs_fp32:.2%} from FP32), local {vs_ref:.1e} off")
    return PASS if ok else FAIL, "; ".join(said), numbers


def check_memory(run: CheckRun) -> Outcome:
    if run.local is None:
        return SKIP, "the local engine did not run", {}
    saved = run.local.peak_saved_bytes
    numbers = {"peak_saved_bytes_per_stage": saved, "allocator_peak_bytes": run.allocator_peak}
    counted = f"saved for backward, peak per stage {[round(b / 2**20, 1) for b in saved]} MiB"
    if run.allocator_peak is None:
        return (
            SKIP,
            f"{counted}; {run.device.type} keeps no allocator high-water mark to compare with",
            numbers,
        )
    # weights, gradients and AdamW's two moments (FP32) are all alive during each optimizer step, and
    # every tensor autograd saves came from the allocator: its peak must cover either
    state = 16 * run.local.n_params
    return (
        PASS if run.allocator_peak >= max(state, *saved) else FAIL,
        f"{counted}; allocator peak {run.allocator_peak / 2**20:.0f} MiB, of which model state "
        f"(16 B/param) {state / 2**20:.0f} MiB",
        numbers | {"model_state_bytes": state},
    )


def check_bubble(run: CheckRun) -> Outcome:
    if run.local is None:
        return SKIP, "the local engine did not run", {}
    simulated = run.local.timeline.bubble_fraction
    numbers = {"simulated": simulated, "measured": run.distributed_bubble}
    sim = f"simulated {simulated:.1%} (the local engine's measured compute, free links)"
    if run.distributed_bubble is None:
        return SKIP, f"{sim}; measured: needs the distributed engine (2 GPUs or more)", numbers
    ok = 0 <= simulated < 1 and 0 <= run.distributed_bubble < 1
    return PASS if ok else FAIL, f"measured {run.distributed_bubble:.1%} (NCCL, wall clock) vs {sim}", numbers


def check_throughput(run: CheckRun) -> Outcome:
    if run.reference is None:
        return SKIP, "the reference run did not finish", {}
    shape = toy_shape(run.cfg, run.corpus.tokenizer.vocab_size)  # the planner's one FLOP count
    flops = shape.step_flops(run.cfg.batch_size, recompute=False)
    achieved = flops / run.reference.step_time_s
    numbers = {"model_flops_per_step": flops, "achieved_flops": achieved}
    done = f"reference {achieved / 1e9:.1f} GFLOP/s ({flops / 1e9:.1f} GFLOP per step)"
    if run.device.type != "cuda":
        return SKIP, f"{done}; MFU needs a CUDA card's datasheet peak", numbers
    name = torch.cuda.get_device_name(run.device)
    peak = card_peak(name)
    if peak is None:
        return (
            SKIP,
            f"{done}; unknown card {name!r}: no peak in course_lib/planner/clusters.py, MFU skipped",
            numbers,
        )
    mfu = achieved / peak.fp32_flops
    bf16 = f", {achieved / peak.bf16_flops:.1%} of dense BF16" if peak.bf16_flops else ""
    return (
        PASS,
        f"{done}: MFU {mfu:.1%} of {peak.name}'s FP32 peak {peak.fp32_flops / 1e12:.1f} TFLOP/s{bf16} "
        f"[{peak.source}]",
        numbers | {"mfu_fp32": mfu, "card": peak.name},
    )


SECTIONS: tuple[tuple[str, Callable[[CheckRun], Outcome]], ...] = (
    ("reference training", check_reference),
    ("local engine, stages share one device", check_local),
    ("distributed engine (NCCL)", check_distributed),
    ("tensor parallel, one process", check_tp_one_process),
    ("tensor parallel (NCCL)", check_tp_nccl),
    ("memory: saved tensors vs allocator", check_memory),
    ("bubble: measured vs simulated", check_bubble),
    ("throughput: FLOP/s and MFU", check_throughput),
)
# only on a CUDA GPU, after the others (it compares with the FP32 reference): the CPU stays float32
CUDA_SECTIONS: tuple[tuple[str, Callable[[CheckRun], Outcome]], ...] = (
    ("autocast bf16 / fp16 (reference, local)", check_autocast),
)
