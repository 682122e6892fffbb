"""The student's side of the wall: runs inside the sandbox, executes the student's cells, answers calls.

Started by ``course_lib.grading.sandbox`` as ``python -m course_lib.grading.worker FD``. Requests arrive
on stdin, one JSON object a line; replies leave on file descriptor FD, one JSON object a line; whatever the
student's code prints goes to stdout / stderr, which the grader reads, caps and shows. Every value that
leaves is plain data (``course_lib.grading.plain``).

- ``{"op": "gate", "functions": ["module:qualname", ...]}``, sent before any student code runs: each of
  these library functions becomes a gate. Its code object is replaced, so a copy the student makes later
  (``types.FunctionType(f.__code__, ...)``, ``functools.partial``, another name) is the gate too.
- ``{"op": "exec", "code": ...}``: run a cell in the student's namespace; reply with the error (if any)
  and what each new or rebound name is: plain data, a function, or something else.
- ``{"op": "call", "name": ..., "args": ..., "kwargs": ..., "off": {"module:qualname": why}}``: call the
  student's function with those gates closed; reply with its value, as plain data, or its error.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import traceback
import types
from typing import Any

from course_lib.grading import plain


class Gates:
    """Library functions that refuse to answer while a graded call has them closed."""

    def __init__(self, space: dict[str, Any]) -> None:
        self.space = space  # the notebook's namespace: where "__main__:name" keys live
        self.real: dict[str, types.FunctionType] = {}
        self.closed: dict[str, str] = {}
        self.pending: list[str] = []  # "__main__:name" keys whose function the notebook has not defined yet

    def _find(self, key: str) -> types.FunctionType | None:
        module, qualname = key.split(":")
        owner: Any = self.space if module == "__main__" else importlib.import_module(module)
        *path, name = qualname.split(".")
        for part in path:
            owner = getattr(owner, part)
        found = owner.get(name) if isinstance(owner, dict) else vars(owner).get(name)
        return getattr(found, "__func__", found)  # a classmethod's function

    def install(self, key: str) -> None:
        fn = self._find(key)
        if fn is None and key.startswith("__main__:"):
            self.pending.append(key)
            return
        if not isinstance(fn, types.FunctionType) or fn.__closure__:
            raise TypeError(f"{key} cannot be switched off: only plain functions without a closure can")
        real = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
        real.__kwdefaults__ = fn.__kwdefaults__
        self.real[key] = real
        fn.__globals__["__course_gate__"] = self.through
        source = f"def gate(*args, **kwargs):\n    return __course_gate__({key!r}, args, kwargs)\n"
        space: dict = {}
        exec(compile(source, f"<gate {key}>", "exec"), space)  # noqa: S102
        fn.__code__ = space["gate"].__code__  # every reference to fn, and every copy made later, is the gate

    def install_pending(self) -> None:
        waiting, self.pending = self.pending, []
        for key in waiting:
            self.install(key)

    def through(self, key: str, args: tuple, kwargs: dict) -> Any:
        if key in self.closed:
            name = key.split(":")[1]
            raise AssertionError(f"{name} is switched off while your code is graded: {self.closed[key]}")
        return self.real[key](*args, **kwargs)


def _error(err: BaseException) -> dict:
    lines = traceback.format_exception(type(err), err, err.__traceback__)
    evalue = str(err)[:4000]
    if isinstance(err, SystemExit):  # sys.exit(3) says only "3"
        evalue = f"sys.exit({err.code!r}) ends the program: a graded function must return its answer instead"
    return {"ename": type(err).__name__, "evalue": evalue, "traceback": "".join(lines)[-8000:]}


class _Shell:
    """What a notebook cell may call as get_ipython(): line magics are accepted and ignored."""

    def run_line_magic(self, *args: object, **kwargs: object) -> None:
        return None

    def run_cell_magic(self, *args: object, **kwargs: object) -> None:
        return None


def _describe(value: Any) -> dict:
    try:
        return {"kind": "value", "data": plain.encode(value)}
    except plain.PlainDataError:
        if callable(value):
            return {"kind": "callable"}
        return {"kind": "other", "type": type(value).__name__}


class Worker:
    def __init__(self) -> None:
        self.space: dict[str, Any] = {"__name__": "__main__", "get_ipython": _Shell}
        self.seen: dict[str, int] = {}
        self.gates = Gates(self.space)
        self.cells = 0

    def gate(self, functions: list[str]) -> dict:
        for key in functions:
            self.gates.install(key)
        return {"ok": True}

    def exec(self, code: str) -> dict:
        from IPython.core.inputtransformer2 import TransformerManager

        self.cells += 1
        error = None
        try:
            source = TransformerManager().transform_cell(code)  # %magics become get_ipython() calls
            exec(compile(source, f"<your cell {self.cells}>", "exec"), self.space)  # noqa: S102
        except (
            BaseException
        ) as err:  # SystemExit and KeyboardInterrupt too: the cell failed, the worker lives
            error = _error(err)
        names = {}
        for name, value in list(self.space.items()):
            if name.startswith("__") or name == "get_ipython" or self.seen.get(name) == id(value):
                continue
            self.seen[name] = id(value)
            names[name] = _describe(value)
        return {"ok": error is None, "error": error, "names": names}

    def call(self, name: str, args: Any, kwargs: Any, off: dict[str, str]) -> dict:
        fn = self.space.get(name)
        if fn is None or not callable(fn):
            return {
                "ok": False,
                "error": {"ename": "NameError", "evalue": f"{name} is not defined", "traceback": ""},
            }
        self.gates.closed = dict(off)
        try:
            value = fn(*plain.decode(args), **plain.decode(kwargs))
            return {"ok": True, "value": plain.encode(value)}
        except BaseException as err:  # sys.exit inside the function fails this call only
            return {"ok": False, "error": _error(err)}
        finally:
            self.gates.closed = {}


def main() -> None:
    replies = os.fdopen(int(sys.argv[1]), "w", buffering=1)  # the pipe the grader reads replies from
    worker, me = Worker(), os.getpid()
    for line in sys.stdin:
        request = json.loads(line)
        op = request.pop("op")
        if op == "quit":
            break
        reply = getattr(worker, op)(**request)
        if os.getpid() != me:  # a process the student's code forked came back here: it must not answer
            os._exit(0)
        try:
            text = json.dumps(reply)
        except (TypeError, ValueError) as err:
            text = json.dumps(
                {"ok": False, "error": {"ename": "PlainDataError", "evalue": str(err), "traceback": ""}}
            )
        sys.stdout.flush()
        sys.stderr.flush()
        replies.write(text + "\n")


if __name__ == "__main__":
    main()
