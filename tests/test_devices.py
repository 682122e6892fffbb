"""Which device each pipeline stage gets on every machine shape, the GPUs faked (this machine has none)."""

from __future__ import annotations

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from course_lib import lesson
from course_lib.lesson import accelerator_config, describe_devices
from course_lib.planner.clusters import card_peak
from course_lib.planner.toy import toy_shape
from course_lib.shelf.errors import CourseError
from course_lib.shelf.model import ModelConfig, build_model, count_parameters
from course_lib.shelf.reference import TrainConfig, accumulate_gradients
from course_lib.shelf.stage import (
    StageRuntime,
    resolve_device,
    stage_devices,
    synchronize,
)

CPU = torch.device("cpu")


def cuda(i: int) -> torch.device:
    return torch.device(f"cuda:{i}")


@pytest.fixture
def machine(monkeypatch):
    """machine(gpus, mps=False): pretend this machine has `gpus` CUDA GPUs and maybe Apple's mps."""

    def fake(gpus: int, mps: bool = False) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: f"Fake GPU {i}")
        monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)

    return fake


@pytest.mark.parametrize(
    ("gpus", "expected"),
    [
        (0, [CPU] * 4),  # no GPU: simulated devices on the CPU
        (1, [cuda(0)] * 4),  # one GPU: every stage shares it
        (2, [cuda(0)] * 4),  # fewer GPUs than stages: every stage on the first
        (4, [cuda(0), cuda(1), cuda(2), cuda(3)]),  # one per stage
        (8, [cuda(0), cuda(1), cuda(2), cuda(3)]),  # one per stage; the rest idle
    ],
)
def test_auto_puts_stages_on_gpus_by_count(machine, gpus, expected):
    machine(gpus)
    assert stage_devices(4) == expected
    assert (len(set(stage_devices(4))) < 4) == (gpus < 4)  # fewer GPUs: simulated devices


def test_two_gpus_give_two_stages_one_each(machine):
    machine(2)
    assert stage_devices(2) == [cuda(0), cuda(1)]
    assert len(set(stage_devices(2))) == 2


@pytest.mark.parametrize(("gpus", "expected"), [(0, torch.device("mps")), (1, cuda(0))])
def test_apple_mps_is_used_when_there_is_no_cuda(machine, gpus, expected):
    machine(gpus, mps=True)
    assert stage_devices(4) == [expected] * 4
    assert resolve_device("auto") == expected


@pytest.mark.parametrize(
    ("gpus", "device", "expected"),
    [
        (8, "cpu", [CPU] * 4),
        (4, "cuda", [cuda(0), cuda(1), cuda(2), cuda(3)]),
        (2, "cuda", [cuda(0)] * 4),
        (2, " CUDA:1 ", [cuda(1)] * 4),  # an explicit GPU holds every stage
        (8, "cuda:0", [cuda(0)] * 4),
    ],
)
def test_explicit_device_strings(machine, gpus, device, expected):
    machine(gpus)
    assert stage_devices(4, device) == expected


def test_explicit_mps(machine):
    machine(0, mps=True)
    assert stage_devices(3, "mps") == [torch.device("mps")] * 3


@pytest.mark.parametrize(
    ("gpus", "mps", "device", "message"),
    [
        (2, False, "gpu", "unknown device 'gpu'; expected one of auto, cpu, cuda, cuda:N, mps"),
        (2, False, "cuda:x", "unknown device 'cuda:x'"),
        (2, False, "cuda:2", "device 'cuda:2' is not available: this machine has 2 CUDA GPU"),
        (0, False, "cuda", "device 'cuda' is not available: this machine has 0 CUDA GPU"),
        (0, False, "mps", "device 'mps' is not available"),
        (0, False, None, "unknown device None"),
        (0, False, 0, "unknown device 0"),
    ],
)
def test_bad_device_is_refused_naming_it(machine, gpus, mps, device, message):
    machine(gpus, mps)
    with pytest.raises(CourseError, match=message.replace("(", r"\(")):
        stage_devices(4, device)


def test_bad_stage_count_is_refused(machine):
    machine(1)
    with pytest.raises(CourseError, match="n_stages must be a whole number >= 1, got 0"):
        stage_devices(0)


@pytest.mark.parametrize(
    ("gpus", "mps", "line"),
    [
        (0, False, "no GPU: simulated devices on the CPU"),
        (0, True, "1 Apple GPU (mps): all p stages share it as simulated devices"),
        (1, False, "1 GPU (Fake GPU 0): all p stages share it as simulated devices"),
        (4, False, "4 GPUs (Fake GPU 0, Fake GPU 1, Fake GPU 2, Fake GPU 3): one per stage for p <= 4"),
    ],
)
def test_setup_says_which_machine_shape(machine, gpus, mps, line):
    machine(gpus, mps)
    assert line in describe_devices()
    assert lesson.setup(quiet=True) is None and lesson.run_line().splitlines()[1] == describe_devices()


def test_lessons_train_the_toy_on_a_cpu_and_the_gpu_size_on_a_gpu(machine):
    machine(0)
    assert lesson.train_config(steps=7) == TrainConfig(steps=7)  # the CPU defaults, unchanged
    machine(1)
    gpu = lesson.train_config(steps=7)
    assert (gpu.n_layers, gpu.d_model, gpu.device, gpu.steps) == (80, 512, "auto", 7)
    assert gpu == accelerator_config(steps=7)
    gpu.check()  # a valid config on the (faked) GPU machine


def test_gpu_size_fits_a_16_gb_card_with_every_stage_on_it():
    """Weights, gradients and AdamW's two moments (16 B per parameter) plus GPipe's m=8 micro-batches of
    activations through all 80 blocks, measured by saved-tensor counting on one block."""
    cfg = accelerator_config()
    one_block = build_model(
        ModelConfig(n_layers=1, d_model=cfg.d_model, n_heads=cfg.n_heads, seq_len=cfg.seq_len)
    )
    embedding, block, head = one_block.layers
    n_params = count_parameters(embedding) + cfg.n_layers * count_parameters(block) + count_parameters(head)
    stage = StageRuntime(1, 3, torch.nn.Sequential(block), n_microbatches=1)
    micro_batch = cfg.batch_size // cfg.microbatches
    stage.forward(0, torch.randn(micro_batch, cfg.seq_len, cfg.d_model), None)
    gpipe_activations = cfg.microbatches * cfg.n_layers * stage.saved_bytes()
    assert 200e6 < n_params < 300e6
    assert 16 * n_params + gpipe_activations < 15e9  # a 16 GB card has about 15 GB to give


def test_synchronize_waits_for_each_accelerator_once(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda d: calls.append(d))
    monkeypatch.setattr(torch.mps, "synchronize", lambda: calls.append("mps"))
    synchronize([cuda(0), cuda(0), CPU, cuda(1), torch.device("mps")])
    assert sorted(map(str, calls)) == ["cuda:0", "cuda:1", "mps"]


@pytest.mark.parametrize(
    ("name", "card"),
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H200", "H200 SXM"),
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("NVIDIA L4", "L4"),
        ("Tesla T4", "T4"),
        ("NVIDIA GeForce RTX 4090", "GeForce RTX 4090"),
        ("NVIDIA L40S", None),  # not an L4
        ("Fake GPU 0", None),
    ],
)
def test_card_peaks_by_device_name(name, card):
    peak = card_peak(name)
    assert (peak.name if peak else None) == card


def test_model_flops_match_torch_flop_counter():
    """The planner's count (planner/toy.py) against torch's own count of one step's matmuls (math
    attention, so it counts the attention products too); both leave out biases and LayerNorms."""
    cfg = TrainConfig(n_layers=2, d_model=64, seq_len=64, batch_size=4, microbatches=2)
    model = build_model(cfg.model_config(vocab_size=40))
    x, y = torch.randint(0, 40, (4, 64)), torch.randint(0, 40, (4, 64))
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        accumulate_gradients(model, x, y, cfg.microbatches)
    flops = toy_shape(cfg, vocab_size=40).step_flops(cfg.batch_size, recompute=False)
    ratio = counter.get_total_flops() / flops
    assert 0.97 < ratio <= 1.0
