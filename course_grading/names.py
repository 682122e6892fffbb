"""Where a name is defined in the library, found by reading its source (never by a module path).

The library's layout moves (files are renamed, split, merged into rooms); the names of what it defines
are what the grader holds on to. ``definitions`` finds every function, method or class of a given name,
wherever it is defined in a package tree; ``module_of`` says which module defines a class, so that the
plain-data wall can rebuild a ``Schedule`` without knowing where schedule.py lives this term.

    definitions(Path("course_lib"), {"gpipe_bubble", "ModelShape.step_flops"})
    module_of("Schedule")          # "course_lib.shelf.schedule", or wherever it is now
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

LIBRARY = Path(__file__).resolve().parents[1] / "course_lib"
# what a student's code imports, both cut by a grading edition: the library, and the assignments' checks
STUDENT_PACKAGES = (LIBRARY, LIBRARY.parent / "course_assignments")

Definition = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


@dataclass(frozen=True)
class Found:
    path: Path  # the file that defines it
    qualname: str  # "gpipe_bubble", "ModelShape.step_flops"
    node: Definition


def walk(body: Iterable[ast.stmt], prefix: str) -> Iterator[tuple[str, Definition]]:
    """Every definition in `body`, nested ones too (a method, a class inside a function), by qualname."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            qualname = f"{prefix}{node.name}"
            yield qualname, node
            yield from walk(node.body, qualname + ".")
        elif isinstance(node, (ast.If, ast.Try, ast.With)):  # `if TYPE_CHECKING:`, `try: ... except`
            for block in ("body", "orelse", "finalbody"):
                yield from walk(getattr(node, block, []), prefix)
            for handler in getattr(node, "handlers", []):
                yield from walk(handler.body, prefix)


def matches(qualname: str, wanted: str) -> bool:
    """'gpipe_bubble' names any definition of that name, at any depth; 'ModelShape.step_flops' names
    the method of that class (or the end of a longer qualname)."""
    return qualname == wanted or qualname.endswith("." + wanted)


def definitions(root: Path, names: Iterable[str]) -> list[Found]:
    """Every definition under `root` (a package folder) that one of `names` names."""
    wanted = set(names)
    if not wanted:
        return []
    last = {name.rsplit(".", 1)[-1] for name in wanted}
    quick = re.compile(r"\b(?:def|class)\s+(?:" + "|".join(map(re.escape, sorted(last))) + r")\b")
    found = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text()
        if not quick.search(text):  # most files define none of them: skip the parse
            continue
        for qualname, node in walk(ast.parse(text).body, ""):
            if any(matches(qualname, name) for name in wanted):
                found.append(Found(path, qualname, node))
    return found


@functools.cache
def module_of(class_name: str, root: Path = LIBRARY) -> str:
    """The dotted module that defines top-level class `class_name` under `root` (exactly one must)."""
    found = [f for f in definitions(root, {class_name}) if f.qualname == class_name]
    if len(found) != 1:
        places = [str(f.path) for f in found]
        raise LookupError(f"class {class_name} is defined {len(found)} times in {root}: {places}")
    relative = found[0].path.relative_to(root.parent).with_suffix("")
    parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
    return ".".join(parts)
