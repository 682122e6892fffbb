"""The forward's precision (TrainConfig.precision): float32 everywhere by default; bf16 or fp16 autocast
only on a CUDA GPU, refused elsewhere before anything is built. The mechanism itself (model.autocast in
the reference and in every stage) is checked here on the CPU, whose autocast knows bfloat16: linear
layers compute in it, the messages between stages and every gradient stay float32, and a stage computes
what the reference computes under the same autocast."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import course_lib.engines.torch_pipelining  # noqa: F401 (the room: adds runner= to make_spec)
from course_lib.shelf import distributed_engine as distributed
from course_lib.shelf.errors import CourseError
from course_lib.shelf.local_engine import LocalPipelineTrainer
from course_lib.shelf.model import ModelConfig, autocast, build_model, check_amp
from course_lib.shelf.reference import TrainConfig, accumulate_gradients
from course_lib.shelf.stage import StageRuntime

CPU = torch.device("cpu")
SMALL = dict(n_layers=2, d_model=16, n_heads=2, seq_len=8, batch_size=4, microbatches=2, steps=1)


def _model() -> nn.Module:
    return build_model(ModelConfig(n_layers=2, d_model=16, n_heads=2, vocab_size=11, seq_len=8), seed=0)


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    return torch.randint(0, 11, (4, 8), generator=gen), torch.randint(0, 11, (4, 8), generator=gen)


@pytest.mark.parametrize("bad", ["fp8", "bf16", "FLOAT32", 16, None])
def test_an_unknown_precision_is_refused_naming_the_allowed_ones(bad):
    with pytest.raises(CourseError, match=r"precision must be one of float32, bfloat16, float16, got"):
        TrainConfig(precision=bad).check()
    with pytest.raises(CourseError, match="precision must be one of"):
        StageRuntime(0, 1, nn.Sequential(nn.Linear(2, 2)), 1, precision=bad)


@pytest.mark.parametrize("precision", ["bfloat16", "float16"])
def test_autocast_off_a_cuda_gpu_is_refused_before_anything_runs(precision):
    cfg = TrainConfig(**SMALL, precision=precision)
    said = rf"precision '{precision}' is autocast on a CUDA GPU, but the device is 'cpu'"
    with pytest.raises(CourseError, match=said):
        cfg.check()
    with pytest.raises(CourseError, match=said):  # the distributed engine: before a process starts
        distributed.make_spec(cfg, "1f1b", 2)
    with pytest.raises(CourseError, match=said):
        distributed.make_spec(cfg, "1f1b", 2, runner="torch")
    with pytest.raises(CourseError, match=said):
        LocalPipelineTrainer(cfg, "1f1b", stages=2)
    check_amp(precision, torch.device("cuda", 0))  # the rule itself: a CUDA device may autocast
    check_amp("float32", CPU)


def test_float32_runs_without_autocast():
    with autocast("float32", CPU):
        assert not torch.is_autocast_enabled("cpu")
        assert nn.Linear(3, 2)(torch.ones(1, 3)).dtype == torch.float32


def _linear_dtypes(module: nn.Module) -> list[torch.dtype]:
    seen: list[torch.dtype] = []
    for layer in module.modules():
        if isinstance(layer, nn.Linear):
            layer.register_forward_hook(lambda _m, _a, out: seen.append(out.dtype))
    return seen


def test_under_bf16_autocast_linears_compute_in_bf16_and_messages_and_gradients_stay_float32():
    layers = _model().layers
    first = StageRuntime(0, 2, nn.Sequential(*layers[:2]), 1, precision="bfloat16", split_backward=False)
    last = StageRuntime(1, 2, nn.Sequential(*layers[2:]), 1, precision="bfloat16", split_backward=False)
    seen = _linear_dtypes(layers)
    x, y = _batch()
    activation = first.forward(0, x)
    last.forward(0, activation, y)
    assert seen and set(seen) == {torch.bfloat16}  # the matmuls ran in bf16
    assert activation.dtype == torch.float32  # what stage 0 sends: the float32 residual stream
    grad_input = last.backward(0, None)
    assert grad_input.dtype == torch.float32  # what stage 1 sends back
    first.backward(0, grad_input)
    assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in layers.parameters())


def test_a_stage_computes_what_the_reference_computes_under_the_same_autocast():
    x, y = _batch()
    reference = _model()
    want = accumulate_gradients(reference, x, y, 1, precision="bfloat16")
    whole = StageRuntime(0, 1, nn.Sequential(*_model().layers), 1, precision="bfloat16", split_backward=False)
    whole.forward(0, x, y)
    whole.backward(0, None)
    assert whole.loss() == want
    got = dict(whole.module.named_parameters())
    for i, (name, p) in enumerate(reference.layers.named_parameters()):
        assert torch.equal(got[name].grad, p.grad), (i, name)
    float32 = accumulate_gradients(_model(), x, y, 1)
    assert want != float32 and abs(want - float32) < 2e-2 * abs(float32)  # bf16: close, not equal
