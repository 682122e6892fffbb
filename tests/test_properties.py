"""Issue 42: property-based tests (hypothesis) that only the course's error leaves the library.

Over the student's public API (the schedule builders, the validator and the simulator on schedules
of random actions, StageCosts, Link, TrainConfig, make_plan, make_spec, Partition, the planner) and over
every command's flags, called in-process through the parser and the command as ``main`` runs them:
whatever the input, the answer is a result, a CourseError (exit 2 on the command line) or argparse's
exit 2, never a raw KeyError, ZeroDivisionError, TypeError, IndexError or torch error, and never a hang
(each example is timed). Valid input stops before any training: the trainers' ``train`` and the
distributed launcher are replaced by a stop, so what runs is every check up to the first step.

Derandomized and capped (``max_examples``), so the suite sees the same examples every run.
"""

from __future__ import annotations

import contextlib
import math
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import course_lib.engines.torch_pipelining  # noqa: F401 (adds runner= to make_spec)
import course_lib.fast_simulator  # noqa: F401 (the fast path, taken past lesson sizes)
from course_lib.cli import build_parser, main
from course_lib.engines import memory_fit
from course_lib.network import ring_all_reduce_bytes, ring_all_reduce_s
from course_lib.planner import plan
from course_lib.shelf import distributed_engine, local_engine, reference
from course_lib.shelf.costs import Link, StageCosts
from course_lib.shelf.distributed_engine import make_spec
from course_lib.shelf.errors import CourseError
from course_lib.shelf.first_schedules import SCHEDULES, build_schedule
from course_lib.shelf.local_engine import make_plan
from course_lib.shelf.model import Partition, uniform
from course_lib.shelf.schedule import Action, Kind, Schedule
from course_lib.shelf.simulator import simulate
from course_lib.shelf.validate import check

SETTINGS = dict(derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
EACH_S = 10.0  # the most one example may take (a hang fails here; measured: milliseconds to ~0.3 s)

# values a student may type where a number belongs: odd ones, numpy's, and small good ones
ODD = st.sampled_from(
    [
        0,
        -1,
        2.5,
        -0.0,
        math.nan,
        math.inf,
        -math.inf,
        10**20,
        10**400,
        "4",
        "",
        None,
        True,
        [2],
        (2, 2),
        {"a": 1},
        1j,
        b"4",
        np.int64(3),
        np.float32(2.0),
        np.float64(-1.5),
    ]
)
SMALL = st.integers(1, 6)
COUNT = st.one_of(SMALL, ODD)
SECONDS = st.one_of(st.floats(0, 5), ODD)
NAMES = st.sampled_from([*SCHEDULES, "1F1B", "ScheduleGPipe", "nope", "", 42, None])


class Stopped(BaseException):
    """Raised where training would begin: valid input got through every check."""


def stop(*args, **kwargs):
    raise Stopped


@contextlib.contextmanager
def nothing_trains():
    """The trainers' first step and the launcher replaced by a stop; the machine's memory fixed at 8 GiB
    (as tests/support/inputs.py's fixture does), so the bounds do not depend on the machine."""
    patch = pytest.MonkeyPatch()
    patch.setattr(memory_fit, "memory_bytes", lambda: 8 * 2**30)
    patch.setattr(local_engine.LocalPipelineTrainer, "train", stop)
    patch.setattr(local_engine.LocalPipelineTrainer, "max_grad_diff_vs_reference", stop)
    patch.setattr(distributed_engine, "launch", stop)
    patch.setattr("course_lib.cli.train_command.train", lambda cfg, progress=True: (cfg.check(), stop()))
    try:
        yield
    finally:
        patch.undo()


def only_course_errors(call) -> object:
    """`call`'s result, or None where it raised CourseError (or stopped before training); anything
    else escapes, failing the test with its traceback. Fails if the call took over EACH_S."""
    start = time.monotonic()
    try:
        return call()
    except (CourseError, Stopped):
        return None
    finally:
        assert time.monotonic() - start < EACH_S


# ---- the library ---------------------------------------------------------------------------------
@settings(max_examples=150, **SETTINGS)
@given(name=NAMES, p=COUNT, m=COUNT, v=st.one_of(st.just(None), COUNT))
def test_building_a_schedule(name, p, m, v):
    built = only_course_errors(
        lambda: build_schedule(name, p, m) if v is None else build_schedule(name, p, m, v)
    )
    if built is not None:
        assert check(built) == []


ACTIONS = st.builds(Action, st.integers(-1, 3), st.sampled_from(list(Kind)), st.integers(-1, 3))
ODD_ACTION = st.one_of(ACTIONS, st.sampled_from(["0F0", None, 3, Action("0", Kind.F, 0)]))


@settings(max_examples=150, **SETTINGS)
@given(
    n_stages=st.one_of(st.integers(1, 3), ODD),
    m=st.one_of(st.integers(1, 3), ODD),
    orders=st.lists(st.lists(ODD_ACTION, max_size=10), max_size=3),
    placement=st.lists(st.integers(-1, 3), max_size=4),
    split=st.booleans(),
    forward_only=st.booleans(),
    fast=st.booleans(),
)
def test_validating_and_simulating_random_schedules(
    n_stages, m, orders, placement, split, forward_only, fast
):
    schedule = Schedule("random", n_stages, m, orders, placement, split, forward_only)
    problems = check(schedule)  # never raises: a list of sentences
    assert isinstance(problems, list) and all(isinstance(p, str) for p in problems)
    played = only_course_errors(lambda: simulate(schedule, fast=fast))
    assert (played is None) == bool(problems)  # one validation: refused exactly when the validator says


@settings(max_examples=100, **SETTINGS)
@given(
    f=SECONDS,
    i=SECONDS,
    w=SECONDS,
    nbytes=st.one_of(st.integers(0, 10**9), ODD),
    latency=SECONDS,
    bandwidth=st.one_of(st.floats(1, 1e12), ODD),
    sends=st.sampled_from(["overlapped", "blocking", "x"]),
)
def test_costs_links_and_the_simulator(f, i, w, nbytes, latency, bandwidth, sends):
    costs = only_course_errors(lambda: StageCosts(f=f, i=i, w=w))
    link = only_course_errors(lambda: Link(latency, bandwidth))
    if link is not None:
        only_course_errors(lambda: link.transfer_time(nbytes))
        only_course_errors(lambda: ring_all_reduce_s(nbytes, f, link))
    only_course_errors(lambda: ring_all_reduce_bytes(nbytes, latency))
    schedule = build_schedule("1f1b", 2, 3)
    only_course_errors(lambda: simulate(schedule, costs, boundary_bytes=nbytes, links=link, sends=sends))


TINY = dict(n_layers=2, d_model=16, n_heads=2, seq_len=16, batch_size=4, microbatches=2, steps=1)
FIELDS = st.sampled_from(
    [
        "n_layers",
        "d_model",
        "n_heads",
        "seq_len",
        "batch_size",
        "microbatches",
        "steps",
        "lr",
        "warmup_steps",
        "seed",
        "eval_batches",
        "device",
        "precision",
        "data_path",
    ]
)


@settings(max_examples=120, **SETTINGS)
@given(
    changes=st.dictionaries(
        FIELDS, st.one_of(COUNT, st.sampled_from(["cpu", "cuda:9", "tpu", "bfloat16"])), max_size=3
    ),
    name=NAMES,
    stages=st.one_of(st.none(), COUNT),
    virtual=st.one_of(st.none(), COUNT),
    partition=st.one_of(st.none(), st.lists(COUNT, max_size=4)),
    checkpoint=st.sampled_from(["never", "always", "x", 1]),
)
def test_configs_plans_and_specs(changes, name, stages, virtual, partition, checkpoint):
    with nothing_trains():
        cfg = only_course_errors(lambda: reference.TrainConfig(**TINY | changes))
        if cfg is None or only_course_errors(lambda: (cfg.check(), True)) is None:
            return
        only_course_errors(lambda: make_plan(cfg, name, stages, virtual, partition, checkpoint))
        only_course_errors(lambda: make_spec(cfg, name, stages, virtual=virtual, checkpoint=checkpoint))


@settings(max_examples=80, **SETTINGS)
@given(sizes=st.one_of(st.lists(COUNT, max_size=5), ODD), layers=COUNT, stages=COUNT)
def test_partitions(sizes, layers, stages):
    only_course_errors(lambda: Partition.from_sizes(sizes))
    only_course_errors(lambda: uniform(layers, stages))


@settings(max_examples=40, **SETTINGS)
@given(
    model=st.sampled_from(["megatron-39b", "megatron-1t", "nope", 3]),
    cluster=st.sampled_from(["a100-selene", "x"]),
    gpus=st.one_of(st.sampled_from([8, 64, 3072]), ODD),
    batch=st.one_of(st.sampled_from([8, 512, 3072]), ODD),
)
def test_the_planner(model, cluster, gpus, batch):
    only_course_errors(lambda: plan(model, cluster, gpus, batch))


# ---- the command line ------------------------------------------------------------------------------
def flag_table() -> dict[str, list]:
    """command -> its flags as (option, how its value is drawn: None for a switch, else a strategy)."""
    table = {}
    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    for command, sub in commands.items():
        options = []
        for action in sub._actions:
            if not action.option_strings or action.dest == "help":
                continue
            option = action.option_strings[0]
            if action.nargs == 0:
                options.append((option, None))
            elif action.choices:
                options.append((option, st.sampled_from([*action.choices, "bogus"])))
            else:
                options.append((option, VALUES.get(option, TYPED)))
        table[command] = options
    return table


TYPED = st.one_of(
    st.integers(1, 6).map(str),
    st.sampled_from(["0", "-1", "2.5", "1e3", "x", "", "nan", "inf", "-inf", str(10**20), "0x10", " 3", "٣"]),
)
VALUES = {
    "--schedule": st.sampled_from(["1f1b", "gpipe", "zb-h1", "interleaved-1f1b", "zb-v", "nope", ""]),
    "--device": st.sampled_from(["cpu", "auto", "cuda:7", "tpu", ""]),
    "--data": st.sampled_from(["/dev/zero", "/nonexistent.txt", "/", "README.md"]),
    "--gantt": st.sampled_from(["/nonexistent/g.png", "g.txt", "/"]),
    "--from-csv": st.sampled_from(["/dev/zero", "/nonexistent.csv", "/", "README.md"]),
    "--checkpoint": st.sampled_from(["never", "always", "x"]),
    "--model": st.sampled_from(["megatron-39b", "megatron-1t", "nope"]),
    "--cluster": st.sampled_from(["a100-selene", "nope"]),
    "--scenario": st.sampled_from(["decode", "training", "x"]),
}
BASE = {  # a valid command that runs in milliseconds; the flags drawn are added to it
    "shelf": ["shelf"],
    "train": [
        "train",
        "--layers",
        "2",
        "--width",
        "16",
        "--heads",
        "2",
        "--seq-len",
        "16",
        "--batch-size",
        "4",
        "--microbatches",
        "2",
        "--steps",
        "1",
    ],
    "schedule": ["schedule", "--schedule", "1f1b", "--stages", "2", "--microbatches", "4"],
    "simulate": ["simulate", "--schedule", "1f1b", "--stages", "2", "--microbatches", "4"],
    "tp": ["tp", "counts"],
    "plan": [
        "plan",
        "--model",
        "megatron-39b",
        "--cluster",
        "a100-selene",
        "--gpus",
        "64",
        "--global-batch",
        "512",
    ],
}
FLAGS = flag_table()


@st.composite
def command_lines(draw) -> list[str]:
    command = draw(st.sampled_from(sorted(FLAGS)))
    argv = list(BASE[command])
    if command == "tp":
        argv[1] = draw(st.sampled_from(["counts", "sweep", "bogus"]))  # measure trains: not here
    if command == "train":
        argv += ["--engine", draw(st.sampled_from(["reference", "local", "distributed", "x"]))]
    for option, values in draw(st.lists(st.sampled_from(FLAGS[command]), max_size=2)):
        argv += [option] if values is None else [option, draw(values)]
    return argv


def test_every_command_is_drawn_with_every_flag():
    assert set(FLAGS) == set(BASE) and all(FLAGS[c] for c in FLAGS)


@settings(max_examples=250, **SETTINGS)
@given(argv=command_lines())
def test_every_commands_flags(argv):
    with nothing_trains():
        start = time.monotonic()
        try:
            code = main(argv)
        except SystemExit as exit_:  # argparse: a flag it refuses
            code = exit_.code
        except Stopped:
            code = "stopped before training"
        assert time.monotonic() - start < EACH_S, argv
    event(f"{argv[0]}: exit {code}")  # --hypothesis-show-statistics: how many got through, per command
    assert code in (0, 2, "stopped before training"), (argv, code)
