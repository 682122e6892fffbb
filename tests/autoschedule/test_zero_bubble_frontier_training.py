"""The automatic zero-bubble schedules trained for real: both engines against the single-device reference."""

from __future__ import annotations

import pytest
import torch

from course_lib.autoschedule.auto_zero_bubble import auto_zero_bubble
from course_lib.shelf.costs import StageCosts
from course_lib.shelf.local_engine import LocalPipelineTrainer
from course_lib.shelf.reference import TrainConfig, reference_gradients, reference_run

SMALL = dict(d_model=16, n_heads=2, seq_len=8, lr=1e-2, eval_batches=1, batch_size=8, steps=1)
# uneven costs and a slow link: the heuristic's own order, not a handcrafted one
UNEVEN = StageCosts(2.0, 1.0, 0.5)


@pytest.mark.parametrize(
    "schedule, p, m, partition",
    [
        ("zb-1p", 2, 4, None), ("zb-2p", 4, 8, [3, 1, 2, 2]), ("zb-2p", 4, 4, None),
        (auto_zero_bubble(3, 8, 5, UNEVEN, comm=1.5), 3, 8, [1, 2, 3]),
        (auto_zero_bubble(4, 8, 8, UNEVEN, comm=0.3), 4, 8, None),
        (auto_zero_bubble(2, 8, 1.5, UNEVEN, comm=0.3, placement="v"), 2, 8, [2, 1, 1, 2]),
    ],
)  # fmt: skip
def test_local_engine_equals_the_reference(corpus, schedule, p, m, partition):
    cfg = TrainConfig(n_layers=4 if p < 4 else 6, microbatches=m, **SMALL)
    trainer = LocalPipelineTrainer(cfg, schedule, p, partition=partition, corpus=corpus)
    assert trainer.schedule.split_backward and trainer.schedule.n_devices == p
    x, y = corpus.batch("train", cfg.batch_size, cfg.seq_len, torch.Generator().manual_seed(3))
    ref_loss, want = reference_gradients(cfg, corpus, batch=(x, y))
    loss, _ = trainer.compute_gradients(x, y)
    assert loss == pytest.approx(ref_loss, rel=1e-5)
    for key, param in trainer.model.named_parameters():
        torch.testing.assert_close(param.grad, want[key], rtol=1e-5, atol=1e-7, msg=key)


TINY = dict(n_layers=6, d_model=16, n_heads=2, seq_len=16, batch_size=8, steps=2)


@pytest.mark.processes
@pytest.mark.timeout(400)
def test_distributed_engine_equals_the_reference():
    from course_lib.shelf.distributed_engine import launch, make_spec

    # one launch takes one size of pipe: two ranks (lesson 10 trains four, locally)
    jobs = [("zb-1p", 4), ("zb-2p", 8), (auto_zero_bubble(2, 8, 3, UNEVEN, comm=1.0), 8),
            (auto_zero_bubble(2, 8, 1.5, UNEVEN, comm=1.0, placement="v"), 8)]  # fmt: skip
    specs = [make_spec(TrainConfig(**TINY, microbatches=m), s, 2 if isinstance(s, str) else None,
                       return_grads=True, threads=1) for s, m in jobs]  # fmt: skip
    for (_, m), result in zip(jobs, launch(specs), strict=True):
        losses, grads, params = reference_run(TrainConfig(**TINY, microbatches=m))
        assert result.losses == pytest.approx(losses, rel=1e-5), result.schedule
        for key, g in grads.items():
            torch.testing.assert_close(result.grads[key], g, rtol=1e-5, atol=1e-7, msg=key)
            torch.testing.assert_close(result.params[key], params[key].detach(), rtol=1e-5, atol=1e-6)
