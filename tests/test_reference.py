"""The reference trainer is the ground truth: its accumulated gradients must equal a full batch's;
the toolkit every engine compares itself with gives its batches, loss and gradients."""

import math

import pytest
import torch

from course_lib.shelf.errors import LIMITS, CourseError
from course_lib.shelf.model import ModelConfig, build_model, lm_loss
from course_lib.shelf.reference import (
    TrainConfig,
    accumulate_gradients,
    first_batch,
    max_grad_diff,
    reference_gradients,
    train,
    train_batches,
)


def _grads(model):
    return [p.grad.detach().clone() for p in model.parameters()]


def test_gradient_accumulation_equals_one_full_batch_step():
    torch.manual_seed(0)
    cfg = ModelConfig(n_layers=6, d_model=32, n_heads=4, vocab_size=50, seq_len=16)
    x = torch.randint(0, 50, (8, 16))
    y = torch.randint(0, 50, (8, 16))
    full = build_model(cfg, seed=0).double()
    loss_full = lm_loss(full(x), y)
    loss_full.backward()
    for m in (1, 2, 4, 8):
        acc = build_model(cfg, seed=0).double()
        loss_acc = accumulate_gradients(acc, x, y, m)
        assert abs(loss_acc - loss_full.item()) < 1e-12
        for g_full, g_acc in zip(_grads(full), _grads(acc), strict=True):
            torch.testing.assert_close(g_acc, g_full, rtol=1e-10, atol=1e-12)


def test_fp32_accumulation_is_within_float_rounding():
    cfg = ModelConfig(n_layers=4, vocab_size=50, seq_len=16)
    x, y = torch.randint(0, 50, (8, 16)), torch.randint(0, 50, (8, 16))
    full = build_model(cfg, seed=0)
    lm_loss(full(x), y).backward()
    acc = build_model(cfg, seed=0)
    accumulate_gradients(acc, x, y, 4)
    for g_full, g_acc in zip(_grads(full), _grads(acc), strict=True):
        torch.testing.assert_close(g_acc, g_full, rtol=1e-5, atol=1e-7)


def test_short_training_run_lowers_the_held_out_loss_and_is_deterministic():
    cfg = TrainConfig(n_layers=4, steps=30, batch_size=8, microbatches=2, seq_len=32, lr=1e-2)
    a = train(cfg, progress=False)
    b = train(cfg, progress=False)
    assert a.losses == b.losses  # same seed, same numbers, bit for bit
    assert a.val_loss_end < 0.8 * a.val_loss_start
    assert len(a.losses) == 30 and a.n_layers == 4 and a.n_params > 0


def test_the_toolkit_gives_the_reference_trainers_batches_loss_and_gradients(corpus):
    cfg = TrainConfig(n_layers=2, d_model=16, n_heads=2, seq_len=16, batch_size=4, microbatches=2, steps=2)
    (x, y), (x2, _) = train_batches(corpus, cfg)  # cfg.steps batches, in the reference's order
    x0, y0 = first_batch(corpus, cfg)
    assert torch.equal(x, x0) and torch.equal(y, y0) and not torch.equal(x2, x)
    loss, grads = reference_gradients(cfg, corpus)  # first batch, seeded weights: train()'s first step
    assert loss == train(cfg, progress=False).losses[0]
    assert grads and all(g is not None for g in grads.values())
    assert max_grad_diff(grads, grads) == 0
    name = next(iter(grads))
    assert max_grad_diff(grads | {name: grads[name] + 0.25}, grads) == pytest.approx(0.25)
    # a gradient missing on one side counts as zeros: a forgotten gradient shows
    assert max_grad_diff(grads | {name: None}, grads) == grads[name].abs().max().item()
    assert max_grad_diff({}, grads) == max(g.abs().max().item() for g in grads.values())


@pytest.mark.parametrize(
    "change, words",
    [
        (dict(n_layers=10**8), ["12*d_model^2*n_layers is 1,228,800,000,000", "1,000,000,000 parameters"]),
        (dict(d_model=2**16, n_heads=4), ["12*d_model^2*n_layers", "limit of 1,000,000,000 parameters"]),
        (dict(seed=2**70), ["seed must be in 0..2**63-1", str(2**70)]),
        (dict(seed=-1), ["seed must be in 0..2**63-1, got -1"]),
        (dict(lr=math.inf), ["learning rate must be in (0, 1000], got inf"]),
        (dict(lr=math.nan), ["got nan"]),
    ],
)
def test_config_refuses_what_could_not_finish_naming_the_limit(change, words):
    with pytest.raises(CourseError) as err:
        TrainConfig(**change).check()
    for w in words:
        assert w in str(err.value)
    TrainConfig(n_layers=LIMITS["layers"], seed=LIMITS["seed"], lr=LIMITS["lr"]).check()  # the limits pass
