"""Partitioner: optimal never worse than uniform, strictly better on the toy model; memory budget errors."""

from __future__ import annotations

import itertools
import random

import pytest
import torch

from course_lib.balance import (
    BYTES_PER_PARAM,
    OutOfMemory,
    balanced,
    check_memory,
    inflight_per_stage,
    optimal,
    profile_layers,
    stage_memory,
    stage_totals,
)
from course_lib.shelf.errors import CourseError
from course_lib.shelf.first_schedules import build_schedule
from course_lib.shelf.model import ModelConfig, Partition, build_model, uniform


def brute_force_best(costs, k):
    n = len(costs)
    best = float("inf")
    for cuts in itertools.combinations(range(1, n), k - 1):
        bounds = (0, *cuts, n)
        best = min(best, max(sum(costs[a:b]) for a, b in zip(bounds, bounds[1:], strict=False)))
    return best


def test_optimal_never_worse_than_uniform_and_matches_brute_force():
    rng = random.Random(0)
    for _ in range(300):
        n = rng.randint(1, 12)
        k = rng.randint(1, n)
        costs = [rng.choice([0.0, rng.random(), rng.random() * 10]) for _ in range(n)]
        part = optimal(costs, k)
        part.check(n)
        assert part.n_stages == k and min(part.sizes) >= 1
        worst = max(stage_totals(costs, part))
        assert worst <= max(stage_totals(costs, uniform(n, k))) + 1e-12
        assert worst == pytest.approx(brute_force_best(costs, k))


def test_small_examples_and_ties_keep_early_stages_light():
    assert optimal([5, 1, 1, 1, 1, 5], 3).sizes == (1, 4, 1)
    assert optimal([1] * 82, 4).sizes == (20, 20, 21, 21)
    assert stage_totals([5, 1, 1, 1, 1, 5], uniform(6, 3)) == [6.0, 2.0, 6.0]


def test_fits_constraint_is_respected_and_impossible_is_explained():
    # stage 0 may hold at most 2 layers
    part = optimal([1] * 10, 2, fits=lambda s, a, b: s != 0 or b - a <= 2)
    assert part.sizes == (2, 8)
    with pytest.raises(CourseError, match="no way to cut 10 layers into 2 stages"):
        optimal([1] * 10, 2, fits=lambda s, a, b: b - a <= 3)


@pytest.mark.parametrize(
    "call, named",
    [
        (lambda: optimal([1, 2], 3), "3 stages cannot split 2 layers"),
        (lambda: optimal([1, -2], 1), "-2"),
        (lambda: Partition.from_sizes([3, 0]), "[3, 0]"),
        (lambda: stage_totals([1, 2, 3], uniform(4, 2)), "cover 4 layers, but the model has 3"),
    ],
)
def test_bad_input_names_the_value(call, named):
    with pytest.raises(CourseError, match=named.replace("[", r"\[").replace("]", r"\]")):
        call()


@pytest.fixture(scope="module")
def toy_profile():
    torch.manual_seed(0)
    model = build_model(ModelConfig(n_layers=22), seed=0)
    return profile_layers(model, batch_size=4, seq_len=32, repeats=2)


def test_profile_counts_parameters_and_measured_activations(toy_profile):
    prof = toy_profile
    assert prof.names[0] == "embedding" and prof.names[-1] == "head" and prof.n_layers == 24
    model = build_model(ModelConfig(n_layers=22), seed=0)
    assert prof.params == [sum(p.numel() for p in layer.parameters()) for layer in model.layers]
    assert prof.static_bytes()[1] == BYTES_PER_PARAM * prof.params[1]
    assert all(t > 0 for t in prof.time_s)
    # every block saves the same tensors; at least its input (b*s*d fp32) and the MLP's 4x-wide hidden
    blocks = prof.activation_bytes[1:-1]
    assert len(set(blocks)) == 1 and blocks[0] >= 4 * 32 * 32 * 4 * (1 + 4)
    assert prof.activation_bytes[0] < blocks[0]  # the embedding keeps only token ids


def test_inflight_counts_follow_the_schedules():
    assert inflight_per_stage(build_schedule("gpipe", 4, 8)) == [8, 8, 8, 8]
    assert inflight_per_stage(build_schedule("1f1b", 4, 8)) == [4, 3, 2, 1]
    assert inflight_per_stage(build_schedule("1f1b", 4, 2)) == [2, 2, 2, 1]


def test_uniform_first_stage_runs_out_of_memory_and_balanced_fixes_it(toy_profile):
    prof = toy_profile
    uni = uniform(prof.n_layers, 4)
    mem = stage_memory(uni, prof, "1f1b", 8)
    # 1F1B: stage 0 holds 4 micro-batches, the last stage 1: the first device is the heaviest
    assert [s.inflight for s in mem] == [4, 3, 2, 1]
    assert mem[0].total_bytes == max(s.total_bytes for s in mem)
    budget = (mem[0].total_bytes + mem[1].total_bytes) // 2
    with pytest.raises(OutOfMemory, match=r"stage 0 \(layers 0\.\.5\) needs .* but the budget is") as err:
        check_memory(uni, prof, "1f1b", 8, budget)
    assert str(mem[0].total_bytes) in str(err.value) and str(budget) in str(err.value)
    assert "Try" in str(err.value)
    fixed = balanced(prof, 4, by="time", schedule="1f1b", microbatches=8, budget_bytes=budget)
    assert fixed.sizes[0] < uni.sizes[0]
    check_memory(fixed, prof, "1f1b", 8, budget)  # does not raise
    # optimal by memory: its largest stage is strictly smaller than uniform's (deterministic bytes)
    by_mem = balanced(prof, 4, by="memory", schedule="1f1b", microbatches=8)
    worst = max(s.total_bytes for s in stage_memory(by_mem, prof, "1f1b", 8))
    assert worst < mem[0].total_bytes
    with pytest.raises(OutOfMemory, match="no partition of 24 layers into 4 stages fits"):
        balanced(prof, 4, by="time", budget_bytes=1000)


def test_optimal_time_and_params_on_a_realistic_vocabulary():
    # with a real tokenizer's vocabulary the embedding and head are several blocks' worth each
    model = build_model(ModelConfig(n_layers=80, vocab_size=2048), seed=0)
    params = [sum(p.numel() for p in layer.parameters()) for layer in model.layers]
    assert params[0] > 4 * params[1] and params[-1] > 4 * params[1]
    uni, best = uniform(82, 4), optimal(params, 4)
    assert max(stage_totals(params, best)) < 0.95 * max(stage_totals(params, uni))
    assert best.sizes[0] < 21 and best.sizes[-1] < 21
