"""`make gpu-check` on this GPU-less machine: the CPU path, its report and its exit code."""

from __future__ import annotations

import json
import re
import sys
from types import SimpleNamespace

import pytest
import torch
from support.paths import REPO_ROOT

from course_lib.lesson import accelerator_config
from course_lib.shelf.reference import TrainResult

# the check is a script in bench/ (make gpu-check), not part of the library
sys.path.insert(0, str(REPO_ROOT / "bench"))
import gpu_check  # noqa: E402
import gpu_sections  # noqa: E402

TINY = ["--json", "--layers", "2", "--steps", "2"]


def report_of(capsys, argv: list[str]) -> tuple[int, dict]:
    code = gpu_check.main(argv)
    return code, json.loads(capsys.readouterr().out)


def test_cpu_path_passes_and_says_what_it_skipped(capsys):
    code, report = report_of(capsys, TINY)
    assert code == 0 and report["passed"] and not report["on_gpu"]
    status = {s["name"]: (s["status"], s["reason"]) for s in report["sections"]}
    assert list(status) == [name for name, _ in gpu_sections.SECTIONS]
    for name in (
        "reference training",
        "local engine, stages share one device",
        "tensor parallel, one process",
    ):
        assert status[name][0] == "PASS", status[name]
    assert status["local engine, stages share one device"][1].startswith("1F1B, all 4 stages on cpu")
    for name in ("distributed engine (NCCL)", "tensor parallel (NCCL)"):
        assert (
            status[name] == ("SKIP", status[name][1]) and "this machine has 0 CUDA GPU(s)" in status[name][1]
        )
    assert "no allocator high-water mark" in status["memory: saved tensors vs allocator"][1]
    assert "MFU needs a CUDA card" in status["throughput: FLOP/s and MFU"][1]
    assert report["counts"] == {"PASS": 3, "SKIP": 5, "FAIL": 0}


def test_a_broken_path_fails_the_check_and_the_rest_still_run(capsys, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("stage 2 lost its GPU")

    monkeypatch.setattr(gpu_sections, "LocalPipelineTrainer", broken)
    code = gpu_check.main(TINY[1:])  # the text report
    out = capsys.readouterr().out
    assert code == 1
    assert out.startswith("gpu-check WITHOUT A GPU")
    assert "FAIL  local engine, stages share one device  RuntimeError: stage 2 lost its GPU" in out
    assert "SKIP  memory: saved tensors vs allocator     the local engine did not run" in out
    assert re.search(r"\n2 PASS, 5 SKIP, 1 FAIL in \d+ s\n$", out)


@pytest.mark.parametrize(
    ("argv", "message"), [(["--steps", "1"], "--steps must be >= 2"), (["--layers", "1"], "got 1")]
)
def test_bad_flags_are_refused(capsys, argv, message):
    assert gpu_check.main(argv) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(("gpus", "stages", "device"), [(1, 4, "cuda:0"), (2, 2, "cuda:0"), (8, 4, "cuda:0")])
def test_on_a_gpu_it_trains_the_lessons_gpu_size(monkeypatch, gpus, stages, device):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    run = gpu_check.plan_run()
    assert (run.cfg.n_layers, run.cfg.d_model, run.cfg.device, run.stages) == (80, 512, device, stages)


@pytest.fixture
def gpu_run(corpus) -> gpu_sections.CheckRun:
    """A CheckRun as on one GPU, with a reference that took 0.5 s per step (nothing runs on a GPU here)."""
    run = gpu_sections.CheckRun(accelerator_config(device="cuda:0"), stages=4, gpus=1, corpus=corpus)
    run.reference = TrainResult([3.7], 3.7, 3.5, step_times_s=[0.5], n_layers=80, n_params=252_000_000)
    return run


def test_mfu_is_against_the_cards_fp32_peak(monkeypatch, gpu_run):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 80GB HBM3")
    status, reason, numbers = gpu_sections.check_throughput(gpu_run)
    assert status == "PASS" and "H100 SXM's FP32 peak 67.0 TFLOP/s" in reason and "datasheet" in reason
    assert numbers["mfu_fp32"] == pytest.approx(numbers["achieved_flops"] / 67e12)


def test_an_unknown_card_skips_mfu_saying_so(monkeypatch, gpu_run):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA B200")
    status, reason, numbers = gpu_sections.check_throughput(gpu_run)
    assert status == "SKIP" and "unknown card 'NVIDIA B200'" in reason and "MFU skipped" in reason
    assert numbers["achieved_flops"] > 0


@pytest.mark.parametrize(("allocator_gib", "status"), [(6.0, "PASS"), (3.0, "FAIL")])
def test_allocator_peak_must_cover_the_model_state(gpu_run, allocator_gib, status):
    gpu_run.local = SimpleNamespace(peak_saved_bytes=[2**30, 2**29], n_params=252_000_000)  # state: 3.8 GiB
    gpu_run.allocator_peak = int(allocator_gib * 2**30)
    assert gpu_sections.check_memory(gpu_run)[0] == status
