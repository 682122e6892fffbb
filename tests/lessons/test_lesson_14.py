"""Lesson 14: asynchronous pipelines; stale weights trained for real, the step time simulated."""

import re
from dataclasses import replace

import pytest
import torch
from support.committed import source

from course_lib.lessons.async_pipeline import (
    AsyncSpec,
    pipedream,
    synchronous,
    time_per_batch,
    train_async,
    two_bw,
)
from course_lib.shelf.errors import CourseError
from course_lib.shelf.reference import (
    TrainConfig,
    corpus_and_model,
    reference_gradients,
    reference_run,
    train_batches,
)

CFG = TrainConfig(n_layers=2, steps=3, seq_len=16, batch_size=8, microbatches=4, eval_batches=1,
                  warmup_steps=2)  # fmt: skip


def test_with_no_staleness_it_is_the_reference_trainer_exactly():
    result = train_async(CFG, synchronous(4))
    losses, _, weights = reference_run(CFG)
    assert result.losses == losses  # bit for bit: the same sums in the same order
    assert all(torch.equal(result.weights[n], w) for n, w in weights.items())


def _adam_step(w, m, v, g, t, lr, betas=(0.9, 0.95), eps=1e-8):
    m = betas[0] * m + (1 - betas[0]) * g
    v = betas[1] * v + (1 - betas[1]) * g * g
    step = (m / (1 - betas[0] ** t)) / ((v / (1 - betas[1] ** t)).sqrt() + eps)
    return w - lr * step, m, v


def test_two_bw_second_update_uses_the_gradient_of_the_weights_one_update_old():
    cfg = replace(CFG, steps=2)
    corpus, model = corpus_and_model(cfg)
    w0 = {n: p.detach().clone() for n, p in model.named_parameters()}
    batches = list(train_batches(corpus, cfg))
    g1 = reference_gradients(cfg, corpus, weights=w0, batch=batches[0])[1]
    g2 = reference_gradients(cfg, corpus, weights=w0, batch=batches[1])[1]  # at W0, not W1: stale
    want = {}
    for n, w in w0.items():  # AdamW by hand, warm-up lr/2 then lr, no weight decay
        zero = torch.zeros_like(w)
        w1, m, v = _adam_step(w, zero, zero, g1[n], 1, cfg.lr / 2)
        want[n], _, _ = _adam_step(w1, m, v, g2[n], 2, cfg.lr)
    got = train_async(cfg, two_bw(4)).weights
    assert all(torch.allclose(got[n], want[n], rtol=1e-5, atol=1e-7) for n in want)
    fresh = reference_run(cfg)[2]  # the synchronous second update differs
    assert max((fresh[n] - got[n]).abs().max().item() for n in want) > 1e-5


def test_pipedream_keeps_one_version_per_micro_batch_in_flight_and_learns():
    spec = pipedream(4)
    assert spec.delays == (3, 2, 1, 0) and spec.versions == (4, 3, 2, 1)
    assert two_bw(4).versions == (2, 2, 2, 2) and synchronous(4).versions == (1, 1, 1, 1)
    result = train_async(CFG, spec)
    versions = zip(result.stage_params, (4, 3, 2, 1), strict=True)
    assert result.stashed_weight_bytes() == [4 * n * v for n, v in versions]
    assert result.losses[-1] < result.losses[0]
    # only the last stage computes on fresh weights; the others' staleness changes the run
    assert result.losses != train_async(CFG, synchronous(4, "microbatch")).losses


def test_no_flush_leaves_only_the_fill_of_the_stream():
    sync, stream = time_per_batch(4, 8, n_batches=10)  # F = 1, B = 2: a slot of 3
    assert sync == pytest.approx((8 + 4 - 1) * 3)
    assert stream == pytest.approx((10 * 8 + 4 - 1) * 3 / 10)


def test_bad_specs_are_refused_with_the_value_named():
    with pytest.raises(CourseError, match="one entry per stage \\(4\\), got 2"):
        train_async(CFG, AsyncSpec(4, "batch", (1, 1)))
    with pytest.raises(CourseError, match="update must be one of .* got 'sometimes'"):
        train_async(CFG, AsyncSpec(2, "sometimes", (0, 0)))
    with pytest.raises(CourseError, match="whole number >= 0, got \\[-1\\]"):
        train_async(CFG, AsyncSpec(2, "batch", (0, -1)))
    with pytest.raises(CourseError, match="n_batches must be >= 1, got 0"):
        time_per_batch(4, 8, 0)


def test_lesson_14_cites_both_papers_with_their_sections():
    intro = source("14_asynchronous_pipelines", "0626749e")
    assert re.search(
        r"PipeDream\*\* \(Narayanan et al\.,.*SOSP 2019,\s+sec\. 3\.3 on weight stashing", intro, re.S
    )
    assert "arXiv 1806.03377" in intro
    assert re.search(r"PipeDream-2BW\*\* \(.*arXiv 2006\.09503,\s+sec\. 3\)", intro, re.S)


def test_the_local_engine_runs_stale_weights_under_any_schedule_and_refuses_bad_staleness():
    from course_lib.engines.stale import StaleLocalTrainer
    from course_lib.shelf.local_engine import LocalPipelineTrainer

    def losses(schedule, staleness):
        kind, more = (
            (LocalPipelineTrainer, {}) if staleness is None else (StaleLocalTrainer, {"staleness": staleness})
        )
        trainer = kind(CFG, schedule, stages=4, track_memory=False, **more)
        return trainer.train(progress=False).losses

    fresh, stale = losses("1f1b", None), losses("1f1b", (1, 1, 1, 1))
    assert losses("gpipe", (0, 0, 0, 0)) == fresh  # no staleness: the synchronous engine
    assert losses("gpipe", (1, 1, 1, 1)) == stale  # the same gradients in another order of actions
    assert stale[0] == fresh[0] and stale != fresh  # stale from the second step on
    for bad, message in [((1, 1), "one entry per stage \\(4\\), got 2"), ((0, 0, 0, -1), "got \\[-1\\]"),
                         ((0, 0, 0, True), "got \\[True\\]"), ((0, 0, 0, 1.5), "got \\[1.5\\]")]:  # fmt: skip
        with pytest.raises(CourseError, match=message):
            StaleLocalTrainer(CFG, "1f1b", stages=4, staleness=bad)
