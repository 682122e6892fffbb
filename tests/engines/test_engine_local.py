"""The local engine trains exactly like the reference trainer, for every schedule, p, m, partition and
checkpoint mode; and its measured memory shows GPipe holding m micro-batches, 1F1B at most p."""

from __future__ import annotations

import random

import pytest
import torch

from course_lib.shelf.errors import CourseError
from course_lib.shelf.local_engine import LocalPipelineTrainer
from course_lib.shelf.reference import TrainConfig, reference_gradients, train

SMALL = dict(d_model=16, n_heads=2, seq_len=8, lr=1e-2, eval_batches=1)


def small_cfg(n_layers: int = 6, batch_size: int = 8, microbatches: int = 4, steps: int = 2) -> TrainConfig:
    return TrainConfig(
        n_layers=n_layers, batch_size=batch_size, microbatches=microbatches, steps=steps, **SMALL
    )


def random_partition(n_layers: int, n_stages: int, seed: int) -> list[int]:
    """Random stage sizes (each >= 1) covering n_layers layers."""
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, n_layers), n_stages - 1))
    bounds = [0, *cuts, n_layers]
    return [b - a for a, b in zip(bounds, bounds[1:], strict=False)]


def grid():
    """(schedule, p, v, m, partition seed or None, checkpoint): every schedule at every p in {1, 2, 4, 8},
    several m, uniform and random partitions, every checkpoint mode somewhere."""
    cases = []
    modes = ["never", "except_last", "always"]
    i = 0
    for schedule in ("naive", "gpipe", "1f1b", "zb-h1"):
        for p in (1, 2, 4, 8):
            for m in (1, 4) if p <= 2 else (2, 8):
                cases.append((schedule, p, 1, m, None if i % 2 else i, modes[i % 3]))
                i += 1
    for p, m in ((1, 4), (2, 4), (2, 2), (4, 8), (8, 8)):
        cases.append(("interleaved-1f1b", p, 2, m, None if i % 2 else i, modes[i % 3]))
        i += 1
    return cases


@pytest.mark.parametrize("schedule, p, v, m, part_seed, checkpoint", grid())
def test_gradients_and_loss_equal_the_reference(corpus, schedule, p, v, m, part_seed, checkpoint):
    torch.manual_seed(0)
    n_layers = max(6, p * v - 2)  # blocks; the model has n_layers + 2 layers to cut
    cfg = small_cfg(n_layers=n_layers, microbatches=m)
    partition = random_partition(n_layers + 2, p * v, part_seed) if part_seed is not None else None
    trainer = LocalPipelineTrainer(
        cfg, schedule, p, virtual=v, partition=partition, checkpoint=checkpoint, corpus=corpus
    )
    x, y = corpus.batch("train", cfg.batch_size, cfg.seq_len, torch.Generator().manual_seed(3))
    ref_loss, want = reference_gradients(cfg, corpus, batch=(x, y))  # from the same seeded weights
    loss, _ = trainer.compute_gradients(x, y)
    assert loss == pytest.approx(ref_loss, rel=1e-5)
    got = dict(trainer.model.named_parameters())
    assert sorted(got) == sorted(want)
    for name, p in got.items():
        torch.testing.assert_close(p.grad, want[name], rtol=1e-5, atol=1e-7, msg=f"gradient of {name}")


def test_max_grad_diff_helper_is_zero_and_would_see_a_wrong_gradient(corpus):
    trainer = LocalPipelineTrainer(small_cfg(), "zb-h1", 4, corpus=corpus)
    assert trainer.max_grad_diff_vs_reference() < 1e-6
    # a pipeline that forgets one stage's weight gradients must be caught
    trainer.runtimes[1].backward_weight = lambda mb: trainer.runtimes[1]._stash.pop(mb).free()
    assert trainer.max_grad_diff_vs_reference() > 1e-4


def test_loss_curve_equals_the_reference(corpus):
    cfg = small_cfg(steps=4)
    ref = train(cfg, progress=False)
    got = LocalPipelineTrainer(cfg, "1f1b", 4, corpus=corpus).train(progress=False)
    assert got.losses == pytest.approx(ref.losses, rel=1e-5)
    assert got.val_loss_start == pytest.approx(ref.val_loss_start, rel=1e-5)
    assert got.val_loss_end == pytest.approx(ref.val_loss_end, rel=1e-5)
    assert got.losses[-1] < got.losses[0]


def test_timeline_is_measured_compute_and_follows_the_schedule(corpus):
    from course_lib.shelf.costs import Link

    result = LocalPipelineTrainer(small_cfg(steps=2), "gpipe", 4, corpus=corpus).train(progress=False)
    tl = result.timeline
    assert tl.source == "measured compute + simulated links"
    assert len(tl.spans) == 4 * 4 * 2  # p * m * (F + B)
    assert all(c > 0 for c in result.costs.f)
    # a slow link makes the simulated step longer by at least the 2 * (p - 1) link crossings
    slow = LocalPipelineTrainer(small_cfg(steps=2), "gpipe", 4, corpus=corpus, links=Link(latency_s=0.5))
    tl_slow = slow.train(progress=False).timeline
    assert tl_slow.makespan >= 2 * 3 * 0.5


def stage0_peak(corpus, schedule: str, p: int, m: int, checkpoint: str = "never") -> tuple[int, float]:
    cfg = small_cfg(n_layers=6, batch_size=16, microbatches=m)
    trainer = LocalPipelineTrainer(cfg, schedule, p, checkpoint=checkpoint, corpus=corpus)
    x, y = corpus.batch("train", cfg.batch_size, cfg.seq_len, torch.Generator().manual_seed(1))
    _, stats = trainer.compute_gradients(x, y)
    per_microbatch = sum(stats.stash_bytes[0]) / len(stats.stash_bytes[0])
    return stats.peak_saved_bytes[0], per_microbatch


def test_measured_memory_gpipe_holds_m_microbatches_1f1b_at_most_p(corpus):
    p, m = 2, 8
    gpipe_peak, per_mb = stage0_peak(corpus, "gpipe", p, m)
    one_f_one_b_peak, per_mb_1f1b = stage0_peak(corpus, "1f1b", p, m)
    assert per_mb > 0 and per_mb == per_mb_1f1b
    assert gpipe_peak / per_mb == pytest.approx(m, rel=0.05)
    assert one_f_one_b_peak / per_mb <= p + 0.05
    assert gpipe_peak / one_f_one_b_peak == pytest.approx(m / p, rel=0.05)


def test_checkpointing_holds_only_inputs(corpus):
    never, per_mb = stage0_peak(corpus, "gpipe", 2, 8, "never")
    always, _ = stage0_peak(corpus, "gpipe", 2, 8, "always")
    except_last, _ = stage0_peak(corpus, "gpipe", 2, 8, "except_last")
    # always: m inputs (token ids) plus one micro-batch re-materialised at a time
    assert always < 1.2 * per_mb
    # except_last: the last micro-batch keeps its graph, the others only their inputs
    assert per_mb <= except_last < 2.2 * per_mb
    assert never > 7 * per_mb


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(stages=9), ["9 stages", "8 layers"]),
        (dict(stages=0), ["stages", "0"]),
        (dict(schedule="pipedream-2bw"), ["'pipedream-2bw'", "gpipe"]),
        (dict(partition=[2, 2, 2, 1]), ["[2, 2, 2, 1]", "7 layers", "8"]),
        (dict(partition=[4, 4]), ["[4, 4]", "2 stages", "4"]),
        (dict(checkpoint="sometimes"), ["'sometimes'", "except_last"]),
        (dict(schedule="interleaved-1f1b", virtual=3), ["12 model stages", "8 layers"]),
    ],
)
def test_bad_input_is_refused_before_any_work(corpus, kwargs, words, monkeypatch):
    import course_lib.shelf.local_engine as local

    started = lambda cfg: pytest.fail("work started before the input was checked")  # noqa: E731
    monkeypatch.setattr(local, "corpus_and_model", started)
    kwargs = {"schedule": "1f1b", "stages": 4} | kwargs
    with pytest.raises(CourseError) as err:
        LocalPipelineTrainer(small_cfg(), **kwargs)
    for w in words:
        assert w in str(err.value)


def test_microbatches_not_dividing_the_batch_is_refused(corpus):
    with pytest.raises(CourseError, match="3 micro-batches do not divide the batch of 8"):
        LocalPipelineTrainer(small_cfg(microbatches=3), "gpipe", 2, corpus=corpus)


def test_lesson_run_gives_losses_and_both_timelines():
    import matplotlib

    matplotlib.use("Agg")
    from course_lib.lessons.runs import train_pipeline

    run = train_pipeline("gpipe", 2, 4, steps=2, n_layers=4, progress=False, **SMALL)
    assert len(run.losses) == 2
    assert run.measured.source == "measured compute + simulated links"
    assert run.simulated.source == "simulated"
    assert len(run.measured.spans) == len(run.simulated.spans) == 2 * 4 * 2
    assert len(run.plot().axes) == 2
