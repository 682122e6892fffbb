"""A lesson kept from before: importing a module that moved fails with an error naming its new home."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from course_lib.moved_modules import MOVED_MODULES, MovedModuleFinder, moved_message


@pytest.mark.parametrize(
    ("line", "home"),
    [
        ("from course_lib.simulator import simulate", "course_lib.shelf.simulator"),
        ("from course_lib.schedules.builders import build_schedule", "course_lib.shelf.first_schedules"),
        ("from course_lib.engines.local import LocalPipelineTrainer", "course_lib.shelf.local_engine"),
        ("import course_lib.geo", "course_lib.network"),
        ("from course_lib import plot_gantt", "course_lib.charts.gantt"),  # `from package import module`
    ],
)
def test_an_old_import_names_the_new_home(line: str, home: str) -> None:
    with pytest.raises(ModuleNotFoundError, match=rf"has moved: import from {home} instead"):
        exec(line, {})


def test_a_split_module_names_the_home_of_each_name() -> None:
    with pytest.raises(ModuleNotFoundError) as caught:
        exec("from course_lib.plots import plot_timeline, plot_memory, gpipe_bubble", {})
    message = str(caught.value)
    assert "course_lib.plots was split" in message
    assert "plot_timeline, save_timeline_png" in message and "from course_lib.charts.gantt" in message
    assert "plot_bubble_vs_m, plot_memory, SERIES_COLORS from course_lib.charts.bubble_and_memory" in message
    assert "gpipe_bubble from course_lib.schedules.closed_forms" in message


def test_every_new_home_exists_and_no_old_one_does() -> None:
    for old, new in MOVED_MODULES.items():
        homes = [new] if isinstance(new, str) else list(new)
        for home in homes:
            importlib.import_module(home)  # raises if a new home is itself missing or moved
        with pytest.raises(ModuleNotFoundError, match="moved|split"):
            importlib.import_module(old)


def test_the_finder_only_speaks_for_moved_modules() -> None:
    finder = MovedModuleFinder({"pkg.old": "pkg.new"})
    assert finder.find_spec("pkg.other", None) is None
    with pytest.raises(ModuleNotFoundError, match="^pkg.old has moved: import from pkg.new instead$"):
        finder.find_spec("pkg.old", None)
    split = {"a": {"b": ("x", "y"), "c": ("z",)}}
    assert moved_message("a", split) == "a was split: import x, y from b; z from c"


def test_a_fresh_interpreter_installs_the_finder_once() -> None:
    code = (
        "import importlib, sys, course_lib; importlib.reload(course_lib);"
        "print(sum(type(f).__name__ == 'MovedModuleFinder' for f in sys.meta_path))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "1"
