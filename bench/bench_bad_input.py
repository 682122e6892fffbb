"""Issue 42: how many bad inputs get a clear answer in seconds and leave nothing behind, by class.

Each case is one bad input (or a good one in an unusual type) given to the command line or to a
library name the lessons import. A case **held** when:

- command line: exit code 2, one ``error:`` line on stderr naming the flag or value, no traceback;
- library: a ValueError or TypeError (the course's CourseError is a ValueError) whose message names
  the argument; or, for a value that must be accepted (numpy's 4, 16.0 for a count), no error;
- both: an answer within ``SLOW_S``, and nothing new left in the temp folder (TMPDIR).

It did **not** hold when the answer was a raw error (KeyError, ZeroDivisionError, torch's, a message
that names no argument), a traceback, nonsense silently accepted, slow (> SLOW_S), a hang (killed
after HANG_S) or a leftover. A name the checkout does not have counts as not held ("missing").

The probe imports nothing from the course itself: every case runs in a child process whose
``course_lib`` is the checkout given by ``--root``, so the same cases can be put to an older commit::

    .venv/bin/python bench/bench_bad_input.py                       # this checkout
    git archive 00d6a9d | tar -x -C /tmp/before                     # the parent of issue 42's first commit
    .venv/bin/python bench/bench_bad_input.py --root /tmp/before

Measured on 2 busy cores (542 cases; "before": 00d6a9d, the parent of issue 42's first commit, where
5 planner and network cases name what it did not have yet; the 2 "slow" there took 5-7 s under load):

    class                              cases   held before   held after (9a3a3e7 + case fixes)
    command line: flags                  127       120             127
    command line: input files             19        15              19
    command line: sizes nobody can run     8         7               8
    library: schedules and simulator     107        80             104
    library: configs and engines         111       104             110
    library: planner and network          42        27              42
    input files (library)                 34        18              34
    sizes nobody can run (library)        22        16              21
    types at the door                     72        30              72
    all                                  542       417             537

Not held after: simulate's boundary_bytes=1.5 and 10**30, format_bytes(nan), build_model(seed=-1),
uniform(10**12, 2): accepted (harmless numbers, no error). At 0a9a163, before this file's fixes, the
library held 352 of 388.

Library cases run in-process in one child per class (a hung case kills it; the next case starts a
new one), command-line cases each in their own process, a few at a time (``--workers``). On 2 busy
cores the whole probe takes about 5 minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

SLOW_S = 5.0  # "in seconds": an answer after this is slow (the tests allow 2 s with 5x slack)
HANG_S = 10.0  # a case still running after this is a hang, and is killed
PYTHON = sys.executable


@dataclass(frozen=True)
class Case:
    """One input: `code` (library: Python run after `setup`; command line: the argv after -m course_lib),
    `names`: words one of which the error must name, `accept`: the input must be taken, not refused."""

    group: str
    code: str | tuple[str, ...]
    names: tuple[str, ...] = ()
    setup: str = ""
    accept: bool = False


# ---- the cases -------------------------------------------------------------------------------------
SCHED = "from course_lib.shelf.first_schedules import build_schedule"
SIM = "\n".join(
    (
        SCHED,
        "from course_lib.shelf.simulator import simulate",
        "from course_lib.shelf.costs import StageCosts, Link",
    )
)
CFG = "from course_lib.shelf.reference import TrainConfig"
MODEL = "from course_lib.shelf.model import ModelConfig, build_model, uniform, load_corpus"
NP = "import numpy as np"
SPEC = CFG + "\nfrom course_lib.shelf.distributed_engine import make_spec, run_distributed"
LOCAL = CFG + "\nfrom course_lib.shelf.local_engine import LocalPipelineTrainer"
PLAN = "from course_lib.planner.enumerate import plan"
NET = "from course_lib.network import site, preset, fiber_latency_s, site_link"
RING = "import course_lib.network as n, course_lib.shelf.costs as c\n" + (
    "ring_all_reduce_s = getattr(n, 'ring_all_reduce_s', None) or c.ring_all_reduce_s\n"
    "ring_all_reduce_bytes = getattr(n, 'ring_all_reduce_bytes', None) or c.ring_all_reduce_bytes"
)
TINY = "n_layers=2, d_model=8, n_heads=2, seq_len=8, batch_size=4, microbatches=2, steps=1"


def library_cases() -> list[Case]:
    cases: list[Case] = []

    def add(group: str, setup: str, names: tuple[str, ...] | str, *codes: str, accept: bool = False) -> None:
        names = (names,) if isinstance(names, str) else names
        cases.extend(Case(group, code, names, setup, accept) for code in codes)

    api = "library: schedules and simulator"
    for bad in ("0", "-1", "'4'", "None", "[4]", "True", "4.5", "float('nan')", "10**30"):
        add(api, SCHED, ("n_devices", "devices", "stages"), f"build_schedule('1f1b', {bad}, 8)")
        add(api, SCHED, ("n_microbatches", "microbatches"), f"build_schedule('gpipe', 4, {bad})")
    for name in ("'nope'", "''", "None", "42", "'1f1b '*1000"):
        add(api, SCHED, ("schedule",), f"build_schedule({name}, 4, 8)")
    for bad in ("0", "-2", "'2'", "2.5", "True"):
        add(api, SCHED, ("virtual",), f"build_schedule('interleaved-1f1b', 4, 8, virtual={bad})")
    add(api, SCHED, ("virtual",), "build_schedule('1f1b', 4, 8, virtual=3)")
    s = "s = build_schedule('1f1b', 4, 8)\n"
    for costs, names in (
        ("StageCosts(f=-1)", ("f",)),
        ("StageCosts(f=float('nan'))", ("f",)),
        ("StageCosts(i='x')", ("i",)),
        ("StageCosts(w=float('inf'))", ("w",)),
        ("StageCosts(f=[1, 2])", ("f", "stages")),
        ("StageCosts(f=[1, 2, 3, -4])", ("f",)),
        ("StageCosts(f=None)", ("f",)),
        ("'fast'", ("costs",)),
        ("StageCosts(f=1e308, i=1e308)", ("f", "i", "seconds")),
        ("StageCosts(f={'a': 1})", ("f",)),
    ):
        add(api, SIM, names, s + f"simulate(s, {costs})")
    for kw, names in (
        ("boundary_bytes=-1", "boundary_bytes"),
        ("boundary_bytes='big'", "boundary_bytes"),
        ("boundary_bytes=[1, 2]", "boundary_bytes"),
        ("boundary_bytes=1.5", "boundary_bytes"),
        ("boundary_bytes=float('nan')", "boundary_bytes"),
        ("boundary_bytes=10**30", "boundary_bytes"),
        ("links='fast'", "links"),
        ("links=[Link()]", "links"),
        ("links=[1, 2, 3]", "links"),
        ("sends='sometimes'", "sends"),
        ("sends=None", "sends"),
        ("stash_bytes=[-1] * 4", "stash_bytes"),
        ("stash_bytes='x'", "stash_bytes"),
        ("stash_bytes=[1]", "stash_bytes"),
    ):
        add(api, SIM, names, s + f"simulate(s, {kw})")
    for schedule in ("None", "'1f1b'", "42", "[[]]"):
        add(api, SIM, ("schedule", "Schedule"), f"simulate({schedule})")
    # a schedule the validator refuses must be refused by the simulator with the validator's words
    edits = {
        "without 0B0": "s.orders[0] = [a for a in s.orders[0] if str(a) != '0B0']",
        "0F0 twice": "s.orders[0].insert(0, s.orders[0][0])",
        "F after its B": "s.orders[3].reverse()",
        "empty device": "s.orders[1] = []",
        "stage 9": "s.orders[0].append(type(s.orders[0][0])(9, s.orders[0][0].kind, 0))",
        "micro-batch 99": "s.orders[0].append(type(s.orders[0][0])(0, s.orders[0][0].kind, 99))",
    }
    for edit in edits.values():
        add(
            api,
            SIM,
            ("0B0", "0F0", "stage", "microbatch", "micro-batch", "missing", "device", "deadlock"),
            s + edit + "\nsimulate(s)",
        )
    add(
        api,
        "from course_lib.shelf.costs import Link",
        ("nbytes", "bytes"),
        "Link(1.0, 1e9).transfer_time(-5)",
        "Link(1.0, 1e9).transfer_time('x')",
        "Link(1.0, 1e9).transfer_time(float('nan'))",
        "Link(1.0, 1e9).transfer_time(None)",
    )
    add(
        api,
        "from course_lib.shelf.costs import Link",
        ("latency", "bandwidth"),
        "Link(-1)",
        "Link(float('inf'))",
        "Link(float('nan'))",
        "Link('1ms')",
        "Link(0, 0)",
        "Link(0, -5)",
        "Link(0, 'fast')",
        "Link(None)",
        "Link(1e300)",
    )
    add(
        api,
        RING + "\nfrom course_lib.shelf.costs import Link",
        ("nbytes", "ranks", "bytes", "link"),
        "ring_all_reduce_s(-1, 4, Link(0.1))",
        "ring_all_reduce_s(100, 0, Link(0.1))",
        "ring_all_reduce_bytes(100, 0)",
        "ring_all_reduce_bytes(-5, 4)",
        "ring_all_reduce_s(100, 4, 'link')",
    )
    add(
        api,
        "from course_lib.schedules.closed_forms import gpipe_bubble",
        ("p", "m", "v", "convention"),
        "gpipe_bubble(0, 4)",
        "gpipe_bubble(4, 0)",
        "gpipe_bubble(-1, 4)",
        "gpipe_bubble(4, 8, v=0)",
        "gpipe_bubble(4, 8, convention='x')",
        "gpipe_bubble('4', 8)",
    )
    zb = "from course_lib.schedules.zero_bubble import zb_h1, zb_h2"
    add(
        api,
        zb,
        ("n_devices", "n_microbatches", "devices", "micro"),
        "zb_h2(0, 8)",
        "zb_h2(4, 0)",
        "zb_h1(0, 8)",
        "zb_h1(4, -1)",
        "zb_h2(4, 2.5)",
    )
    add(
        api,
        "from course_lib.shelf.schedule import Action",
        ("action", "0Q0", "text", "parse"),
        "Action.parse('0Q0')",
        "Action.parse('')",
        "Action.parse('F')",
        "Action.parse(None)",
    )
    add(
        api,
        "from course_lib.shelf.validate import check, validate",
        ("schedule", "Schedule"),
        "validate(None)",
        "validate('1f1b')",
        "validate(42)",
    )
    add(
        api,
        "from course_lib.charts.gantt import plot_timeline",
        ("tl", "timeline", "Timeline"),
        "plot_timeline(None)",
        "plot_timeline('timeline')",
        "plot_timeline([])",
    )
    add(
        api,
        SIM + "\nfrom course_lib.charts.gantt import plot_timeline",
        ("extent", "max_labels"),
        "plot_timeline(simulate(build_schedule('1f1b', 2, 2)), extent_s=-1)",
        "plot_timeline(simulate(build_schedule('1f1b', 2, 2)), max_labels=-3)",
    )
    add(
        api,
        "from course_lib.shelf.timeline import format_bytes",
        ("n", "bytes", "number"),
        "format_bytes('x')",
        "format_bytes(None)",
        "format_bytes(float('nan'))",
    )

    api = "library: training configs and engines"
    for field, bads in (
        ("n_layers", ("0", "-3", "'4'", "None")),
        ("d_model", ("0", "-8", "'8'")),
        ("n_heads", ("0", "3", "-2")),
        ("seq_len", ("0", "-1")),
        ("batch_size", ("0", "-4", "3")),
        ("microbatches", ("0", "5", "-2")),
        ("steps", ("-1", "'10'")),
        ("lr", ("0", "-1", "float('nan')", "float('inf')", "'fast'", "1e9")),
        ("warmup_steps", ("-1",)),
        ("seed", ("-1", "2**70", "'x'")),
        ("eval_batches", ("0", "-1")),
        ("precision", ("'fp8'", "None", "16")),
        ("device", ("'tpu'", "3")),
        ("data_path", ("123",)),
        ("clip_grad_norm", ("-1", "0", "'x'", "float('nan')")),
        ("tie_embeddings", ("'yes'", "2")),
    ):
        names = {
            "d_model": ("d_model", "width"),
            "lr": ("lr", "learning rate"),
            "precision": ("precision",),
            "data_path": ("data", "path"),
        }.get(field, (field,))
        names = (*names, field.replace("_", " "))
        for bad in bads:
            add(api, CFG, names, f"c = TrainConfig(**{{**dict({TINY}), '{field}': {bad}}})\nc.check()")
    add(
        api,
        MODEL,
        ("n_layers", "d_model", "n_heads", "vocab", "seq_len", "width", "heads", "divide", "cfg", "seed"),
        "ModelConfig(n_layers=0)",
        "ModelConfig(d_model=30, n_heads=4)",
        "ModelConfig(vocab_size=0)",
        "ModelConfig(seq_len=-1)",
        "build_model(ModelConfig(n_layers=2), seed=-1)",
        "build_model('big')",
    )
    add(
        api,
        MODEL,
        ("n_layers", "n_stages", "stages", "layers"),
        "uniform(2, 4)",
        "uniform(0, 1)",
        "uniform(4, 0)",
        "uniform(8, -2)",
        "uniform('8', 2)",
    )
    add(
        api,
        MODEL,
        ("val_fraction", "fraction"),
        "load_corpus(val_fraction=2)",
        "load_corpus(val_fraction=0)",
        "load_corpus(val_fraction=-0.5)",
        "load_corpus(val_fraction=float('nan'))",
    )
    cfg = f"cfg = TrainConfig({TINY})\n"
    for kw, names in (
        ("'nope', 2", ("schedule",)),
        ("'1f1b', 0", ("stages",)),
        ("'1f1b', 5", ("stages", "layers")),
        ("'1f1b', '2'", ("stages",)),
        ("'1f1b', 2, virtual=0", ("virtual",)),
        ("'1f1b', 2, partition=[1, 1]", ("partition",)),
        ("'1f1b', 2, partition='x'", ("partition",)),
        ("'1f1b', 2, checkpoint='sometimes'", ("checkpoint",)),
        ("'1f1b', 2, links='x'", ("links",)),
        ("'1f1b', 2, timeout_s=-1", ("timeout",)),
        ("'1f1b', 2, timeout_s=float('inf')", ("timeout",)),
        ("'1f1b', 2, threads=0", ("threads",)),
        ("'1f1b', 2, threads=10**6", ("threads",)),
        ("'1f1b', 2, colour='red'", ("colour",)),
        ("'1f1b', 2, tp=0", ("tp",)),
        ("'1f1b', 2, dp=-1", ("dp",)),
        ("'1f1b', 2, runner='mine'", ("runner",)),
    ):
        add(api, SPEC, names, cfg + f"make_spec(cfg, {kw})", cfg + f"run_distributed(cfg, {kw})")
    add(
        api,
        SPEC,
        ("schedule", "forward"),
        cfg + "from course_lib.lessons.inference import forward_only\nmake_spec(cfg, forward_only(2, 2))",
    )
    for kw, names in (
        ("'nope'", ("schedule",)),
        ("'1f1b', 0", ("stages",)),
        ("'1f1b', 5", ("stages", "layers")),
        ("'1f1b', 2, partition=[3, 3]", ("partition",)),
        ("'1f1b', 2, checkpoint='x'", ("checkpoint",)),
        ("'1f1b', 2, links=Link(-1)", ("latency", "links")),
        ("'1f1b', 2, virtual='2'", ("virtual",)),
        ("'interleaved-1f1b', 2, virtual=3", ("virtual", "layers", "stages")),
    ):
        add(
            api,
            LOCAL + "\nfrom course_lib.shelf.costs import Link",
            names,
            cfg + f"LocalPipelineTrainer(cfg, {kw})",
        )
    runs = "from course_lib.lessons.runs import train_pipeline"
    for kw, names in (
        ("'nope'", ("schedule",)),
        ("'1f1b', 0", ("stages",)),
        ("'1f1b', 4, 0", ("microbatches",)),
        ("'1f1b', 4, 8, -1", ("steps",)),
        ("n_layers=0", ("n_layers", "layers")),
        ("'1f1b', 4, 8, 1, colour=1", ("colour",)),
        ("'1f1b', 4, 8, 1, lr=-1", ("lr", "learning rate")),
    ):
        add(api, runs, names, f"train_pipeline({kw}, progress=False)")
    add(
        api,
        "from course_lib.exercises import check_answer",
        ("key", "answer", "exercise"),
        "check_answer('no-such-exercise', 1)",
        "check_answer(None, 1)",
    )

    api = "library: planner and network"
    for kw, names in (
        ("'nope', 'a100-selene', 64, 64", ("model", "nope")),
        ("'megatron-18b', 'nope', 64, 64", ("cluster",)),
        ("'megatron-18b', 'a100-selene', 0, 64", ("gpus",)),
        ("'megatron-18b', 'a100-selene', 64, 0", ("batch",)),
        ("'megatron-18b', 'a100-selene', -8, 64", ("gpus",)),
        ("'megatron-18b', 'a100-selene', 8*10**18, 64", ("gpus",)),
        ("'megatron-18b', 'a100-selene', 64, 10**20", ("batch",)),
        ("'megatron-18b', 'a100-selene', 63, 64", ("gpus", "node")),
        ("'megatron-18b', 'a100-selene', '64', 64", ("gpus",)),
        ("'megatron-18b', 'a100-selene', 64, 64, schedules=('nope',)", ("schedule",)),
        ("'megatron-18b', 'a100-selene', 64, 64, layout='garbage('", ("layout",)),
        ("'megatron-18b', 'a100-selene', 64, 64, simulate_top=-1", ("simulate_top", "top")),
        ("'megatron-18b', 'a100-selene', 64, 64, only=(0, 0)", ("only", "t", "p")),
        ("'megatron-18b', 'a100-selene', 64.5, 64", ("gpus",)),
    ):
        add(api, PLAN, names, f"plan({kw})")
    add(
        api,
        "from course_lib.planner.layout import Layout",
        ("t", "p", "d", "b", "v", "schedule"),
        "Layout(0, 1, 1, 1)",
        "Layout(1, -1, 1, 1)",
        "Layout(1, 1, 0, 1)",
        "Layout(1, 1, 1, 0)",
        "Layout(1, 1, 1, 1, v=0)",
        "Layout('2', 1, 1, 1)",
    )
    add(
        api,
        "from course_lib.planner.shapes import model\nfrom course_lib.planner.clusters import cluster",
        ("model", "cluster", "name"),
        "model('gpt-5')",
        "cluster('my-laptop')",
        "model(None)",
        "cluster(3)",
    )
    add(api, NET, ("site", "Atlantis", "name", "preset"), "site('Atlantis')", "preset('warp')", "site(None)")
    add(
        api,
        NET,
        ("distance", "route_factor", "km"),
        "fiber_latency_s(-1)",
        "fiber_latency_s(100, 0)",
        "fiber_latency_s(float('nan'))",
        "fiber_latency_s('far')",
    )
    add(
        api,
        NET,
        ("site", "route_factor", "bandwidth", "Atlantis"),
        "site_link('Atlantis', 'Mars')",
        "site_link('london', 'paris', route_factor=-1)",
    )
    add(
        api,
        "from course_lib.stage_layout import parse_layout",
        ("layout", "text"),
        "parse_layout('')",
        "parse_layout('E(t*|')",
        "parse_layout('Q')",
        "parse_layout(None)",
        "parse_layout('t*-1')",
    )
    add(
        api,
        "from course_lib.balance import optimal",
        ("costs", "stages", "n_stages"),
        "optimal([1, 2, 3], 0)",
        "optimal([], 2)",
        "optimal([1, -2, 3], 2)",
        "optimal([1, 2], 5)",
    )

    api = "types at the door"
    for code in (
        "build_schedule('1f1b', np.int64(4), np.int32(8))",
        "build_schedule('1f1b', 4.0, 8.0)",
        "build_schedule('gpipe', np.int16(2), 3)",
    ):
        add(api, SCHED + "\n" + NP, (), code, accept=True)
    for code in (
        "simulate(build_schedule('1f1b', 4, 8), StageCosts(np.float32(1), np.int64(2), 0.5))",
        "simulate(build_schedule('1f1b', 4, 8), boundary_bytes=np.int64(100), links=Link(np.float64(0.1)))",
        "Link(np.float32(0.5), np.int64(10**9)).transfer_time(np.int64(100))",
    ):
        add(api, SIM + "\n" + NP, (), code, accept=True)
    for field in ("n_layers", "d_model", "batch_size", "microbatches", "steps", "seq_len"):
        value = dict(d_model=8, batch_size=4, microbatches=2, n_layers=2, steps=1, seq_len=8)[field]
        base = f"c = TrainConfig(**{{**dict({TINY}), '{field}': %s}})\nc.check()\n"
        add(
            api,
            CFG + "\n" + NP,
            (),
            base % f"np.int64({value})" + f"assert type(c.{field}) is int",
            base % f"{value}.0" + f"assert type(c.{field}) is int",
            accept=True,
        )
        for bad in (f"{value}.5", f"'{value}'", "True", f"[{value}]", f"np.float64({value}.5)", "None"):
            add(
                api,
                CFG + "\n" + NP,
                (field, field.replace("_", " ")),
                f"TrainConfig(**{{**dict({TINY}), '{field}': {bad}}})",
            )
    add(
        api,
        CFG + "\n" + NP,
        (),
        f"TrainConfig(**{{**dict({TINY}), 'lr': np.float32(1e-3)}}).check()",
        accept=True,
    )
    add(
        api,
        CFG + "\n" + NP,
        (),
        f"TrainConfig(**{{**dict({TINY}), 'seed': np.uint8(3)}}).check()",
        accept=True,
    )
    for bad in ("True", "2.5", "'4'", "None", "np.float64(4.5)", "[4]"):
        add(api, SCHED + "\n" + NP, ("n_devices", "devices", "stages"), f"build_schedule('1f1b', {bad}, 8)")
    for bad in ("True", "2.5", "'4'", "np.float64(4.5)", "[4]"):  # None: the default
        add(api, SPEC + "\n" + NP, ("stages",), f"make_spec(TrainConfig({TINY}), '1f1b', {bad})")
    add(api, SPEC + "\n" + NP, (), f"make_spec(TrainConfig({TINY}), '1f1b', np.int64(2))", accept=True)
    add(
        api,
        MODEL + "\n" + NP,
        (),
        "uniform(np.int64(8), np.int32(2))",
        "ModelConfig(n_layers=np.int64(2))",
        accept=True,
    )
    add(
        api,
        PLAN + "\n" + NP,
        (),
        "plan('megatron-18b', 'a100-selene', np.int64(64), np.int64(64))",
        accept=True,
    )
    add(api, PLAN, ("gpus",), "plan('megatron-18b', 'a100-selene', True, 64)")

    api = "sizes nobody can run"
    for code, names in (
        ("build_schedule('1f1b', 10**7, 10**7)", ("actions", "n_devices", "n_microbatches", "limit")),
        ("build_schedule('gpipe', 10**6, 10**6)", ("actions", "n_devices", "n_microbatches", "limit")),
        ("build_schedule('interleaved-1f1b', 1000, 1000, virtual=1000)", ("actions", "virtual", "limit")),
        ("build_schedule('zb-h2', 10**9, 8)", ("actions", "n_devices", "limit")),
        ("build_schedule('1f1b', 2**70, 2)", ("n_devices", "devices", "limit")),
    ):
        add(api, SCHED, names, code)
    for field, value, names in (
        ("n_layers", "10**6", ("n_layers", "layers", "memory", "parameters")),
        ("d_model", "10**6", ("d_model", "width", "memory", "parameters")),
        ("seq_len", "10**8", ("seq_len", "sequence", "memory")),
        ("batch_size", "10**9", ("batch", "memory")),
        ("steps", "10**15", ("steps",)),
        ("n_heads", "2**40", ("n_heads", "heads")),
        ("microbatches", "10**9", ("microbatches", "batch")),
        ("eval_batches", "10**12", ("eval",)),
    ):
        add(api, CFG, names, f"TrainConfig(**{{**dict({TINY}), '{field}': {value}}}).check()")
    for kw, names in (
        ("'1f1b', 10**6", ("stages",)),
        ("'1f1b', 4096", ("stages", "layers")),
        ("'1f1b', 2, threads=10**9", ("threads",)),
        ("'1f1b', 2, timeout_s=1e18", ("timeout",)),
    ):
        add(api, SPEC, names, cfg + f"make_spec(cfg, {kw})")
    add(
        api,
        PLAN,
        ("gpus", "batch"),
        "plan('megatron-1t', 'a100-selene', 8 * 10**18, 8)",
        "plan('megatron-1t', 'a100-selene', 1024, 10**30)",
        "plan('megatron-1t', 'a100-selene', 2**100, 2**100)",
    )
    add(api, SIM, ("seconds", "f", "limit"), "simulate(build_schedule('1f1b', 2, 2), StageCosts(f=1e300))")
    add(api, MODEL, ("uniform", "n_layers", "layers", "stages"), "uniform(10**12, 2)")
    return cases


# ---- input files (made by make_files in a folder of their own) -------------------------------------
FILES = (
    "fifo",
    "/dev/zero",
    "/dev/urandom",
    "folder",
    "huge",
    "empty",
    "binary",
    "missing",
    "wrong.csv",
    "header.csv",
    "latin1",
    "manychars",
)


def make_files(folder: Path) -> dict[str, str]:
    """The bad input files, by name (a huge one is sparse: 2 GiB that take no disk)."""
    os.mkfifo(folder / "fifo")
    (folder / "folder").mkdir()
    with open(folder / "huge", "wb") as f:
        f.truncate(2 * 2**30)
    (folder / "empty").write_bytes(b"")
    (folder / "binary").write_bytes(bytes(range(256)) * 64)
    (folder / "wrong.csv").write_text("this,is,not\na,schedule,csv\n0F0,1Q3,??\n")
    (folder / "header.csv").write_text("rank,action\n0,F0\n")
    (folder / "latin1").write_bytes("caf\xe9 cr\xe8me ".encode("latin-1") * 100)
    # a million distinct characters (4 MiB): a vocabulary whose embedding and head the memory check counts
    (folder / "manychars").write_text("".join(map(chr, range(0x10000, 0x110000))))
    paths = {name: str(folder / name) for name in FILES if not name.startswith("/")}
    return paths | {"/dev/zero": "/dev/zero", "/dev/urandom": "/dev/urandom", "missing": str(folder / "nope")}


def file_library_cases(files: dict[str, str]) -> list[Case]:
    group, cases = "input files", []
    readers = {
        "load_corpus": (MODEL, "load_corpus({})", ("data", "file", "corpus")),
        "read_csv": ("from course_lib.schedules.torch_csv import read_csv", "read_csv({})", ("CSV", "row")),
        "load_sites": (
            "from course_lib.network import load_sites",
            "load_sites({})",
            ("sites", "file", "CSV"),
        ),
    }
    for name, path in files.items():
        for setup, call, names in readers.values():
            if name == "manychars":  # a good text, only too many characters to train on
                continue
            cases.append(Case(group, call.format(repr(path)), (*names, path, name), setup))
    # a corpus of a million distinct characters is refused for memory before torch's allocator is asked
    manychars = f"TrainConfig(data_path={files['manychars']!r}, d_model=512, n_layers=2).check()"
    cases.append(Case(group, manychars, ("memory", "GiB"), CFG))
    return cases


def cli_cases(files: dict[str, str]) -> list[Case]:
    cases: list[Case] = []

    def add(group: str, names: tuple[str, ...] | str, *argvs: str) -> None:
        names = (names,) if isinstance(names, str) else names
        cases.extend(Case(group, tuple(argv.split()), names) for argv in argvs)

    g = "command-line flags"
    add(g, ("COMMAND", "invalid choice", "unrecognized"), "", "trian", "--stages 4", "schedule simulate")
    for cmd in ("schedule", "simulate", "plan", "train", "tp counts", "shelf"):
        add(g, ("--bogus", "unrecognized", "required"), f"{cmd} --bogus=1")  # argparse: the first problem
    base = {"schedule": "schedule --schedule 1f1b", "simulate": "simulate --schedule 1f1b"}
    for cmd, pre in base.items():
        for flag, other in (("--stages", "--microbatches 8"), ("--microbatches", "--stages 4")):
            for bad in ("-1", "0", "abc", "2.5", "99999999999999999999", "nan"):
                add(g, flag, f"{pre} {other} {flag} {bad}")
        add(g, "--schedule", f"{cmd} --schedule nope --stages 4 --microbatches 8")
        add(g, "--virtual", f"{pre} --stages 4 --microbatches 8 --virtual 0")
    sim = "simulate --schedule 1f1b --stages 4 --microbatches 8"
    for flag in ("--latency", "--bandwidth", "--time-f", "--time-i", "--time-w", "--boundary-bytes"):
        for bad in ("-1", "nan", "x"):
            add(g, flag, f"{sim} {flag} {bad}")
    add(g, "--bandwidth", f"{sim} --bandwidth 0")
    add(g, "--format", "schedule --schedule 1f1b --stages 2 --microbatches 2 --format xml")
    pl = "plan --model megatron-18b --cluster a100-selene"
    add(
        g,
        "--gpus",
        f"{pl} --gpus 0 --global-batch 64",
        f"{pl} --gpus -8 --global-batch 64",
        f"{pl} --gpus 8000000000000000000 --global-batch 64",
        f"{pl} --gpus 6.5 --global-batch 64",
    )
    add(
        g,
        ("--global-batch", "batch"),
        f"{pl} --gpus 64 --global-batch 0",
        f"{pl} --gpus 64 --global-batch x",
        f"{pl} --gpus 64 --global-batch 1000000000000000",
    )
    add(g, "--model", "plan --model gpt-9 --cluster a100-selene --gpus 64 --global-batch 64")
    add(g, "--cluster", "plan --model megatron-18b --cluster laptop --gpus 64 --global-batch 64")
    add(
        g,
        "--seq-len",
        f"{pl} --gpus 64 --global-batch 64 --seq-len 0",
        f"{pl} --gpus 64 --global-batch 64 --seq-len 100000000000",
    )
    add(g, "--top", f"{pl} --gpus 64 --global-batch 64 --top 0", f"{pl} --gpus 64 --global-batch 64 --top -1")
    add(g, "--layout", f"{pl} --gpus 64 --global-batch 64 --layout E(t*|")
    add(g, ("--gpus", "node"), f"{pl} --gpus 63 --global-batch 64")
    tr = "train --layers 2 --steps 1"
    for flag, bads in (
        ("--layers", ("0", "-2", "x", "2.5", "100000000")),
        ("--width", ("0", "-8", "30", "100000000")),
        ("--heads", ("0", "3")),
        ("--seq-len", ("0", "-1", "100000000000")),
        ("--steps", ("-1", "x", "1e20")),
        ("--batch-size", ("0", "3", "1000000000000")),
        ("--microbatches", ("0", "5")),
        ("--lr", ("0", "-1", "nan", "inf")),
        ("--seed", ("-1", "x")),
        ("--threads", ("0", "100000")),
        ("--device", ("tpu",)),
        ("--precision", ("fp8",)),
    ):
        for bad in bads:
            add(
                g,
                flag,
                f"train --layers 2 --steps 1 {flag} {bad}"
                if flag not in ("--layers", "--steps")
                else f"train {flag} {bad}",
            )
    eng = f"{tr} --engine local --schedule 1f1b"
    add(g, "--engine", f"{tr} --engine warp")
    add(g, "--stages", f"{eng} --stages 0", f"{eng} --stages 5", f"{eng} --stages 1000000000")
    add(g, "--schedule", f"{tr} --engine local --schedule nope --stages 2")
    add(g, "--checkpoint", f"{eng} --stages 2 --checkpoint sometimes")
    add(
        g,
        ("--timeout", "distributed"),
        f"{eng} --stages 2 --timeout 5",
        f"{tr} --engine distributed --stages 2 --timeout -1",
        f"{tr} --engine distributed --stages 2 --timeout inf",
    )
    add(g, ("--latency", "reference"), f"{tr} --latency 0.1")
    add(
        g,
        ("--tp", "--dp"),
        f"{tr} --engine distributed --stages 2 --tp 0",
        f"{tr} --engine distributed --stages 2 --dp -1",
        f"{tr} --engine local --stages 2 --tp 2",
    )
    add(g, "--runner", f"{tr} --engine distributed --stages 2 --runner mine")
    add(g, "--clip-grad-norm", f"{tr} --clip-grad-norm -1", f"{tr} --clip-grad-norm nan")
    add(
        g,
        ("--layers", "--devices", "--microbatches"),
        "tp counts --layers 0",
        "tp counts --devices 1",
        "tp counts --devices 100000",
        "tp sweep --microbatches 0",
        "tp nonsense",
    )
    add(g, ("--scenario",), "tp sweep --scenario sideways")
    g = "input files"
    for name, path in files.items():
        if name not in ("/dev/urandom", "latin1", "manychars"):
            add(g, ("--from-csv", path, "CSV", "row"), f"schedule --from-csv {path}")
        if name not in ("/dev/urandom", "wrong.csv", "header.csv", "manychars"):
            add(g, ("--data", path, "data"), f"{tr} --data {path}")
    add(
        g, ("--gantt", "png", "folder"), f"{sim} --gantt {files['folder']}", f"{sim} --gantt /proc/nope/x.png"
    )
    g = "sizes nobody can run"
    add(g, ("--width", "memory", "parameters"), f"{tr} --width 8192", f"{tr} --width 65536 --heads 4")
    add(g, ("--seq-len", "memory"), f"{tr} --seq-len 1048576")
    add(g, ("--batch-size", "memory"), f"{tr} --batch-size 10000000")
    add(g, ("--layers", "memory", "parameters"), "train --layers 1000000 --steps 1")
    add(
        g,
        ("--stages", "--microbatches", "actions"),
        "schedule --schedule 1f1b --stages 1000000 --microbatches 1000000",
        "simulate --schedule gpipe --stages 1000000 --microbatches 1000000",
    )
    add(
        g,
        ("--gpus", "batch"),
        "plan --model megatron-1t --cluster a100-selene --gpus 10000000 --global-batch 1",
    )
    return cases


# ---- running them ----------------------------------------------------------------------------------
@dataclass
class Outcome:
    case: Case
    held: bool
    why: str  # held, or: missing, raw, unnamed, accepted, refused, traceback, exit N, slow, hang, leftover
    detail: str = ""


CHILD = r"""
import json, os, sys, time, traceback, multiprocessing.process as mpp
cases = json.loads(sys.stdin.readline())
temp = os.environ["TMPDIR"]
for room in ("course_lib.schedules", "course_lib.engines"):  # registered as the lessons and the CLI do
    try:
        __import__(room)
    except ImportError:
        pass

def named(text, names):  # "micro-batches" names microbatches, "n layers" n_layers
    flat = lambda t: "".join(ch for ch in t.lower() if ch.isalnum())
    return any(flat(n) in flat(text) for n in names)

def ours(name):  # this process's own multiprocessing folder and torch's caches are no leftover
    own = mpp.current_process()._config.get("tempdir")
    return name.startswith("torchinductor_") or os.path.join(temp, name) == own

for i, (setup, code, names, accept) in enumerate(cases):
    before = set(os.listdir(temp))
    env = {}
    try:
        exec(setup, env)
    except Exception as err:
        print(json.dumps([i, "missing", f"{type(err).__name__}: {err}"[:160]]), flush=True)
        continue
    start, why, detail = time.perf_counter(), "", ""
    try:
        exec(code, env)
        why = "held" if accept else "accepted"
    except BaseException as err:
        text = f"{type(err).__name__}: {err}".splitlines()[0][:160] if str(err) else type(err).__name__
        detail = text
        frames = traceback.extract_tb(err.__traceback__)
        deep = frames[-1].filename if frames else ""  # torch's or numpy's: raw, whatever its type
        if accept:
            why = "refused"
        elif not isinstance(err, (ValueError, TypeError)) or "site-packages" in deep:
            why = "raw"
        elif not named(str(err), names):
            why = "unnamed"
        else:
            why = "held"
    took = time.perf_counter() - start
    left = sorted(n for n in set(os.listdir(temp)) - before if not ours(n))
    if why == "held" and took > %(slow)r:
        why, detail = "slow", f"{took:.1f} s: {detail}"
    if why == "held" and left:
        why, detail = "leftover", f"{left}: {detail}"
    print(json.dumps([i, why, detail]), flush=True)
    import matplotlib.pyplot as plt; plt.close("all")
"""


def run_library(cases: list[Case], root: Path, temp: Path) -> list[Outcome]:
    """Run the cases in a child (cwd and import path: `root`); a case silent for HANG_S kills the child and
    is a hang, and a new child goes on with the next."""
    outcomes: dict[int, Outcome] = {}
    payload = [(c.setup, c.code, c.names, c.accept) for c in cases]
    env = os.environ | {"PYTHONPATH": str(root), "TMPDIR": str(temp), "MPLBACKEND": "Agg"}
    start = 0
    while start < len(cases):
        proc = subprocess.Popen(
            [PYTHON, "-c", CHILD % {"slow": SLOW_S}],
            cwd=root,
            env=env,
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        proc.stdin.write(json.dumps(payload[start:]) + "\n")
        proc.stdin.flush()
        expected, deadline = start, time.monotonic() + HANG_S + 30  # the first case imports torch
        while expected < len(cases):
            ready, _, _ = select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
            line = proc.stdout.readline() if ready else ""
            if not line:  # silent past its time, or the child died (a case that ends the process)
                why = "hang" if not ready else "crash"
                outcomes[expected] = Outcome(
                    cases[expected],
                    False,
                    why,
                    f"no answer in {HANG_S:.0f} s" if why == "hang" else "the process ended",
                )
                expected += 1
                break
            i, why, detail = json.loads(line)
            outcomes[start + i] = Outcome(cases[start + i], why == "held", why, detail)
            expected, deadline = start + i + 1, time.monotonic() + HANG_S
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        start = expected
    for name in os.listdir(temp):  # a killed child's own files; anything a case left was counted above
        shutil.rmtree(temp / name, ignore_errors=True) if (temp / name).is_dir() else (temp / name).unlink()
    return [outcomes[i] for i in range(len(cases))]


def run_cli(case: Case, root: Path) -> Outcome:
    """One command in its own process, session and TMPDIR; held: exit 2, one error line naming it, fast."""
    with tempfile.TemporaryDirectory(prefix="bad-input-") as temp:
        env = os.environ | {"PYTHONPATH": str(root), "TMPDIR": temp, "MPLBACKEND": "Agg"}
        start = time.perf_counter()
        proc = subprocess.Popen(
            [PYTHON, "-m", "course_lib", *case.code],
            cwd=root,
            env=env,
            text=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            _, err = proc.communicate(timeout=HANG_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return Outcome(case, False, "hang", f"still running after {HANG_S:.0f} s")
        took = time.perf_counter() - start
        os.killpg(proc.pid, signal.SIGKILL) if _alive_group(proc.pid) else None
        left = sorted(n for n in os.listdir(temp) if not n.startswith("torchinductor_"))
    errors = [line for line in err.splitlines() if "error" in line.lower()]
    line = errors[-1][:160] if errors else (err.strip().splitlines() or [""])[-1][:160]
    if "Traceback" in err:
        return Outcome(case, False, "traceback", line)
    if proc.returncode == 0:
        return Outcome(case, False, "accepted", "exit 0")
    if proc.returncode != 2 or len(errors) != 1:
        return Outcome(case, False, f"exit {proc.returncode}", line)
    if not _names_it(line, case):
        return Outcome(case, False, "unnamed", line)
    if took > SLOW_S:
        return Outcome(case, False, "slow", f"{took:.1f} s: {line}")
    if left:
        return Outcome(case, False, "leftover", f"{left}: {line}")
    return Outcome(case, True, "held", line)


def _flat(text: str) -> str:
    return "".join(ch for ch in text.lower() if ch.isalnum())


def _names_it(line: str, case: Case) -> bool:
    """The error line names the flag (--seq-len: "seq_len" or "seq len"), a word of the case's, or the
    value given ("unknown schedule 'nope'", "got -1")."""
    argv = case.code
    value = argv[-1] if argv and not argv[-1].startswith("-") else ""
    shown_ = [f"got {value}", f"'{value}'", f"{value} "] + ([value] if len(value) >= 3 else [])
    words = [*case.names, *(a for a in argv[-2:] if a.startswith("--"))]
    return any(_flat(w) in _flat(line) for w in words if _flat(w)) or any(v in line for v in shown_ if value)


def _alive_group(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def shown(case: Case) -> str:
    """The case as one line: its command, or its code with the tiny config left out."""
    if isinstance(case.code, tuple):
        return "python -m course_lib " + " ".join(case.code)
    return case.code.replace(f"**{{**dict({TINY}), ", "{tiny, ").replace(TINY, "tiny").replace("\n", "; ")


def report(outcomes: list[Outcome], examples: int) -> str:
    groups: dict[str, list[Outcome]] = {}
    for o in outcomes:
        groups.setdefault(o.case.group, []).append(o)
    rows = [
        "| class | cases tried | held | not held | what did not hold (examples) |",
        "|---|---|---|---|---|",
    ]
    for group, items in sorted(groups.items()):
        bad = [o for o in items if not o.held]
        kinds: dict[str, int] = {}
        for o in bad:
            kinds[o.why] = kinds.get(o.why, 0) + 1
        seen, shown_ = set(), []
        for o in bad:  # one example of each way it failed first, then more
            if o.why not in seen and len(shown_) < examples:
                seen.add(o.why)
                shown_.append(f"`{shown(o.case)[:70]}` → {o.why}: {o.detail[:90]}")
        kind_text = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items(), key=lambda kv: -kv[1]))
        text = "; ".join(shown_).replace("|", "\\|")
        rows.append(
            f"| {group} | {len(items)} | {len(items) - len(bad)} | {len(bad)} ({kind_text}) | {text} |"
            if bad
            else f"| {group} | {len(items)} | {len(items)} | 0 | |"
        )
    total, held = len(outcomes), sum(o.held for o in outcomes)
    rows.append(f"| **all** | **{total}** | **{held}** | **{total - held}** | |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--root",
        type=Path,
        default=Path(__file__).resolve().parent.parent,
        help="the checkout whose course_lib is probed (default: this one)",
    )
    parser.add_argument("--workers", type=int, default=2, help="command-line cases run at once")
    parser.add_argument("--only", choices=("cli", "library"), help="run only these cases")
    parser.add_argument("--examples", type=int, default=3, help="cases that did not hold, shown per class")
    parser.add_argument("--json", type=Path, help="also write every case's outcome here")
    args = parser.parse_args()
    root, started = args.root.resolve(), time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bad-input-files-") as folder:
        files = make_files(Path(folder))
        library = library_cases() + file_library_cases(files) if args.only != "cli" else []
        cli = cli_cases(files) if args.only != "library" else []
        outcomes: list[Outcome] = []
        with tempfile.TemporaryDirectory(prefix="bad-input-") as temp:
            by_group: dict[str, list[Case]] = {}
            for case in library:
                by_group.setdefault(case.group, []).append(case)
            for group, cases in by_group.items():
                outcomes += run_library(cases, root, Path(temp))
                print(f"{group}: {len(cases)} cases, {time.perf_counter() - started:.0f} s", file=sys.stderr)
        with ThreadPoolExecutor(args.workers) as pool:
            cli_outcomes = list(pool.map(lambda c: run_cli(c, root), cli))
        print(f"command line: {len(cli)} cases, {time.perf_counter() - started:.0f} s", file=sys.stderr)
    for o in cli_outcomes:  # the command line's classes are named apart from the library's
        o.case = Case(f"command line: {o.case.group}", o.case.code, o.case.names)
    outcomes += cli_outcomes
    print(f"Probe of {root} ({len(outcomes)} cases, {time.perf_counter() - started:.0f} s):\n")
    print(report(outcomes, args.examples))
    if args.json:
        rows = [
            {"group": o.case.group, "case": shown(o.case), "held": o.held, "why": o.why, "detail": o.detail}
            for o in outcomes
        ]
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
