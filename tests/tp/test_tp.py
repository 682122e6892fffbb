"""Tensor parallelism: the split model gives the reference's loss and gradients, and bad sizes are refused."""

import pytest
import torch

from course_lib.shelf.errors import CourseError
from course_lib.shelf.launcher import DistributedError
from course_lib.shelf.model import ModelConfig, build_model
from course_lib.shelf.reference import accumulate_gradients
from course_lib.tp.distributed import run_tensor_parallel
from course_lib.tp.simulated import SimulatedTP

CFG = ModelConfig(n_layers=3, d_model=32, n_heads=4, vocab_size=50, seq_len=16)


@pytest.fixture(scope="module")
def batch():
    gen = torch.Generator().manual_seed(0)
    return torch.randint(0, 50, (4, 16), generator=gen), torch.randint(0, 50, (4, 16), generator=gen)


@pytest.fixture(scope="module")
def reference(batch):
    model = build_model(CFG, seed=0)
    loss = accumulate_gradients(model, *batch, m=2)
    return loss, {name: p.grad for name, p in model.named_parameters()}


def assert_matches_reference(loss, grads, reference):
    ref_loss, ref_grads = reference
    assert loss == pytest.approx(ref_loss, rel=1e-6)
    assert set(grads) == set(ref_grads)  # every parameter of the full model, under its own name
    for name, g in ref_grads.items():
        torch.testing.assert_close(grads[name], g, rtol=1e-5, atol=1e-7, msg=name)


@pytest.mark.parametrize("t", [1, 2, 4])
def test_simulated_tp_equals_reference(t, batch, reference):
    tp = SimulatedTP.from_seed(CFG, t, seed=0)
    loss = accumulate_gradients(tp, *batch, m=2)
    assert_matches_reference(loss, tp.full_gradients(), reference)
    # 2 all-reduces per block forward, 2 backward, per micro-batch; none for t = 1
    assert tp.log.count("all_reduce", "forward") == (0 if t == 1 else 2 * 3 * 2)
    assert tp.log.count("all_reduce", "backward") == (0 if t == 1 else 2 * 3 * 2)
    if t > 1:  # every message is one micro-batch's activations: 2 x 16 x 32 fp32 values
        assert tp.log.sizes() == {2 * 16 * 32 * 4: 24}


def test_shards_hold_whole_heads_and_a_t_th_of_every_matrix():
    tp = SimulatedTP.from_seed(CFG, 4, seed=0)
    shard = tp.layers[1].shards[0]
    assert shard.heads == 1
    assert shard.qkv.weight.shape == (3 * 8, 32) and shard.proj.weight.shape == (32, 8)
    assert shard.up.weight.shape == (32, 32) and shard.down.weight.shape == (32, 32)
    assert shard.proj.bias is None and shard.down.bias is None  # added once, after the all-reduce


@pytest.mark.processes
@pytest.mark.parametrize("t", [2, 4])
def test_real_multiprocess_tp_equals_reference_and_counts_its_collectives(t, batch, reference):
    res = run_tensor_parallel(CFG, t, *batch, microbatches=2, prompt_len=8, timeout_s=60)
    assert res.backend in ("gloo", "nccl")
    assert_matches_reference(res.loss, res.gradients, reference)
    assert res.logs_agree  # every rank issued the same collectives in the same order
    assert res.step_log.count("all_reduce", "forward") == 2 * 3 * 2
    assert res.step_log.count("all_reduce", "backward") == 2 * 3 * 2
    assert res.step_log.sizes() == {2 * 16 * 32 * 4: 24}
    # one generated token = one forward pass over the 8-token prompt: 2 per block, 8 x 32 fp32 each
    assert res.token_log.summary()["all_reduce/forward"] == 6
    assert res.token_log.sizes() == {8 * 32 * 4: 6}


def test_width_or_heads_that_t_does_not_divide_are_refused_by_name():
    with pytest.raises(CourseError, match=r"t=3 does not divide the width d_model=32"):
        SimulatedTP.from_seed(CFG, 3)
    with pytest.raises(CourseError, match=r"t=4 does not divide the head count n_heads=2"):
        SimulatedTP.from_seed(ModelConfig(n_layers=1, d_model=32, n_heads=2), 4)
    with pytest.raises(CourseError, match=r"t=3 does not divide"):
        run_tensor_parallel(CFG, 3, torch.zeros(1, 4, dtype=torch.long), torch.zeros(1, 4, dtype=torch.long))
    with pytest.raises(CourseError, match=r"integer >= 1, got 0"):
        SimulatedTP.from_seed(CFG, 0)


@pytest.mark.processes
def test_a_failing_rank_surfaces_its_error_instead_of_hanging():
    bad = torch.full((1, 4), 99, dtype=torch.long)  # token ids beyond the vocabulary: the embedding raises
    with pytest.raises(DistributedError, match=r"rank \d failed: IndexError") as info:
        run_tensor_parallel(CFG, 2, bad, bad, timeout_s=20)
    assert info.value.failed_rank in (0, 1)  # both ranks get the bad ids: the first to report is named
