"""The zero-bubble W: weight gradients from saved layer inputs and output gradients.

I + W give the full backward's gradients bit for bit, layer type by layer type (and for a module with
no rule, whose weights I handles); W runs no autograd for linear layers; between I and W a stage holds
exactly the saved inputs and output gradients, counted as held bytes; and ZB-H1 trains exactly like
the single-device reference on both engines, p in {2, 4}, with and without checkpointing."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course_lib.engines import split_backward
from course_lib.shelf.distributed_engine import launch, make_spec
from course_lib.shelf.local_engine import LocalPipelineTrainer
from course_lib.shelf.model import ModelConfig, build_model
from course_lib.shelf.reference import TrainConfig, reference_run, train_batches
from course_lib.shelf.stage import StageRuntime

VOCAB, WIDTH = 8, 16


class ShardLike(nn.Module):
    """Weights used through F.linear, as a tensor-parallel shard uses them: no layer rule applies."""

    def __init__(self, d_in: int, d_out: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(d_out, d_in) * 0.1)
        self.bias = nn.Parameter(torch.randn(d_out) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(F.gelu(x), self.weight, self.bias)


class KeywordCall(nn.Module):
    """Calls its linear layer with a keyword argument (the hook must still see the input)."""

    def __init__(self, d_in: int, d_out: int):
        super().__init__()
        self.inner = nn.Linear(d_in, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(input=x)


def every_kind_of_layer() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Embedding(VOCAB, WIDTH), nn.LayerNorm(WIDTH), nn.Linear(WIDTH, 2 * WIDTH), nn.GELU(),
        ShardLike(2 * WIDTH, WIDTH), nn.LayerNorm(WIDTH), KeywordCall(WIDTH, WIDTH),
        nn.Linear(WIDTH, VOCAB, bias=False),
    )  # fmt: skip


def grads_of(module: nn.Module, split: bool, m: int = 2) -> list[torch.Tensor]:
    """One batch of m micro-batches through `module` as a one-stage pipeline: B, or I then W."""
    gen = torch.Generator().manual_seed(1)
    x, y = torch.randint(0, VOCAB, (4, 6), generator=gen), torch.randint(0, VOCAB, (4, 6), generator=gen)
    module.zero_grad(set_to_none=True)
    stage = StageRuntime(0, 1, module, m, split_backward=split)
    for mb, (xm, ym) in enumerate(zip(x.chunk(m), y.chunk(m), strict=True)):
        stage.forward(mb, xm, ym)
        if split:
            stage.backward_input(mb, None)
        else:
            stage.backward(mb, None)
    if split:
        for mb in range(m):
            stage.backward_weight(mb)
    stage.close()
    return [p.grad.clone() for p in module.parameters()]


def test_i_and_w_equal_the_full_backward_bit_for_bit_for_every_layer_kind():
    module = every_kind_of_layer()
    full, split = grads_of(module, split=False), grads_of(module, split=True)
    names = [n for n, _ in module.named_parameters()]
    assert len(full) == len(split) == 12
    for name, a, b in zip(names, full, split, strict=True):
        assert torch.equal(a, b), name


class Twice(nn.Module):
    """One linear layer called twice in a forward: W adds both calls' gradients."""

    def __init__(self, width: int):
        super().__init__()
        self.inner = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(F.gelu(self.inner(x)))


def test_a_linear_layer_called_twice_gets_both_gradients():
    torch.manual_seed(0)
    module = nn.Sequential(nn.Embedding(VOCAB, WIDTH), Twice(WIDTH), nn.Linear(WIDTH, VOCAB))
    full, split = grads_of(module, split=False), grads_of(module, split=True)
    for a, b in zip(full, split, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-8)  # only the order of the sums differs


def test_linear_layers_leave_their_weights_to_w_everything_else_to_i():
    module = every_kind_of_layer()
    recorder = split_backward.LayerCallRecorder(module)
    assert recorder.layers == [module[2], module[6].inner, module[7]]
    in_i = [p for i in (0, 1, 4, 5) for p in module[i].parameters()]
    assert recorder.params_done_in_i(module) == in_i
    recorder.close()


def test_w_runs_no_autograd_for_linear_layers(monkeypatch):
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.GELU(), nn.Linear(WIDTH, WIDTH))
    stage = StageRuntime(1, 3, module, 1, split_backward=True)
    out = stage.forward(0, torch.randn(2, 5, WIDTH))
    stage.backward_input(0, torch.ones_like(out))
    calls = []
    real = torch.autograd.grad
    monkeypatch.setattr(torch.autograd, "grad", lambda *a, **k: calls.append(1) or real(*a, **k))
    stage.backward_weight(0)
    assert calls == []
    assert all(p.grad is not None for p in module.parameters())


def middle_stage(track_memory: bool = True) -> StageRuntime:
    cfg = ModelConfig(n_layers=3, d_model=WIDTH, n_heads=2, vocab_size=VOCAB, seq_len=8)
    return StageRuntime(
        1,
        3,
        nn.Sequential(*build_model(cfg, seed=0).layers[1:3]),
        2,
        track_memory=track_memory,
        split_backward=True,
    )


def unique_bytes(tensors) -> int:
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}
    return sum(storages.values())


def test_between_i_and_w_the_stage_holds_exactly_the_saved_inputs_and_output_gradients():
    stage = middle_stage()
    out = stage.forward(0, torch.randn(2, 8, WIDTH))
    after_f = stage.saved_bytes()
    stage.backward_input(0, torch.randn_like(out))
    pending = stage._stash[0].pending
    held = unique_bytes(pending.tensors())
    # each linear layer's input and output gradient, and the LayerNorms' gradients: nothing else
    assert len(pending.calls) == 2 * 4 and len(pending.ready) == 2 * 2 * 2
    assert stage.saved_bytes() == held > 0
    assert stage.inflight() == 1  # the micro-batch is not done until its W
    # I trades the graph for W's tensors, layer by layer: the peak is the larger of the two
    assert stage.peak_saved_bytes == max(after_f, held)
    stage.backward_weight(0)
    assert (stage.saved_bytes(), stage.inflight()) == (0, 0)


def test_without_memory_tracking_nothing_is_counted_between_i_and_w():
    stage = middle_stage(track_memory=False)
    out = stage.forward(0, torch.randn(2, 8, WIDTH))
    stage.backward_input(0, torch.randn_like(out))
    assert stage.saved_bytes() == 0 and stage.inflight() == 1


def test_stash_bytes_of_a_zb_h1_step_count_what_waits_for_w():
    cfg = TrainConfig(n_layers=4, d_model=WIDTH, n_heads=2, seq_len=8, batch_size=8, microbatches=4, steps=1)
    trainer = LocalPipelineTrainer(cfg, "zb-h1", 2)
    first = trainer.runtimes[0]
    seen = []
    real_w = first.backward_weight

    def watched_w(mb):  # what stage 0 holds just before each of its W
        seen.append(first.saved_bytes())
        real_w(mb)

    first.backward_weight = watched_w
    trainer.compute_gradients(*next(iter(train_batches(trainer.corpus, cfg, 1))))
    assert len(seen) == 4 and all(b > 0 for b in seen)
    assert first.saved_bytes() == 0


# ---- ZB-H1 trains like the single-device reference -----------------------------------------------
TINY = dict(n_layers=6, d_model=16, n_heads=2, seq_len=16, batch_size=8, steps=2, lr=1e-2)


def assert_like_reference(cfg: TrainConfig, losses, grads, params) -> None:
    want_losses, want_grads, want_params = reference_run(cfg)
    assert losses == pytest.approx(want_losses, rel=1e-5)
    assert sorted(grads) == sorted(want_grads)
    assert max((grads[k] - g).abs().max().item() for k, g in want_grads.items()) <= 1e-5
    for key, value in want_params.items():
        torch.testing.assert_close(params[key].detach(), value.detach(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("p, m", [(2, 4), (4, 8)])
@pytest.mark.parametrize("checkpoint", ["never", "always", "except_last"])
def test_zb_h1_local_equals_the_reference(p, m, checkpoint):
    cfg = TrainConfig(**TINY, microbatches=m)
    trainer = LocalPipelineTrainer(cfg, "zb-h1", p, checkpoint=checkpoint)
    losses = []
    for x, y in train_batches(trainer.corpus, cfg):
        trainer.optimizer.zero_grad(set_to_none=True)
        losses.append(trainer.compute_gradients(x, y)[0])
        trainer.optimizer.step()
    named = dict(trainer.model.named_parameters())
    assert_like_reference(cfg, losses, {k: v.grad for k, v in named.items()}, named)


@pytest.mark.processes
@pytest.mark.parametrize("p, m", [(2, 4), (4, 8)])
def test_zb_h1_distributed_equals_the_reference(p, m):
    cfg = TrainConfig(**TINY, microbatches=m)
    modes = ("never", "always")
    specs = [make_spec(cfg, "zb-h1", p, checkpoint=c, return_grads=True, threads=1) for c in modes]
    for result in launch(specs):
        assert_like_reference(cfg, result.losses, result.grads, result.params)
