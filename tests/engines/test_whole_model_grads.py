"""The whole model's gradients in a pipeline: tied embeddings (two copies whose gradients are summed,
course_lib/shelf/tied_embedding.py) and gradient-norm clipping over every stage and rank
(course_lib/shelf/grad_clip.py), each equal to the reference trainer's, on the local engine for every
registered schedule, on the distributed engine, and under TP x PP x DP."""

from __future__ import annotations

import json

import pytest
import torch

import course_lib.engines  # noqa: F401  (the split backward of zero-bubble schedules)
import course_lib.schedules  # noqa: F401  (every schedule by name)
import course_lib.tp.mesh  # noqa: F401  (tp= and dp=)
from course_lib.cli import main
from course_lib.lessons.broken_runs import tied_drift
from course_lib.shelf import distributed_engine as distributed
from course_lib.shelf.errors import CourseError
from course_lib.shelf.first_schedules import SCHEDULES
from course_lib.shelf.local_engine import LocalPipelineTrainer
from course_lib.shelf.reference import (
    EMBEDDING_WEIGHT,
    TrainConfig,
    head_weight,
    max_grad_diff,
    reference_gradients,
    reference_run,
)

MAX_NORM = 0.25


def tiny(**kw) -> TrainConfig:
    base = dict(n_layers=2, d_model=16, n_heads=2, seq_len=8, batch_size=8, microbatches=4, steps=2,
                tie_embeddings=True, clip_grad_norm=MAX_NORM)  # fmt: skip
    return TrainConfig(**(base | kw))


@pytest.fixture(scope="module")
def reference() -> tuple[list[float], dict, dict]:
    return reference_run(tiny())


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [("clip_grad_norm", 0.0, "number > 0"), ("clip_grad_norm", -1, "number > 0"),
     ("clip_grad_norm", "1", "number > 0"), ("clip_grad_norm", True, "number > 0"),
     ("clip_grad_norm", float("inf"), "number > 0"), ("tie_embeddings", "yes", "True or False")],
)  # fmt: skip
def test_bad_values_are_refused_at_the_door(field, value, words) -> None:
    with pytest.raises(CourseError, match=f"{field} must be .*{words}"):
        LocalPipelineTrainer(tiny(**{field: value}), "1f1b", 2)


def test_the_reference_clips_as_torch_does_and_ties_one_weight() -> None:
    _, free = reference_gradients(tiny(clip_grad_norm=None))
    _, clipped = reference_gradients(tiny())
    norm = lambda grads: torch.cat([g.reshape(-1) for n, g in grads.items() if n != head_weight(2)]).norm()  # noqa: E731
    assert norm(free) > 4 * MAX_NORM  # so the clip really acts in every test here
    assert norm(clipped).item() == pytest.approx(MAX_NORM, rel=1e-4)
    assert clipped[EMBEDDING_WEIGHT] is clipped[head_weight(2)]  # one weight, under both names


@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
def test_every_schedule_trains_tied_and_clipped_as_the_reference(reference, schedule) -> None:
    losses, _, weights = reference
    trainer = LocalPipelineTrainer(tiny(), schedule, 2)
    result = trainer.train(progress=False)
    assert result.losses == pytest.approx(losses, abs=1e-6)
    for name, p in trainer.model.named_parameters():
        torch.testing.assert_close(p.detach(), weights[name].detach(), rtol=1e-5, atol=1e-6, msg=name)
    layers = trainer.model.layers
    assert layers[0].token.weight is not layers[-1].out.weight  # two copies, on two stages
    assert tied_drift(layers[0].token.weight, layers[-1].out.weight) == 0.0  # ... kept exactly equal


def test_without_the_sum_the_copies_drift_and_the_loss_leaves_the_reference(reference) -> None:
    trainer = LocalPipelineTrainer(tiny(steps=3), "1f1b", 2)
    trainer.sum_tied = False
    result = trainer.train(progress=False)
    assert tied_drift(trainer.model.layers[0].token.weight, trainer.model.layers[-1].out.weight) > 1e-4
    assert abs(result.losses[-1] - reference_run(tiny(steps=3))[0][-1]) > 1e-5


def test_the_distributed_engine_sums_the_copies_across_ranks_and_clips_one_norm(reference) -> None:
    losses, grads, weights = reference
    specs = [distributed.make_spec(tiny(), name, 2, return_grads=True) for name in ("1f1b", "zb-v")]
    # 1F1B: stage 0 on rank 0, the head on rank 1 (an all-reduce of two); ZB-V: both on rank 0 (one add)
    for result in distributed.launch(specs):
        assert result.losses == pytest.approx(losses, abs=1e-6)
        assert max_grad_diff(result.grads, grads) < 1e-6
        assert max(float((result.params[n] - weights[n].detach()).abs().max()) for n in result.params) < 1e-6


def test_tp_pp_dp_clips_one_norm_counting_replicated_weights_once(reference) -> None:
    losses, grads, _ = reference
    result = distributed.run_distributed(tiny(), "1f1b", 2, tp=2, dp=2, return_grads=True)
    assert (result.tp, result.dp) == (2, 2)
    assert result.losses == pytest.approx(losses, abs=1e-6)
    assert max_grad_diff(result.grads, grads) < 1e-6


def test_the_command_line_takes_the_flags_on_every_engine(capsys) -> None:
    tiny_flags = ["--layers", "2", "--width", "16", "--heads", "2", "--seq-len", "8", "--batch-size", "8",
                  "--microbatches", "4", "--steps", "2", "--json", "--clip-grad-norm", str(MAX_NORM),
                  "--tie-embeddings"]  # fmt: skip
    outs = []
    for engine in ("reference", "local"):
        stages = ["--stages", "2"] if engine == "local" else []
        assert main(["train", "--engine", engine, *tiny_flags, *stages]) == 0
        outs.append(json.loads(capsys.readouterr().out))
    assert outs[0]["losses"] == pytest.approx(outs[1]["losses"], abs=1e-6)
    assert outs[1]["config"]["clip_grad_norm"] == MAX_NORM and outs[1]["config"]["tie_embeddings"] is True
    assert main(["train", "--engine", "local", *tiny_flags, "--layout", "E|t|t|L"]) == 0
    assert json.loads(capsys.readouterr().out)["losses"] == pytest.approx(outs[0]["losses"], abs=1e-6)


@pytest.mark.parametrize(
    "change", [{"tie_embeddings": True, "clip_grad_norm": None}, {"tie_embeddings": False}]
)
def test_torchs_runner_refuses_what_only_our_engine_does_before_any_process(change) -> None:
    import course_lib.engines.torch_pipelining  # noqa: F401  (adds runner=)

    name = "tie_embeddings" if change["tie_embeddings"] else "clip_grad_norm"
    with pytest.raises(CourseError, match=f"takes no {name}"):
        distributed.make_spec(tiny(**change), "1f1b", 2, runner="torch")
