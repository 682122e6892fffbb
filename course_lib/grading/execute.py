"""nbgrader's autograde with the student's code behind a wall: the preprocessor that replaces ``Execute``.

nbgrader's own ``Execute`` runs a whole submission in one kernel, test cells included, so a student's
code can switch the tests off (an input transformer, a patched ``grading.fail``), read the caller's
frame, or open the gradebook. Here, in ``nbgrader autograde`` itself (nbgrader_config.py lists it in
``Autograde.autograde_preprocessors``):

- the student's answer cells run in a sandbox (``course_lib.grading.sandbox``: bubblewrap, no network,
  no course directory, bounded time, memory and processes);
- the instructor's locked cells run there too (the student's code may use what they define), and again
  here, in the grader's process, which is where their outputs shown in the feedback come from;
- the test cells run only here. A name the student's cells define reaches them as plain data, or, for
  a function, as a stand-in whose calls run in the sandbox with that assignment's library answers
  switched off (``course_lib.grading.switched_off``) and hand back plain data only.

What a student's cell prints is kept up to its limit; a function that exits, crashes, loops or floods
fails its own test with a message, and the sandbox is started again for the next one.
"""

from __future__ import annotations

import contextlib
import io
import re
import traceback
from typing import Any

from nbformat import NotebookNode, from_dict
from traitlets import Bool, Float, Integer

from course_lib.grading import plain
from course_lib.grading.sandbox import Limits, Sandbox, StudentError, unavailable
from course_lib.grading.switched_off import gates, table

try:
    from nbgrader.preprocessors import NbGraderPreprocessor
except ImportError:  # nbgrader is in the dev extra; without it nothing here is used
    NbGraderPreprocessor = object  # type: ignore[misc,assignment]


def _raised(ename: str) -> type[Exception]:
    """An exception class named like the student's (never AssertionError itself: that is a failed check)."""
    name = "".join(ch for ch in ename if ch.isalnum() or ch == "_")[:40] or "Error"
    return type(name, (Exception,), {})


class StudentFunction:
    """Stands, in the grader, for a function the student wrote; calling it calls theirs in the sandbox."""

    def __init__(self, box: Sandbox, name: str, off: dict[str, str]) -> None:
        self.box, self.__name__, self.off = box, name, off

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        try:
            return self.box.call(self.__name__, args, kwargs, off=self.off)
        except StudentError as err:
            if err.ename == "NotImplementedError":
                raise NotImplementedError() from None
            raise _raised(err.ename)(err.evalue) from None

    def __repr__(self) -> str:
        return f"<your function {self.__name__}>"


class Unavailable:
    """A name of the student's whose value cannot cross the wall (a module, a figure, an open file)."""

    def __init__(self, name: str, kind: str) -> None:
        self._message = (
            f"{name} is a {kind} in your notebook; the grader receives only numbers, strings, lists, tuples, "
            "dicts, the course's types, and your functions"
        )

    def __getattr__(self, attribute: str) -> Any:
        raise AssertionError(self._message)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError(self._message)


class _Grader:
    """Runs the instructor's code (locked cells, test cells) here, with stand-ins for the student's names."""

    def __init__(self) -> None:
        import matplotlib

        matplotlib.use("Agg")  # charts are drawn and dropped: the feedback is text
        self.space: dict[str, Any] = {"__name__": "__grader__", "get_ipython": _NoMagic}
        self.own: set[str] = set()  # names the instructor's cells define: no student cell may rebind them

    def run(self, source: str, test: bool) -> list[dict]:
        import matplotlib.pyplot as plt
        from IPython.core.inputtransformer2 import TransformerManager

        before = {k: id(v) for k, v in self.space.items()}
        out, err = io.StringIO(), io.StringIO()
        outputs: list[dict] = []
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = compile(TransformerManager().transform_cell(source), "<test cell>", "exec")
                exec(code, self.space)  # noqa: S102  the instructor's code, restored from the gradebook
        except Exception as error:  # a failed check (AssertionError) or a broken cell
            lines = traceback.format_exception_only(type(error), error)
            outputs.append({"output_type": "error", "ename": type(error).__name__, "evalue": str(error),
                            "traceback": [] if test else lines})  # fmt: skip
        finally:
            plt.close("all")
        self.own |= {k for k, v in self.space.items() if before.get(k) != id(v)}
        text = out.getvalue() + ("" if test else err.getvalue())  # a warning on stderr would zero a test cell
        return ([{"output_type": "stream", "name": "stdout", "text": text}] if text else []) + outputs

    def receive(self, box: Sandbox, names: dict[str, dict], table: dict[str, dict[str, str]]) -> None:
        """The student's new or rebound names, as data or stand-ins (never over the instructor's own)."""
        for name, described in names.items():
            if name in self.own or name.startswith("_"):
                continue
            if described.get("kind") == "value":
                try:
                    self.space[name] = plain.decode(described.get("data"))
                    continue
                except plain.PlainDataError as err:
                    self.space[name] = Unavailable(name, f"value the grader cannot rebuild ({err})")
                    continue
            if described.get("kind") == "callable":
                self.space[name] = StudentFunction(box, name, table.get(name, {}))
            else:
                self.space[name] = Unavailable(name, str(described.get("type", "object"))[:40])


class _NoMagic:
    def run_line_magic(self, *args: object, **kwargs: object) -> None:
        return None

    def run_cell_magic(self, *args: object, **kwargs: object) -> None:
        return None


def _student_outputs(printed: str, error: dict | None) -> list[dict]:
    outputs = [{"output_type": "stream", "name": "stdout", "text": printed}] if printed else []
    if error:
        shown = str(error.get("traceback", ""))[-3000:].splitlines() or [
            f"{error.get('ename')}: {error.get('evalue')}"
        ]
        outputs.append({"output_type": "error", "ename": str(error.get("ename", "Error"))[:40],
                        "evalue": str(error.get("evalue", ""))[:2000], "traceback": shown})  # fmt: skip
    return outputs


HIDDEN = "### BEGIN HIDDEN TESTS"
_CALL = re.compile(r"\([^()]*\)")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def _anonymous(output: dict) -> dict:
    """A hidden case's failure without its arguments or any number: the teaching part and the hint stay."""
    if output.get("output_type") != "error":
        return output
    head, sep, hint = str(output.get("evalue", "")).partition(" Hint: ")
    while _CALL.search(head):
        head = _CALL.sub("[…]", head)
    head = _NUMBER.sub("…", head)
    evalue = f"a hidden case (other sizes than the one shown) fails: {head}{sep}{hint}"
    return output | {"evalue": evalue, "traceback": []}


class SandboxedExecute(NbGraderPreprocessor):
    """Autograde's execute step, the student's code in a sandbox and the tests outside it (see above)."""

    timeout = Float(120.0, help="seconds one cell or one graded call may run").tag(config=True)
    memory_gib = Float(6.0, help="address space of the student's process, GiB").tag(config=True)
    output_chars = Integer(10_000, help="printed output kept per student cell").tag(config=True)
    allow_unsandboxed = Bool(False, help="without bubblewrap, run the student's process unconfined").tag(
        config=True
    )

    def preprocess(self, nb: NotebookNode, resources: dict) -> tuple[NotebookNode, dict]:
        assignment = resources.get("nbgrader", {}).get("assignment", "")
        switched_off = table(assignment)
        reason = unavailable()
        if reason and not self.allow_unsandboxed:
            raise RuntimeError(f"refusing to run student code without its sandbox: {reason}")
        limits = Limits(memory_bytes=int(self.memory_gib * 2**30), request_s=self.timeout,
                        output_chars=self.output_chars)  # fmt: skip
        grader = _Grader()
        with Sandbox(limits, gates=gates(assignment), contained=reason is None) as box:
            for cell in nb.cells:
                if cell.cell_type == "code":
                    cell.outputs = [from_dict(o) for o in self._run(cell, box, grader, switched_off)]
                    cell.execution_count = None
        return nb, resources

    def _run(self, cell: NotebookNode, box: Sandbox, grader: _Grader, table: dict) -> list[dict]:
        info = cell.metadata.get("nbgrader", {})
        # the instructor's: a locked cell nbgrader found in the gradebook (OverwriteCells restored its
        # source, and drops the id of a cell it does not know); everything else is the student's
        instructors = bool(info.get("grade_id") and info.get("locked") and not info.get("solution"))
        if not instructors:  # in the sandbox only
            printed, error, names = box.exec(cell.source)
            grader.receive(box, names, table)
            return _student_outputs(printed, error)
        if info.get("grade"):  # a test: here only; the visible part first, so that a hidden failure is known
            visible, marker, hidden = cell.source.partition(HIDDEN)
            outputs = grader.run(visible, test=True)
            if marker and not outputs:
                outputs = [_anonymous(o) for o in grader.run(marker + hidden, test=True)]
            return outputs
        box.exec(cell.source)  # in both (the student's code may use what it defines); outputs from here
        return grader.run(cell.source, test=False)
