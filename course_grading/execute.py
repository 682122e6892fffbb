"""nbgrader's autograde with the student's code behind a wall: the preprocessor that replaces ``Execute``.

nbgrader's own ``Execute`` runs a whole submission in one kernel, test cells included, so a student's
code can switch the tests off, read the caller's frame, or open the gradebook. Here, in ``nbgrader
autograde`` itself (nbgrader_config.py lists it in ``Autograde.autograde_preprocessors``):

- which cells are the instructor's is read from the gradebook (the release's cells: their ids and
  sources), never from the submitted notebook's metadata; a cell is the instructor's only where its id
  is one of those, the first time it appears, and then its source is the gradebook's;
- the student's cells run in a sandbox (``course_grading.sandbox``: bubblewrap, no network, no course
  directory); what they compute reaches the tests only as plain data;
- the instructor's locked cells run there too (the student's code may use what they define), and again
  here, in the grader's process, which is where their outputs shown in the feedback come from;
- the test cells run only here. A name the student's cells define reaches them as plain data, or, for
  a function, as a stand-in whose calls run in a sandbox whose library is the grading edition
  (``course_grading.edition``) that leaves out what that function may not use
  (``course_grading.switched_off``): started when first called, the student's cells replayed in it, so
  nothing a cell computed with an answer reaches the graded call; they hand back plain data;
  no student name may take a name the instructor's cells bind, a builtin, or a private name;
- a rank function (assignment a04c) runs on real processes: its module is cut from the student's cells
  as the grader ran them (``function_source``) and run in a sandbox started for it alone, with its
  grading edition (``Editions.ranks``); the runs come back as plain data, and a check passed in some
  hidden cases earns that share of its points (nbgrader's partial credit, with its verdict line). The
  instructor's ranks beside it seal what they observed with a key made here for the request, which
  reaches only their processes (``course_grading/sealed_ranks.py``); a report whose seal does not
  hold here counts as one that saw nothing (``sealed_ranks.mark_seals``);
- the submission has a wall clock (``submission_s``) over all its sandboxes: past it, nothing of the
  student's runs, and the cell where it ran out says so;
- a hidden test shows only a verdict line: its check's message without numbers or arguments, or that the
  student's function raised; nothing it printed.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import io
import re
import secrets
import traceback
from dataclasses import dataclass, replace
from typing import Any

from nbformat import NotebookNode, from_dict
from traitlets import Bool, Float, Integer

from course_assignments.rank_checks import PartialCredit
from course_grading import plain
from course_grading.edition import edition, stubbed
from course_grading.sandbox import Budget, Limits, Sandbox, StudentError, unavailable
from course_grading.sealed_ranks import mark_seals
from course_grading.switched_off import table

try:
    from nbgrader.preprocessors import NbGraderPreprocessor
except ImportError:  # nbgrader is in the dev extra; without it nothing here is used
    NbGraderPreprocessor = object  # type: ignore[misc,assignment]


def _raised(ename: str) -> type[Exception]:
    """An exception class named like the student's (never AssertionError itself: that is a failed check)."""
    name = "".join(ch for ch in ename if ch.isalnum() or ch == "_")[:40] or "Error"
    return type(name, (Exception,), {})


_FRAME = re.compile(r'File "<your cell (\d+)>", line (\d+)[^\n]*\n(?:\s+(.*)\n)?')


def where(traceback_text: str) -> str:
    """' (your cell 5, line 2: `return x[p]`)': the last line of the student's own code in a traceback."""
    frames = _FRAME.findall(traceback_text or "")
    if not frames:
        return ""
    cell, line, code = frames[-1]
    return f" (your cell {cell}, line {line}" + (f": `{code.strip()[:80]}`)" if code else ")")


@dataclass(frozen=True)
class InstructorCell:
    source: str
    test: bool  # a graded test cell: runs only in the grader's process


def instructor_cells(db_url: str, notebook: str, assignment: str) -> dict[str, InstructorCell]:
    """The release's code cells that are the instructor's ({grade_id: cell}), read from the gradebook:
    every locked cell and every test, not the student's answer cells."""
    from nbgrader.api import Gradebook

    with Gradebook(db_url) as gb:
        found = gb.find_notebook(notebook, assignment)
        answers = {cell.name for cell in found.solution_cells}
        tests = {cell.name for cell in found.grade_cells if cell.cell_type == "code"}
        return {
            cell.name: InstructorCell(cell.source, cell.name in tests)
            for cell in found.source_cells
            if cell.cell_type == "code" and cell.name not in answers
        }


def bound_names(source: str) -> set[str]:
    """Every name `source` binds at any depth (assignments, defs, classes, imports, loop targets)."""
    from IPython.core.inputtransformer2 import TransformerManager

    try:
        tree = ast.parse(TransformerManager().transform_cell(source))
    except SyntaxError:
        return set()
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
    return names


class StudentFunction:
    """Stands, in the grader, for a function the student wrote; calling it calls theirs in the sandbox
    whose edition leaves out what this function may not use."""

    def __init__(self, boxes: Editions, name: str) -> None:
        self.boxes, self.__name__ = boxes, name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        try:
            return self.boxes.call(self.__name__, args, kwargs)
        except StudentError as err:
            if err.ename == "NotImplementedError":
                raise NotImplementedError() from None
            raise _raised(err.ename)(err.evalue + where(err.traceback)) from None

    def run_ranks(self, cases: list, stall_s: float) -> list:
        """A rank function's runs on real processes (assignment a04c): in a fresh sandbox, its source cut
        from the student's cells (``Editions.ranks``); plain data per case. The grader's stall limit
        (``SandboxedExecute.rank_stall_s``) stands for the one asked."""
        __tracebackhide__ = True
        try:
            return self.boxes.ranks(self.__name__, cases)
        except StudentError as err:
            raise _raised(err.ename)(err.evalue + where(err.traceback)) from None

    def __repr__(self) -> str:
        return f"<your function {self.__name__}>"


def function_source(name: str, sources: list[str]) -> str | None:
    """A module holding `name` as the student's cells define it: the imports at the top of every cell (in
    order) and the last top-level ``def name`` among them, each as its cell wrote it. Read from the cells
    the grader ran, not from an object in the student's process."""
    from IPython.core.inputtransformer2 import TransformerManager

    imports, found = [], None
    for source in sources:
        try:
            text = TransformerManager().transform_cell(source)
            tree = ast.parse(text)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                imports.append(ast.get_source_segment(text, node) or "")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1
                found = "".join(text.splitlines(keepends=True)[start : node.end_lineno])
    if found is None:
        return None
    return "import torch\nimport torch.distributed as dist\n" + "\n".join(imports) + "\n\n\n" + found


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


class Editions:
    """The submission's sandboxes: one for its cells, with the whole library (what a cell computes there
    reaches the tests only as plain data, and the values asked for have no answer to cut), and one per set
    of names a graded function may not use, whose edition leaves them out, started when that function is
    first called with the cells run so far replayed in it, and given each later cell before the next call:
    so whatever a cell computes for a graded function is computed again without the answers. All share
    the submission's wall clock."""

    def __init__(
        self, assignment: str, limits: Limits, contained: bool, budget: Budget, rank_stall_s: float = 10.0,
        rank_cases: int = 0,
    ) -> None:  # fmt: skip
        self.table, self.limits, self.contained, self.budget = table(assignment), limits, contained, budget
        self.rank_stall_s, self.rank_cases = rank_stall_s, rank_cases
        self.cells: list[tuple[str, bool]] = []  # (source, the instructor's?) as run: replayed in the others
        # every edition is written now, before any test runs (a check may have switched a library function
        # off in this process while it calls the student's, and an edition reads the library's constants)
        self.editions = {self._key(off): edition(off) for off in self.table.values() if off}
        self.main = Sandbox(limits, library=None, contained=contained, budget=budget)
        self.others: dict[tuple, Sandbox] = {}
        self.replayed: dict[tuple, int] = {}  # how many of the cells each other sandbox has run

    @staticmethod
    def _key(off: dict[str, str]) -> tuple:
        return tuple(sorted(off.items()))

    def _box(self, left_out: dict[str, str]) -> Sandbox:
        library = self.editions.get(self._key(left_out))
        return Sandbox(self.limits, library=library, contained=self.contained, budget=self.budget)

    def __enter__(self) -> Editions:
        self.main._start()
        return self

    def __exit__(self, *exc: object) -> None:
        for box in [self.main, *self.others.values()]:
            box.close()

    @staticmethod
    def _cut(source: str, instructors: bool, left_out: dict[str, str]) -> str:
        """A locked cell's own tools that measure an answer (named in the table) cut like the library's."""
        if not instructors or not left_out:
            return source
        from IPython.core.inputtransformer2 import TransformerManager

        try:
            return stubbed(TransformerManager().transform_cell(source), left_out)
        except SyntaxError:
            return source

    def exec(self, source: str, instructors: bool = False) -> tuple[str, dict | None, dict]:
        """Run a cell in the cells' sandbox."""
        ran = len(self.main._cells)
        result = self.main.exec(source)
        if len(self.main._cells) > ran:  # a cell that ended the process is not replayed anywhere
            self.cells.append((source, instructors))
        return result

    def _for(self, name: str) -> Sandbox:
        off = self.table.get(name)
        if off is None:
            return self.main
        key = self._key(off)
        box = self.others.get(key)
        if box is None:
            box = self.others[key] = self._box(dict(off))
        done = self.replayed.get(key, -1)
        if done < len(self.cells):  # the cells run since this sandbox last caught up, run there too
            cut = [self._cut(source, mine, dict(off)) for source, mine in self.cells[max(done, 0) :]]
            if done < 0:
                box._cells = cut
                box.restart()  # the first call: a fresh process; raises StudentError when time is up
            else:
                box.catch_up(cut)  # the same process (no new torch import), the new cells only
            self.replayed[key] = len(self.cells)
        return box  # (one a graded call ended restarts with its kept cells when next called: Sandbox.call)

    def call(self, name: str, args: tuple, kwargs: dict) -> Any:
        return self._for(name).call(name, args, kwargs)

    def ranks(self, name: str, cases: list) -> list:
        """The student's rank function `name` run on each case ((p, m, n_layers, student)) on real
        processes: its module cut from the student's cells (``function_source``) and run in a sandbox
        started for this alone, whose edition leaves out what `name` may not use and in which no cell of
        the student's ran; closed after. Plain data per case (``course_assignments.rank_checks``)."""
        source = function_source(name, [source for source, mine in self.cells if not mine])
        cases = cases[: self.rank_cases] if self.rank_cases > 0 else cases
        if source is None:
            raise StudentError("NameError", f"no cell of yours defines {name}() at its top level")
        # ranks are processes (with their threads): room for p of them. A case waits at most its stall
        # limit for a message, and a correct one takes seconds: the request's clock is the cases' sum and a
        # start-up, and it stops a case that computes without end (rank_checks' LIMIT_S is the backstop)
        per_case = self.rank_stall_s + 25.0
        limits = replace(self.limits, processes=max(self.limits.processes, 256),
                         request_s=len(cases) * per_case + 60.0)  # fmt: skip
        library = self.editions.get(self._key(self.table.get(name) or {}))
        box = Sandbox(limits, library=library, contained=self.contained, budget=self.budget)
        # the instructor's ranks seal their reports with a key made for this request, and a nonce per case
        key, nonces = secrets.token_bytes(32), [secrets.token_hex(8) for _ in cases]
        try:
            box._start()
            cases_data, stall_s = plain.encode(cases), self.rank_stall_s
            reply = box._request({"op": "ranks", "source": source, "cases": cases_data, "stall_s": stall_s,
                                  "key": key.hex(), "nonces": nonces})  # fmt: skip
        finally:
            box.close()
        if not reply.get("ok"):
            error = reply.get("error") or {}
            raise StudentError(str(error.get("ename", "Error"))[:40], str(error.get("evalue", ""))[:2000])
        return mark_seals(plain.decode(reply["value"]), cases, key, nonces)


class _Grader:
    """Runs the instructor's code (locked cells, test cells) here, with stand-ins for the student's names."""

    def __init__(self, reserved: set[str]) -> None:
        import matplotlib

        matplotlib.use("Agg")  # charts are drawn and dropped: the feedback is text
        self.space: dict[str, Any] = {"__name__": "__grader__", "get_ipython": _NoMagic}
        # names no student cell may bind here: every name the instructor's cells bind (read from the
        # gradebook's sources, all of them, before any cell runs) and the builtins the tests call
        self.reserved = reserved | set(dir(builtins)) | {"get_ipython"}

    def run(self, source: str, test: bool, hidden: bool = False) -> list[dict]:
        import matplotlib.pyplot as plt
        from IPython.core.inputtransformer2 import TransformerManager

        out, err = io.StringIO(), io.StringIO()
        outputs: list[dict] = []
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = compile(TransformerManager().transform_cell(source), "<test cell>", "exec")
                exec(code, self.space)  # noqa: S102  the instructor's code, from the gradebook
        except PartialCredit as credit:  # a check passed in some of its cases: its share of the points
            shown = {"output_type": "error", "ename": "AssertionError", "evalue": str(credit)}
            text = str((_anonymous(shown) if hidden else shown)["evalue"])
            # shown as the verdict line, and scored by nbgrader from the cell's value (its partial credit)
            outputs.append(
                {
                    "output_type": "display_data",
                    "metadata": {},
                    "data": {"text/plain": f"partial credit: AssertionError: {text}"},
                }
            )
            outputs.append({"output_type": "execute_result", "metadata": {}, "execution_count": None,
                            "data": {"text/plain": repr(float(credit.points))}})  # fmt: skip
        except Exception as error:  # a failed check (AssertionError) or a broken cell
            lines = traceback.format_exception_only(type(error), error)
            outputs.append({"output_type": "error", "ename": type(error).__name__, "evalue": str(error),
                            "traceback": [] if test else lines})  # fmt: skip
        finally:
            plt.close("all")
        if hidden:  # a hidden test's verdict only: nothing it printed
            return outputs
        text = out.getvalue() + ("" if test else err.getvalue())  # a warning on stderr would zero a test cell
        return ([{"output_type": "stream", "name": "stdout", "text": text}] if text else []) + outputs

    def receive(self, boxes: Editions, names: dict[str, dict]) -> None:
        """The student's new or rebound names, as data or stand-ins (never over a reserved name)."""
        for name, described in names.items():
            if name in self.reserved or name.startswith("_"):
                continue
            if described.get("kind") == "value":
                try:
                    self.space[name] = plain.decode(described.get("data"))
                    continue
                except plain.PlainDataError as err:
                    self.space[name] = Unavailable(name, f"value the grader cannot rebuild ({err})")
                    continue
            if described.get("kind") == "callable":
                self.space[name] = StudentFunction(boxes, name)
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
    """A hidden case's verdict line: its check's message without arguments or numbers (the teaching part
    and the hint stay), or only that the student's function raised."""
    if output.get("output_type") != "error":
        return output
    if output.get("ename") != "AssertionError":  # the student's own error text may echo the hidden case
        ename = output.get("ename")
        evalue = f"a hidden case (other sizes than the one shown) fails: your code raised {ename}"
        return output | {"evalue": evalue, "traceback": []}
    head, sep, hint = str(output.get("evalue", "")).partition(" Hint: ")
    while _CALL.search(head):
        head = _CALL.sub("[…]", head)
    head = _NUMBER.sub("…", head)
    evalue = f"a hidden case (other sizes than the one shown) fails: {head}{sep}{hint}"
    return output | {"evalue": evalue, "traceback": []}


class SandboxedExecute(NbGraderPreprocessor):
    """Autograde's execute step, the student's code in a sandbox and the tests outside it (see above)."""

    timeout = Float(120.0, help="seconds one cell or one graded call may run").tag(config=True)
    submission_s = Float(
        1800.0, help="wall-clock seconds all of one submission's code may run (its cells and graded calls)"
    ).tag(config=True)
    memory_gib = Float(6.0, help="address space of the student's process, GiB").tag(config=True)
    output_chars = Integer(10_000, help="printed output kept per student cell").tag(config=True)
    rank_cases = Integer(
        0, help="a04c: run only the first N cases of a hidden matrix (0: all); to check the grading quickly"
    ).tag(config=True)
    rank_stall_s = Float(
        10.0, help="a04c: seconds a rank of the student's may wait for a message before it is named"
    ).tag(config=True)
    allow_unsandboxed = Bool(False, help="without bubblewrap, run the student's process unconfined").tag(
        config=True
    )

    def preprocess(self, nb: NotebookNode, resources: dict) -> tuple[NotebookNode, dict]:
        info = resources.get("nbgrader", {})
        assignment = info.get("assignment", "")
        instructors = instructor_cells(info["db_url"], info["notebook"], assignment)
        reason = unavailable()
        if reason and not self.allow_unsandboxed:
            raise RuntimeError(f"refusing to run student code without its sandbox: {reason}")
        limits = Limits(memory_bytes=int(self.memory_gib * 2**30), request_s=self.timeout,
                        output_chars=self.output_chars)  # fmt: skip
        reserved = set().union(*(bound_names(c.source) for c in instructors.values()))
        grader, seen = _Grader(reserved), set()
        budget = Budget(self.submission_s)
        with Editions(assignment, limits, contained=reason is None, budget=budget,
                      rank_stall_s=self.rank_stall_s, rank_cases=self.rank_cases) as boxes:  # fmt: skip
            for cell in nb.cells:
                if cell.cell_type != "code":
                    continue
                grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
                mine = instructors.get(grade_id) if grade_id not in seen else None
                seen.add(grade_id)
                if mine is not None:
                    cell.source = mine.source  # the gradebook's, whatever the submission holds
                outputs = self._run(cell.source, mine, boxes, grader, budget)
                cell.outputs = [from_dict(o) for o in outputs]
                cell.execution_count = None
        return nb, resources

    def _run(
        self, source: str, mine: InstructorCell | None, boxes: Editions, grader: _Grader, budget: Budget
    ) -> list[dict]:
        if mine is None:  # the student's: in the sandbox only
            if budget.left() <= 0:
                text = f"not run: {budget.message()}\n"
                return [{"output_type": "stream", "name": "stderr", "text": text}]
            printed, error, names = boxes.exec(source)
            grader.receive(boxes, names)
            return _student_outputs(printed, error)
        if mine.test:  # here only; the visible part first, so that a hidden failure is known
            visible, marker, hidden = source.partition(HIDDEN)
            outputs = grader.run(visible, test=True)
            if marker and not outputs:
                outputs = [_anonymous(o) for o in grader.run(marker + hidden, test=True, hidden=True)]
            return outputs
        if budget.left() > 0:
            boxes.exec(source, instructors=True)  # there too (the student's code may use what it defines)
        return grader.run(source, test=False)
