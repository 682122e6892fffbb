"""Issue 28: every input is answered before work starts, as one clear sentence, or handled.

One table per class of case: types at the library's door, bounds that follow from memory and time,
values a rank will use (outputs, CSV files and what a failed run names are tests/test_input_outputs.py's).
Each row calls the library (or the command line, in-process) and says which words the refusal must
hold; ``accepted`` rows say what a numpy number or a size at the bound gives back instead. The memory
the machine has is fixed at 8 GiB here, so the bounds do not depend on the machine the suite runs on.
No test here starts a process: SIGTERM to the distributed launcher (one line, exit 143, no rank and no
rank log left) is tests/cli/test_cli_signals.py's.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from support.inputs import TINY, machine_of_8_gib, refused

from course_lib.cli import main
from course_lib.lessons.runs import train_pipeline
from course_lib.planner import cluster, plan
from course_lib.planner.enumerate import check_request
from course_lib.shelf.costs import Link, StageCosts
from course_lib.shelf.distributed_engine import make_spec
from course_lib.shelf.first_schedules import build_schedule
from course_lib.shelf.launcher import spawn
from course_lib.shelf.local_engine import make_plan
from course_lib.shelf.model import Partition, check_microbatches, uniform
from course_lib.shelf.reference import TrainConfig
from course_lib.shelf.simulator import simulate, simulate_named
from course_lib.shelf.validate import validate

TINY_FLAGS = ["--layers", "2", "--width", "16", "--heads", "2", "--seq-len", "16", "--batch-size", "4",
              "--microbatches", "2", "--steps", "1"]  # fmt: skip
S = build_schedule("1f1b", 2, 2)
_machine_of_8_gib = pytest.fixture(autouse=True)(machine_of_8_gib)


TYPES = {
    "build_schedule: text": (
        lambda: build_schedule("1f1b", "4", 8),
        ["n_devices must be a whole number", "'4' (str)"],
    ),
    "build_schedule: 10**5000 (too long to print)": (
        lambda: build_schedule("1f1b", 10**5000, 1),
        ["n_devices is an int of 16,610 bits, alone over the limit of 1,000,000 actions"],
    ),
    "build_schedule: bool": (lambda: build_schedule("1f1b", True, 8), ["n_devices", "True (bool)"]),
    "build_schedule: 2.5": (lambda: build_schedule("1f1b", 2, 2.5), ["n_microbatches", "got 2.5"]),
    "simulate: a name": (lambda: simulate("1f1b"), ["schedule must be a Schedule", "'1f1b' (str)"]),
    "simulate: costs a number": (
        lambda: simulate(S, 1.0),
        ["costs must be StageCosts(f=..., i=..., w=...) or None, got 1.0"],
    ),
    "simulate: cost text": (lambda: simulate(S, StageCosts(f="x")), ["StageCosts.f must be a finite number"]),
    "simulate: bytes text": (
        lambda: simulate(S, boundary_bytes="x"),
        ["boundary_bytes must be a finite number"],
    ),
    "simulate: links dict": (lambda: simulate(S, links={"a": 1}), ["links must be a Link", "(dict)"]),
    "simulate_named: costs": (lambda: simulate_named("1f1b", 2, 2, costs="x"), ["costs must be StageCosts"]),
    "Partition 1.5": (lambda: Partition.from_sizes([1.5, 2.5]), ["sizes (layers per stage)[0]", "got 1.5"]),
    "Partition text": (lambda: Partition.from_sizes("ab"), ["must be a list of whole numbers", "'ab' (str)"]),
    "uniform text": (lambda: uniform(10, "3"), ["number of stages must be a whole number", "'3' (str)"]),
    "TrainConfig text": (
        lambda: TrainConfig(n_layers="4").check(),
        ["n_layers must be a whole number, got '4'"],
    ),
    "TrainConfig lr": (lambda: TrainConfig(lr="x").check(), ["lr must be a number, got 'x' (str)"]),
    "train_pipeline stages": (
        lambda: train_pipeline("1f1b", "2", 2, steps=1, n_layers=2),
        ["stages must be a whole number"],
    ),
    "plan gpus text": (lambda: plan("megatron-1t", "a100-selene", "8", 8), ["gpus must be a whole number"]),
    "plan shape": (
        lambda: plan(42, "a100-selene", 8, 8),
        ["shape must be a model preset's name or a ModelShape"],
    ),
    "Link inf": (lambda: Link(latency_s=math.inf), ["link latency_s must be a finite number >= 0", "inf"]),
    "Link text": (lambda: Link(latency_s="1"), ["link latency_s", "'1' (str)"]),
}


@pytest.mark.parametrize("case", list(TYPES))
def test_types_at_the_librarys_door(case):
    call, words = TYPES[case]
    refused(call, words)


def test_the_dashboards_constructors_check_types_before_any_widget():
    from course_lib.widgets.dashboard import PipelineDashboard
    from course_lib.widgets.planner import PlannerWidget
    from course_lib.widgets.train_dashboard import TrainSettings

    refused(lambda: PipelineDashboard(p="4"), ["p must be a whole number >= 1, got '4' (str)"])
    refused(lambda: PipelineDashboard(costs=[1, 2]), ["costs must be StageCosts"])
    refused(lambda: PlannerWidget("megatron-1t", "a100-selene", gpus="8", global_batch=8), ["gpus must be"])
    refused(lambda: TrainSettings(steps="3").check(), ["steps must be a whole number, got '3' (str)"])


def test_numpy_numbers_are_the_same_numbers():
    assert build_schedule("1f1b", np.int64(4), np.int32(8)).orders == build_schedule("1f1b", 4, 8).orders
    assert simulate_named("1f1b", np.int64(2), np.int64(2)).makespan == simulate_named("1f1b", 2, 2).makespan
    assert Partition.from_sizes(np.array([2, 3])).sizes == (2, 3)
    assert uniform(np.int64(10), np.int64(3)).sizes == (4, 3, 3)
    cfg = TrainConfig(**TINY | dict(n_layers=np.int64(2), lr=np.float32(0.5)))
    assert type(cfg.n_layers) is int and type(cfg.lr) is float
    cfg.check()
    assert make_plan(cfg, "1f1b", np.int64(2), np.int64(1)).schedule.n_devices == 2
    assert Link(latency_s=np.float64(0.25)).latency_s == 0.25
    assert check_request(cluster("a100-selene"), np.int64(3072), np.int64(3072), ("1f1b",)) == (3072, 3072)


BOUNDS = {
    "seq-len 1e8 (position table and activations)": (
        lambda: TrainConfig(seq_len=10**8).check(),
        ["needs about", "8.0 GiB", "the largest that fits:", "seq_len"],
    ),
    "batch 1e9": (
        lambda: TrainConfig(batch_size=10**9, microbatches=1).check(),
        ["the largest that fits: batch_size 797, no seq_len"],
    ),
    "width 9000 (972 M parameters, 16 GB)": (
        lambda: TrainConfig(d_model=9000, n_heads=4, n_layers=1).check(),
        ["needs about 14.", "d_model"],
    ),
    "layers 50,000 (the CLI's limit)": (
        lambda: TrainConfig(n_layers=50_000).check(),
        ["over the limit of 1,000"],
    ),
    "GPipe m=1024 holds every micro-batch": (
        lambda: make_plan(TrainConfig(d_model=64, batch_size=4096, microbatches=1024), "gpipe", 4),
        ["gpipe holds up to 1024 micro-batches", "GiB"],
    ),
    "m not dividing a batch of 1e9": (
        lambda: check_microbatches(10**9, 3),
        ["choose m from [1, 2, 4, 5, 8,"],
    ),
    "plan 1e7 GPUs": (lambda: plan("megatron-1t", "a100-selene", 10**7, 3072), ["divides among none"]),
    "plan 1e9 GPUs": (lambda: plan("megatron-1t", "a100-selene", 10**9, 3072), ["<= 10,000,000"]),
    "costs 1e308": (
        lambda: simulate(S, StageCosts(f=1e308)),
        ["StageCosts.f must be", "<= 1e+12, got 1e+308"],
    ),
    "latency 1e308": (lambda: simulate(S, links=Link(1e308)), ["link latency_s", "<= 1e+12"]),
    "3*p*m*v over the action limit": (
        lambda: build_schedule("1f1b", 333_334, 1),
        ["over the limit of 1,000,000"],
    ),
}


@pytest.mark.parametrize("case", list(BOUNDS))
def test_bounds_from_memory_and_time(case):
    call, words = BOUNDS[case]
    refused(call, words)


def test_what_the_bounds_accept_runs():
    TrainConfig(n_layers=1_000).check()  # the layer limit itself passes at the toy's width
    make_plan(TrainConfig(d_model=64, batch_size=4096, microbatches=1024), "1f1b", 4)  # 1F1B holds p, not m
    tl = simulate(S, StageCosts(f=1e12), links=Link(1e12))  # the largest seconds: numbers, not nan
    assert math.isfinite(tl.makespan) and 0 <= tl.bubble_fraction < 1
    validate(build_schedule("1f1b", 10_000, 1))  # quadratic in p, this took 115 s; O(A log p) now


RANK_VALUES = {
    "timeout 1e15": (lambda: make_spec(TrainConfig(**TINY), timeout_s=1e15), ["timeout_s", "<= 604800"]),
    "timeout inf": (lambda: make_spec(TrainConfig(**TINY), timeout_s=math.inf), ["timeout_s", "got inf"]),
    "spawn timeout inf": (lambda: spawn(print, 1, timeout_s=math.inf), ["timeout_s must be a finite number"]),
    "threads 1e9": (lambda: make_spec(TrainConfig(**TINY), threads=10**9), ["threads", "cores here"]),
    "latency over the timeout": (
        lambda: make_spec(TrainConfig(**TINY), links=Link(1e9), timeout_s=10),
        ["link latency 1e+09 s is not below the timeout of 10 s", "raise --timeout"],
    ),
}


@pytest.mark.parametrize("case", list(RANK_VALUES))
def test_values_a_rank_will_use_are_checked_in_the_parent(case):
    call, words = RANK_VALUES[case]
    refused(call, words)


@pytest.mark.parametrize(
    "argv, words",
    [
        (["train", *TINY_FLAGS, "--threads", "1000000000"], ["error: --threads", "cores here"]),
        (["train", "--engine", "distributed", *TINY_FLAGS, "--latency", "1e9", "--timeout", "10"],
         ["error: link latency 1e+09 s is not below the timeout of 10 s"]),
        (["train", "--engine", "distributed", *TINY_FLAGS, "--latency", "1e9"],
         ["is not below the timeout of 604800 s"]),  # the default timeout grows with latency, up to a week
    ],
)  # fmt: skip
def test_the_command_line_answers_rank_values_in_one_line(argv, words, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and all(w in err for w in words), err
