"""Where moved modules went: a lesson kept from before fails with an error naming each new home.

A notebook saved before a module moved still says, say, ``from course_lib.simulator import simulate``.
Instead of Python's bare "No module named 'course_lib.simulator'", the import fails with::

    ModuleNotFoundError: course_lib.simulator has moved: import from course_lib.shelf.simulator instead

MOVED_MODULES is the one table of moves: old module -> new module, or, for a module split in several, old
module -> {new module: the names it now holds}. Add a line here whenever a module moves or is renamed.

One kind of old import must keep working instead: an assignment released before its checks moved out of
the library has ``from course_lib.grading import ...`` in its locked cells, in the student's copy and in
the instructor's gradebook, and neither can be edited mid-term. STILL_IMPORTABLE lists those: the old name
imports the new module itself (no copy of it here; ``course_lib`` holds no grading code).
``course_lib/__init__.py`` installs the moved-module finder right after Python's own path finder: a module
file that exists is always found first, and an editable install of an older checkout cannot answer for a
moved module instead. It never imports anything. The old-name finder goes first (see OldNameFinder), and
imports only the new module.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping, Sequence
from importlib.abc import Loader, MetaPathFinder
from importlib.machinery import ModuleSpec, PathFinder
from types import ModuleType

_GANTT = "course_lib.charts.gantt"

MOVED_MODULES: dict[str, str | dict[str, tuple[str, ...]]] = {
    # the shelf (commit 282ea6d: the pipeline machine a student reads)
    "course_lib.errors": "course_lib.shelf.errors",
    "course_lib.checks": "course_lib.shelf.errors",
    "course_lib.schedules.ir": "course_lib.shelf.schedule",
    "course_lib.schedules.messages": "course_lib.shelf.schedule",
    "course_lib.schedules.basic": "course_lib.shelf.first_schedules",
    "course_lib.schedules.builders": "course_lib.shelf.first_schedules",
    "course_lib.schedules.validate": "course_lib.shelf.validate",
    "course_lib.costs": "course_lib.shelf.costs",
    "course_lib.links": "course_lib.shelf.costs",
    "course_lib.sim_inputs": "course_lib.shelf.costs",
    "course_lib.timeline": "course_lib.shelf.timeline",
    "course_lib.simulator_fast": "course_lib.fast_simulator",
    "course_lib.simulator": "course_lib.shelf.simulator",
    "course_lib.model": "course_lib.shelf.model",
    "course_lib.data": "course_lib.shelf.model",
    "course_lib.reference": "course_lib.shelf.reference",
    "course_lib.partition": {
        "course_lib.shelf.model": ("Partition", "uniform", "stage_modules"),
        "course_lib.balance": ("optimal", "stage_totals"),
    },
    "course_lib.devices": "course_lib.shelf.stage",
    "course_lib.engines.runtime": "course_lib.shelf.stage",
    "course_lib.engines.local": "course_lib.shelf.local_engine",
    "course_lib.engines.dist_worker": "course_lib.shelf.rank_loop",
    "course_lib.engines.comm": "course_lib.shelf.p2p",
    "course_lib.engines.distributed": "course_lib.shelf.distributed_engine",
    "course_lib.engines.dist_result": "course_lib.shelf.run_spec",
    "course_lib.launch_diagnosis": "course_lib.shelf.launcher",
    "course_lib.launch": "course_lib.shelf.launcher",
    "course_lib.saved_memory": "course_lib.shelf.stage",
    "course_lib.engines.weight_grad": "course_lib.engines.split_backward",
    "course_lib.engines.plan": "course_lib.shelf.local_engine",
    "course_lib.engines.links_injected": "course_lib.engines.injected_links",
    "course_lib.charts.whole_file": "course_lib.output_files",
    # the instructor's autograder left the student's library
    **{f"course_lib.grading.{name}": f"course_grading.{name}" for name in (
        "execute", "sandbox", "sandbox_output", "worker", "plain", "feedback", "switched_off")},
    # charts: one home, the Gantt chart included
    "course_lib.plots": {
        _GANTT: (
            "plot_timeline", "save_timeline_png", "COLORS", "IDLE_COLOR", "LABELS", "chunks_of", "shade",
            "gantt_figsize", "time_scale",
        ),
        "course_lib.charts.bubble_and_memory": ("plot_bubble_vs_m", "plot_memory", "SERIES_COLORS"),
        "course_lib.schedules.closed_forms": ("gpipe_bubble",),
        "course_lib.shelf.timeline": ("format_bytes",),
    },
    "course_lib.plot_gantt": _GANTT,
    "course_lib.gantt_artists": _GANTT,
    "course_lib.widgets.gantt_png": _GANTT,
    # the network: sites, distances and links in one module; torchrun's multi-node helpers by the CLI
    "course_lib.geo": "course_lib.network",
    "course_lib.netif": "course_lib.cli.across_nodes",
    # one meaning per name: "plan" is the planner's answer; no two files share a name
    "course_lib.planner.cost": "course_lib.planner.step_time",
    "course_lib.autoschedule.zero_bubble": "course_lib.autoschedule.auto_zero_bubble",
    # the command line: each command in cli/NAME_command.py
    "course_lib.cli.plan": "course_lib.cli.plan_command",
    "course_lib.cli.schedule": "course_lib.cli.schedule_command",
    "course_lib.cli.simulate": "course_lib.cli.simulate_command",
    "course_lib.cli.tp": "course_lib.cli.tp_command",
    "course_lib.cli.train": "course_lib.cli.train_command",
}  # fmt: skip

# old name -> new module, imported under the old name too (the module docstring says why)
STILL_IMPORTABLE: dict[str, str] = {
    "course_lib.grading": "course_assignments",
    **{f"course_lib.grading.{name}": f"course_assignments.{name}" for name in (
        "guard", "kit", "memory_checks", "rank_checks", "schedule_checks", "wan_checks")},
}  # fmt: skip


def moved_message(old: str, moves: Mapping[str, str | dict[str, tuple[str, ...]]] = MOVED_MODULES) -> str:
    """The sentence a student reads when importing `old`, which moved."""
    new = moves[old]
    if isinstance(new, str):
        return f"{old} has moved: import from {new} instead"
    homes = "; ".join(f"{', '.join(names)} from {module}" for module, names in new.items())
    return f"{old} was split: import {homes}"


class _SameModule(Loader):
    """Loads an old name as the module that replaced it: the very same module object, not a copy."""

    def __init__(self, new: str) -> None:
        self.new = new

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        return importlib.import_module(self.new)

    def exec_module(self, module: ModuleType) -> None:
        pass  # already run under its own name


class OldNameFinder(MetaPathFinder):
    """Imports a name in `aliases` as its new module. It stands before Python's path finder, which would
    otherwise load a second copy of a submodule from the new package's folder under the old name."""

    def __init__(self, aliases: Mapping[str, str] = STILL_IMPORTABLE) -> None:
        self.aliases = aliases

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        return ModuleSpec(fullname, _SameModule(self.aliases[fullname])) if fullname in self.aliases else None


class MovedModuleFinder(MetaPathFinder):
    """Raises ModuleNotFoundError naming the new home of a module in `moves`; finds nothing else."""

    def __init__(self, moves: Mapping[str, str | dict[str, tuple[str, ...]]] = MOVED_MODULES) -> None:
        self.moves = moves

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> None:
        if fullname in self.moves:
            # name=None on purpose: `from course_lib import plots` swallows an error whose name is the
            # module it asked for, and would say only "cannot import name 'plots'"
            raise ModuleNotFoundError(moved_message(fullname, self.moves), name=None)
        return None


def install() -> None:
    """Put the moved-module finder on sys.meta_path right after the path finder and the old-name finder
    first, once each (a reload adds no second)."""
    installed = {type(finder).__name__ for finder in sys.meta_path}
    if OldNameFinder.__name__ not in installed:
        sys.meta_path.insert(0, OldNameFinder())
    if MovedModuleFinder.__name__ not in installed:
        after = [i for i, finder in enumerate(sys.meta_path) if finder is PathFinder]
        sys.meta_path.insert(after[0] + 1 if after else len(sys.meta_path), MovedModuleFinder())
