"""Issue 42: types at the door and nonsense refused, in the library's own words.

A float where a count belongs is refused when a config is made (TrainConfig, ModelConfig, RunSpec's
counts), naming the field, not later inside torch; 16.0 and numpy's numbers are the same numbers as
Python's and come out as Python's. Sizes no schedule can have (0 devices) are refused by every
builder, not answered with an empty schedule, and a link's transfer of -5 bytes is no time at all.
"""

from __future__ import annotations

import importlib
import inspect
import math
import pkgutil

import numpy as np
import pytest
from support.inputs import TINY, refused

import course_lib.schedules
from course_lib.charts.gantt import plot_timeline
from course_lib.network import fiber_latency_s, load_sites, ring_all_reduce_bytes, ring_all_reduce_s
from course_lib.planner.enumerate import plan
from course_lib.planner.layout import Layout
from course_lib.schedules.closed_forms import gpipe_bubble
from course_lib.shelf import first_schedules
from course_lib.shelf.costs import Link
from course_lib.shelf.errors import CourseError
from course_lib.shelf.first_schedules import build_schedule
from course_lib.shelf.model import ModelConfig, build_model
from course_lib.shelf.reference import TrainConfig
from course_lib.shelf.schedule import Action
from course_lib.shelf.simulator import simulate

REFUSED_AT_THE_DOOR = {
    "TrainConfig batch 16.5": (
        lambda: TrainConfig(batch_size=16.5),
        ["batch_size must be a whole number", "16.5"],
    ),
    "TrainConfig steps text": (lambda: TrainConfig(steps="3"), ["steps must be a whole number", "'3' (str)"]),
    "TrainConfig layers bool": (lambda: TrainConfig(n_layers=True), ["n_layers", "True (bool)"]),
    "TrainConfig lr text": (lambda: TrainConfig(lr="x"), ["lr must be a number", "'x' (str)"]),
    "TrainConfig seq numpy 2.5": (lambda: TrainConfig(seq_len=np.float64(2.5)), ["seq_len must be a whole"]),
    "ModelConfig width 32.5": (
        lambda: ModelConfig(2, 32.5, 4, 65, 16),
        ["d_model must be a whole number", "32.5"],
    ),
    "ModelConfig heads text": (lambda: ModelConfig(2, 32, "4", 65, 16), ["n_heads must be a whole number"]),
}


@pytest.mark.parametrize("case", list(REFUSED_AT_THE_DOOR))
def test_a_config_refuses_a_wrong_type_when_it_is_made(case):
    call, words = REFUSED_AT_THE_DOOR[case]
    refused(call, words)


def test_whole_floats_and_numpy_numbers_come_out_as_pythons():
    cfg = TrainConfig(**TINY | dict(batch_size=4.0, steps=np.int32(1), lr=np.float32(0.5), seed=np.uint8(3)))
    assert [type(v) for v in (cfg.batch_size, cfg.steps, cfg.lr, cfg.seed)] == [int, int, float, int]
    assert (cfg.batch_size, cfg.steps, cfg.lr, cfg.seed) == (4, 1, 0.5, 3)
    cfg.check()
    model = ModelConfig(np.int64(2), 32.0, np.int8(4), 65, np.int16(16))
    assert [type(v) for v in (model.n_layers, model.d_model, model.n_heads, model.seq_len)] == [int] * 4
    assert Link(0.5, 1e3).transfer_time(np.int64(1000)) == 1.5
    assert ring_all_reduce_bytes(np.float32(8.0), np.int64(2)) == 8.0


def builders() -> list[tuple[str, object]]:
    """Every public schedule builder: a function of (n_devices, n_microbatches, ...) that returns one."""
    found = {}
    modules = [importlib.import_module(f"course_lib.schedules.{m.name}") for m in
               pkgutil.iter_modules(course_lib.schedules.__path__)] + [first_schedules]  # fmt: skip
    for module in modules:
        for name, fn in inspect.getmembers(module, inspect.isfunction):
            params = list(inspect.signature(fn).parameters)
            returns = inspect.signature(fn).return_annotation
            if fn.__module__ == module.__name__ and params[:2] == ["n_devices", "n_microbatches"]:
                if returns in ("Schedule", "tuple[int, int]") and not name.startswith("_"):
                    found[f"{module.__name__.split('.')[-1]}.{name}"] = fn
    return sorted(found.items())


BUILDERS = builders()


@pytest.mark.parametrize("sizes", [(0, 8), (4, 0), (-1, 4), (2.5, 4), ("4", 4), (None, 4)])
def test_every_builder_refuses_sizes_no_schedule_has(sizes):
    assert len(BUILDERS) >= 15
    for name, build in BUILDERS:
        with pytest.raises(CourseError, match="n_devices|n_microbatches") as err:
            build(*sizes)
        assert str(sizes[0] if sizes[0] not in (1, 4) else sizes[1]) in str(err.value), (name, str(err.value))


@pytest.mark.parametrize(
    "call, words",
    [
        (lambda: Link().transfer_time(-5), ["nbytes must be a finite number >= 0, got -5"]),
        (lambda: Link(0, 1e9).transfer_time("x"), ["nbytes must be a finite number", "'x' (str)"]),
        (lambda: Link(0, 1e9).transfer_time(math.nan), ["nbytes", "nan"]),
        (lambda: ring_all_reduce_bytes(8, 0), ["ranks must be a whole number >= 1", "got 0"]),
        (lambda: ring_all_reduce_bytes(-8, 2), ["nbytes must be a finite number >= 0, got -8"]),
        (lambda: ring_all_reduce_s(8, 2.5, Link()), ["ranks must be a whole number", "2.5"]),
    ],
)
def test_nonsense_is_refused_naming_the_argument(call, words):
    refused(call, words)


CHART = build_schedule("1f1b", 2, 2)


@pytest.mark.parametrize(
    "call, words",
    [  # what bench/bench_bad_input.py found accepted, or answered with a raw error, after the first pass
        (lambda: gpipe_bubble(0, 4), ["p must be a whole number >= 1", "got 0"]),
        (lambda: gpipe_bubble(4, 0), ["m must be a finite number > 0", "got 0"]),
        (lambda: gpipe_bubble(4, 8, v=0), ["v must be a whole number >= 1", "got 0"]),
        (lambda: plot_timeline(None), ["tl must be a Timeline", "None"]),
        (lambda: plot_timeline(simulate(CHART), extent_s=-1), ["extent_s must be a finite", ">= 0", "-1"]),
        (lambda: plot_timeline(simulate(CHART), max_labels=-3), ["max_labels", "-3"]),
        (lambda: Layout(0, 1, 1, 1), ["t must be a whole number >= 1", "got 0"]),
        (lambda: Layout(1, 1, 1, 1, v="2"), ["v must be a whole number", "'2' (str)"]),
        (lambda: build_model("big"), ["cfg must be a ModelConfig", "'big' (str)"]),
        (lambda: fiber_latency_s("far"), ["distance_km must be a finite number >= 0", "'far' (str)"]),
        (lambda: fiber_latency_s(100, 0.5), ["route_factor", ">= 1", "0.5"]),
        (lambda: plan("megatron-18b", "a100-selene", 64, 64, simulate_top=-1), ["simulate_top", "-1"]),
        (lambda: TrainConfig(**TINY | dict(batch_size=0)).check(), ["batch_size must be a whole", ">= 1"]),
        (lambda: TrainConfig(**TINY | dict(eval_batches=0)).check(), ["eval_batches must be a whole number"]),
        (lambda: TrainConfig(**TINY | dict(steps=10**15)).check(), ["steps", "<= 1,000,000"]),
        (lambda: TrainConfig(**TINY | dict(data_path=123)).check(), ["data_path must be a path", "got 123"]),
    ],
)
def test_nonsense_the_probe_found_is_refused_naming_the_argument(call, words):
    refused(call, words)


def test_an_action_that_is_no_text_is_refused_as_unreadable():
    with pytest.raises(ValueError, match="cannot read action None"):
        Action.parse(None)


@pytest.mark.parametrize(
    "data, words",
    [
        (b"", ["holds no site"]),
        (bytes(range(256)), ["is not a sites table", "UTF-8", "UnicodeDecodeError"]),
        (b"rank,action\n0,F0\n", ["is not a sites table", "name, country, lat, lon", "KeyError"]),
        (b"name,country,lat,lon\nx,y,north,0\n", ["is not a sites table", "ValueError"]),
    ],
)
def test_a_sites_file_that_is_no_sites_table_is_refused_naming_it(tmp_path, data, words):
    path = tmp_path / "sites.csv"
    path.write_bytes(data)
    refused(lambda: load_sites(path), [str(path), *words])
