"""The grading edition of the library: a copy of the student's packages with an assignment's answers left out.

While a student's code runs for grading, the packages it imports are this edition, mounted read-only over
``course_lib`` and ``course_assignments`` in the sandbox (``course_grading.sandbox``): an answer may be
defined in the library or in an assignment's check (which computes it to say how far off a student is).
Each definition the assignment's table (``course_grading.switched_off``) names is absent: its source is
cut from the copy and a stub of the same name stands in its place, which raises ``RuntimeError("<name> is
not available while grading: <why>")`` when called. Nothing in the student's process can switch the answer
back on, copy its code object or call it from a cell that runs before the graded call: the code is not
there.

Definitions are found by name (``course_grading.names``), wherever they are defined, not by module path:
the library's layout moves, and a name defined twice (a fast path beside the plain one) is cut twice.
A decorator stays on its stub, so a builder registered by name is still registered and refuses by name.

    path = edition({"one_f_one_b": "write 1F1B yourself"})     # .../course_lib (a cached copy), with
                                                               # .../course_assignments beside it
"""

from __future__ import annotations

import ast
import compileall
import hashlib
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

from course_grading.names import STUDENT_PACKAGES, Found, definitions, matches, walk


def cache() -> Path:
    """Where editions are kept: the grader's own cache folder, never a shared one such as /tmp (where
    anyone could plant a folder under the name an edition would take)."""
    home = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(home) / "course-grading" / "editions"


def refusal(qualname: str, why: str) -> str:
    return f"{qualname} is not available while grading: {why}"


def _stub(found: Found, why: str, lines: list[str]) -> list[str]:
    """The stub's lines for one definition, at its indentation, its decorators kept."""
    node = found.node
    indent = " " * node.col_offset
    decorators = [indent + "@" + ast.unparse(d) for d in node.decorator_list]
    message = refusal(found.qualname, why)
    if isinstance(node, ast.ClassDef):
        body = [f"{indent}class {node.name}:", f"{indent}    def __init__(self, *args, **kwargs):",
                f"{indent}        raise RuntimeError({message!r})"]  # fmt: skip
    else:
        kind = "async def" if isinstance(node, ast.AsyncFunctionDef) else "def"
        body = [f"{indent}{kind} {node.name}({ast.unparse(node.args)}):",
                f"{indent}    raise RuntimeError({message!r})"]  # fmt: skip
    return [line + "\n" for line in decorators + body]


def stubbed(text: str, left_out: Mapping[str, str], path: Path = Path("<cell>")) -> str:
    """`text` (a module's or a cell's source) with each definition `left_out` names replaced by its stub."""
    found = []
    tree = ast.parse(text)
    for qualname, node in walk(tree.body, ""):
        whys = [why for name, why in left_out.items() if matches(qualname, name)]
        if whys:
            found.append((Found(path, qualname, node), whys[0]))
    return _replace(text, found)


def _replace(text: str, found: list[tuple[Found, str]]) -> str:
    lines = text.splitlines(keepends=True)
    spans = []
    for item, why in found:
        node = item.node
        start = min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1
        spans.append((start, node.end_lineno or node.lineno, item, why))
    spans.sort(key=lambda s: (s[0], -s[1]))
    kept, reach = [], -1
    for span in spans:  # a method inside a class that is left out whole goes with its class
        if span[0] >= reach:
            kept.append(span)
            reach = span[1]
    for start, end, item, why in reversed(kept):
        lines[start:end] = _stub(item, why, lines)
    return "".join(lines)


def _import_time_calls(tree: ast.Module, names: set[str]) -> list[ast.Call]:
    """Calls of a left-out name that run when the module is imported (module level, class bodies,
    defaults and decorators), not inside a function's body."""
    calls, todo = [], list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            todo += [*node.decorator_list, *node.args.defaults, *(d for d in node.args.kw_defaults if d)]
            continue
        if isinstance(node, ast.Lambda):
            continue
        if isinstance(node, ast.Call):
            func = node.func
            called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if called in names:
                calls.append(node)
                continue
        todo += list(ast.iter_child_nodes(node))
    return calls


def _frozen(path: Path, copy_root: Path, text: str, names: set[str]) -> str:
    """`text` with each import-time call of a left-out function replaced by the value it has in the real
    library (a module-wide constant such as a preset link's latency): the module still imports, and the
    function itself is not there."""
    calls = _import_time_calls(ast.parse(text), names)
    if not calls:
        return text
    import importlib

    relative = path.relative_to(copy_root.parent).with_suffix("")
    parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
    real = vars(importlib.import_module(".".join(parts)))  # the grader's own, whole library
    lines = text.splitlines(keepends=True)
    for call in sorted(calls, key=lambda c: (c.lineno, c.col_offset), reverse=True):
        value = eval(compile(ast.Expression(call), str(path), "eval"), dict(real))  # noqa: S307
        if type(value) not in (int, float, str, bool, tuple) or ast.literal_eval(repr(value)) != value:
            raise ValueError(f"{path}:{call.lineno}: cannot freeze {ast.unparse(call)} = {value!r}")
        first, last = call.lineno - 1, (call.end_lineno or call.lineno) - 1
        head, tail = lines[first][: call.col_offset], lines[last][call.end_col_offset :]
        lines[first : last + 1] = [head + repr(value) + tail]
    return "".join(lines)


def _data(sources: tuple[Path, ...]) -> Path:
    """The data files the library reads from beside itself (the corpus, the sites)."""
    return sources[0].parent / "data"


def _key(sources: tuple[Path, ...], left_out: Mapping[str, str]) -> str:
    digest = hashlib.sha256(repr(sorted(left_out.items())).encode())
    for source in (*sources, _data(sources)):
        for path in sorted(source.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                digest.update(str(path.relative_to(source.parent)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:20]


def edition(left_out: Mapping[str, str], sources: tuple[Path, ...] = STUDENT_PACKAGES) -> Path:
    """A copy of each package in `sources` (course_lib, course_assignments), side by side, with every
    definition `left_out` names ({name: why}) replaced by its stub, compiled for where the sandbox mounts
    it (the package's own path), readable by everyone and cached by content. Returns the copy of the first
    package (course_lib); the others are beside it, and a copy of ``data/`` too. A copy, not a link: the
    cache outlives the checkout that built it, and a link into a deleted clone (or one that two graders
    make at once) is what broke a run before."""
    folder = cache()
    target = folder / _key(sources, left_out)
    if target.exists():
        return target / sources[0].name
    folder.mkdir(mode=0o755, parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="building-", dir=folder))
    functions = {name.rsplit(".", 1)[-1] for name in left_out}
    for source in sources:
        copy = work / source.name
        shutil.copytree(source, copy, ignore=shutil.ignore_patterns("__pycache__"))
        by_file: dict[Path, list[tuple[Found, str]]] = {}
        for item in definitions(copy, left_out):
            why = next(w for name, w in left_out.items() if matches(item.qualname, name))
            by_file.setdefault(item.path, []).append((item, why))
        for path in copy.rglob("*.py"):
            text = path.read_text()
            if any(name in text for name in functions):
                text = _frozen(path, copy, text, functions)
            path.write_text(_replace(text, by_file.get(path, [])))
        # compiled ahead (the sandbox cannot write there), tracebacks naming the mounted path
        compileall.compile_dir(str(copy), ddir=str(source), quiet=2, workers=1)
    if _data(sources).is_dir():
        shutil.copytree(_data(sources), work / "data", ignore=shutil.ignore_patterns("__pycache__"))
    for dirpath, _dirs, files in os.walk(work):
        os.chmod(dirpath, 0o755)
        for name in files:
            os.chmod(os.path.join(dirpath, name), 0o644)
    try:
        work.rename(target)
    except OSError:  # another grader built the same edition meanwhile: use theirs
        shutil.rmtree(work, ignore_errors=True)
    return target / sources[0].name


def left_out_here(
    left_out: Mapping[str, str], sources: tuple[Path, ...] = STUDENT_PACKAGES
) -> dict[str, list[str]]:
    """{name: [where it is defined]}: what an edition cuts, for the guide and the tests."""
    found: dict[str, list[str]] = {name: [] for name in left_out}
    for source in sources:
        for item in definitions(source, left_out):
            for name in left_out:
                if matches(item.qualname, name):
                    found[name].append(f"{item.path.relative_to(source.parent)}:{item.qualname}")
    return found
