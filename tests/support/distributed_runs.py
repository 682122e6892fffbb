"""Distributed runs of several schedules in one launch, held against the reference trainer."""

from __future__ import annotations

import pytest
import torch

from course_lib.shelf.distributed_engine import make_spec
from course_lib.shelf.reference import TrainConfig, reference_run

TINY = dict(n_layers=6, d_model=16, n_heads=2, seq_len=16, batch_size=8, steps=2)


def specs_for(jobs, ranks):
    return [
        make_spec(TrainConfig(**TINY, microbatches=m), s, ranks, virtual=v, checkpoint=c, partition=part,
                  return_grads=True, threads=1)
        for s, v, m, c, part in jobs
    ]  # fmt: skip


def assert_matches_reference(jobs, results):
    for (name, _, m, _, _), r in zip(jobs, results, strict=True):
        losses, grads, params = reference_run(TrainConfig(**TINY, microbatches=m))
        assert r.losses == pytest.approx(losses, rel=1e-5), name
        assert sorted(r.grads) == sorted(grads), name
        for key, g in grads.items():
            torch.testing.assert_close(r.grads[key], g, rtol=1e-5, atol=1e-7, msg=f"{name} {key}")
            torch.testing.assert_close(r.params[key], params[key].detach(), rtol=1e-5, atol=1e-6)
