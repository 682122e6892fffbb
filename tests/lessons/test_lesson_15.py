"""Lesson 15: pipeline inference; forward-only and decode schedules against their closed form."""

import itertools

import pytest
import torch

from course_lib.lessons.inference import (
    decode,
    forward_only,
    lap_makespan,
    measured_forward_costs,
    pipelined_logits,
    request_latencies,
)  # fmt: skip
from course_lib.shelf.costs import Link, StageCosts
from course_lib.shelf.errors import CourseError
from course_lib.shelf.model import ModelConfig, build_model
from course_lib.shelf.simulator import simulate


@pytest.mark.parametrize("hop", [0.0, 0.4, 3.0])
def test_the_closed_form_is_the_simulators_makespan(hop):
    for p, m, tokens in itertools.product([1, 2, 4, 5], [1, 3, 8], [1, 2, 4]):
        schedule = forward_only(p, m) if tokens == 1 else decode(p, m, tokens)
        tl = simulate(schedule, StageCosts.fused(1.0, 0.0), links=Link(latency_s=hop))
        assert tl.makespan == pytest.approx(lap_makespan(p, m, tokens, 1.0, hop)), (p, m, tokens)


def test_prefill_latency_and_throughput():
    tl = simulate(forward_only(4, 8), StageCosts.fused(2.0, 0.0), links=Link(latency_s=0.5))
    assert request_latencies(tl) == pytest.approx([(j + 4) * 2.0 + 3 * 0.5 for j in range(8)])
    assert tl.bubble_fraction == pytest.approx(1 - 8 * 4 * 2.0 / (4 * tl.makespan))


def test_one_decoding_sequence_pays_p_stages_and_p_hops_a_token():
    per_token = lap_makespan(4, 1, 11, 1.0, 0.5) - lap_makespan(4, 1, 10, 1.0, 0.5)
    assert per_token == pytest.approx(4 * (1.0 + 0.5))
    # enough sequences in flight fill the ring: then a token of each costs m stage-times
    assert lap_makespan(4, 12, 11, 1.0, 0.5) - lap_makespan(4, 12, 10, 1.0, 0.5) == pytest.approx(12.0)


def test_the_forward_only_pipeline_computes_the_whole_models_logits():
    cfg = ModelConfig(n_layers=4, seq_len=16)
    x = torch.randint(0, cfg.vocab_size, (6, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(pipelined_logits(cfg, 3, x, m=3), build_model(cfg, seed=0)(x))


def test_measured_costs_are_one_positive_forward_per_stage():
    costs = measured_forward_costs(ModelConfig(n_layers=4, seq_len=16), p=3, batch=2, repeats=2)
    assert len(costs.f) == 3 and all(f > 0 for f in costs.f) and costs.i == 0.0


def test_bad_sizes_are_refused():
    with pytest.raises(CourseError, match="tokens must be a whole number >= 1, got 0"):
        decode(2, 2, 0)
    with pytest.raises(CourseError, match="6 stages need at least 6 layers; the model has 4"):
        pipelined_logits(ModelConfig(n_layers=2, seq_len=8), 6, torch.zeros(2, 8, dtype=torch.long), 1)


def test_a_forward_only_schedule_is_checked_as_one_and_the_engines_refuse_it():
    from dataclasses import replace

    from course_lib.shelf.local_engine import make_plan
    from course_lib.shelf.reference import TrainConfig
    from course_lib.shelf.schedule import Action, Kind
    from course_lib.shelf.validate import check

    schedule = forward_only(2, 3)
    assert check(schedule) == []
    # a stray backward is named, and so is a missing forward
    with_b = replace(schedule, orders=[schedule.orders[0] + [Action(0, Kind.B, 0)], schedule.orders[1]])
    assert any("forward only (inference)" in problem for problem in check(with_b))
    short = replace(schedule, orders=[schedule.orders[0][:-1], schedule.orders[1]])
    assert any("0F2" in problem and "missing" in problem for problem in check(short))
    with pytest.raises(CourseError, match="forward only"):
        make_plan(TrainConfig(n_layers=4, microbatches=4), forward_only(2, 4), None)
