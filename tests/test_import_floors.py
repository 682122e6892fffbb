"""Every import in course_lib points down the floors drawn in course_lib/__init__.py, and none runs
in a circle. The floors are read from that docstring, so the picture and the check cannot drift."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import course_lib

ROOT = Path(course_lib.__file__).parent


def floor_table() -> dict[str, int]:
    """``name -> floor`` from the docstring's lines ``  N  name name ...`` (a name is a module or a
    package below course_lib; a package's floor holds for all its modules)."""
    table: dict[str, int] = {}
    for line in (course_lib.__doc__ or "").splitlines():
        match = re.match(r"\s*(\d)\s{2,}(.*)", line)
        if match:
            for name in match.group(2).split():
                table[name.strip(",")] = int(match.group(1))
    return table


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)  # "" for course_lib itself


def imports_of(source: str, name: str, is_package: bool) -> set[str]:
    """The course_lib modules a module imports anywhere (at the top or inside a function)."""
    found: set[str] = set()
    package = ["course_lib", *filter(None, (name if is_package else name.rpartition(".")[0]).split("."))]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: `from . import x` is this package, each further dot one up
                base = ".".join(package[: len(package) + 1 - node.level] + [node.module or ""]).rstrip(".")
            else:
                base = node.module or ""
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}  # `from pkg import module`
    return {m.removeprefix("course_lib.") for m in found if m.startswith("course_lib.")}


def import_graph() -> dict[str, set[str]]:
    """Module -> the course_lib modules it imports (names without the ``course_lib.`` prefix)."""
    files = {module_name(p): p for p in ROOT.rglob("*.py")}
    return {
        name: {m for m in imports_of(p.read_text(), name, p.name == "__init__.py") if m in files} - {name}
        for name, p in files.items()
    }


def floor_of(module: str, table: dict[str, int]) -> int:
    parts = module.split(".")
    for n in range(len(parts), 0, -1):  # the most specific entry wins
        if ".".join(parts[:n]) in table:
            return table[".".join(parts[:n])]
    raise AssertionError(f"course_lib.{module} has no floor: add it to course_lib/__init__.py's picture")


def upward_imports(graph: dict[str, set[str]], table: dict[str, int]) -> list[str]:
    return sorted(
        f"{a} (floor {floor_of(a, table)}) imports {b} (floor {floor_of(b, table)})"
        for a, targets in graph.items() if a
        for b in targets if floor_of(b, table) > floor_of(a, table)
    )  # fmt: skip


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each strongly connected group of modules (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while not group or group[-1] != v:
                group.append(stack.pop())
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_every_module_has_a_floor() -> None:
    table = floor_table()
    assert set(table.values()) == {1, 2, 3, 4, 5, 6}
    for module in import_graph():
        if module:
            floor_of(module, table)


def test_imports_point_down_only() -> None:
    assert upward_imports(import_graph(), floor_table()) == []


def test_no_import_cycles() -> None:
    assert cycles(import_graph()) == []


def test_the_checker_sees_an_upward_import_and_a_cycle() -> None:
    table = {"schedules": 1, "simulator": 2, "cli": 6}
    graph = {"schedules.ir": {"simulator"}, "simulator": {"schedules.ir"}, "cli": {"simulator"}}
    assert upward_imports(graph, table) == ["schedules.ir (floor 1) imports simulator (floor 2)"]
    assert cycles(graph) == [["schedules.ir", "simulator"]]
    with pytest.raises(AssertionError, match="has no floor"):
        floor_of("nowhere", table)


def test_the_checker_reads_imports_inside_functions_and_relative_ones() -> None:
    source = "def f():\n    from course_lib.cli import torchrun\nfrom . import ir\nfrom ..timeline import T\n"
    assert imports_of(source, "schedules.basic", is_package=False) == {
        "cli", "cli.torchrun", "schedules", "schedules.ir", "timeline", "timeline.T",
    }  # fmt: skip
