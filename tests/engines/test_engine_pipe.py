"""The classic Pipe API: same output and gradients as the plain nn.Sequential, any chunks/checkpoint."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from course_lib.engines.pipe import Pipe
from course_lib.shelf.errors import CourseError


def make_sequential() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(8, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 4)
    )


@pytest.mark.parametrize("chunks", [1, 3, 8])
@pytest.mark.parametrize("checkpoint", ["never", "except_last", "always"])
def test_output_and_gradients_equal_the_plain_sequential(chunks, checkpoint):
    plain = make_sequential()
    piped = Pipe(copy.deepcopy(plain), chunks=chunks, checkpoint=checkpoint, balance=[2, 1, 3])
    x = torch.randn(10, 8)  # 10 samples in 3 chunks: the last one is smaller, as in GPipe
    target = torch.randn(10, 4)
    out_plain, out_piped = plain(x), piped(x)
    torch.testing.assert_close(out_piped, out_plain, rtol=1e-5, atol=1e-6)
    nn.functional.mse_loss(out_plain, target).backward()
    nn.functional.mse_loss(out_piped, target).backward()
    got = [p.grad for part in piped.partitions for p in part.parameters()]
    for g, p in zip(got, plain.parameters(), strict=True):
        torch.testing.assert_close(g, p.grad, rtol=1e-5, atol=1e-7)


def test_old_teaching_code_runs_with_one_changed_import():
    model = Pipe(make_sequential(), chunks=8, checkpoint="never")  # the old call, as in the tutorials
    assert model.balance == [6]  # every layer on the CPU: one partition, as the old Pipe decided
    out = model(torch.randn(16, 8))
    assert isinstance(out, torch.Tensor) and out.shape == (16, 4)
    out.sum().backward()
    assert all(p.grad is not None for p in model.parameters())


def test_devices_split_evenly():
    model = Pipe(make_sequential(), chunks=2, devices=["cpu", "cpu", "cpu"])
    assert model.balance == [2, 2, 2]


def test_checkpointing_keeps_less_for_backward():
    def saved_bytes(checkpoint: str) -> int:
        total = 0

        def pack(t):
            nonlocal total
            total += t.nbytes
            return t

        model = Pipe(make_sequential(), chunks=4, checkpoint=checkpoint, balance=[3, 3])
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            model(torch.randn(64, 8))
        return total

    assert saved_bytes("always") < saved_bytes("never") / 3


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(chunks=0), ["chunks", "0"]),
        (dict(checkpoint="often"), ["'often'", "except_last"]),
        (dict(balance=[2, 2]), ["[2, 2]", "6 layers"]),
        (dict(balance=[3, 3], devices=["cpu"]), ["1 devices", "2 partitions"]),
    ],
)
def test_bad_arguments_are_named(kwargs, words):
    with pytest.raises(CourseError) as err:
        Pipe(make_sequential(), **kwargs)
    for w in words:
        assert w in str(err.value)


def test_refuses_a_non_sequential():
    with pytest.raises(CourseError, match="nn.Sequential, got Linear"):
        Pipe(nn.Linear(2, 2))
