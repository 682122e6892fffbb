"""The student's side of the wall: runs inside the sandbox, executes the student's cells, answers calls.

Started by ``course_grading.sandbox`` as ``python -m course_grading.worker FD``. Requests arrive
on stdin, one JSON object a line; replies leave on file descriptor FD, one JSON object a line; whatever the
student's code prints goes to stdout / stderr, which the grader reads, caps and shows. Every value that
leaves is plain data (``course_grading.plain``).

- ``{"op": "ready"}``, sent before any student code runs: replies once the worker is up.
- ``{"op": "exec", "code": ...}``: run a cell in the student's namespace; reply with the error (if any)
  and what each new or rebound name is: plain data, a function, or something else.
- ``{"op": "call", "name": ..., "args": ..., "kwargs": ...}``: call the student's function; reply with
  its value, as plain data, or its error.
- ``{"op": "ranks", "source": ..., "cases": ..., "stall_s": ..., "key": ..., "nonces": ...}``: a rank
  function (assignment a04c), sent as a module's source that the grader cut from the student's cells,
  written to this sandbox's /tmp and run on real processes for each case
  (``course_assignments.rank_checks.run_cases``, the instructor's observing ranks, ``peer_ranks.py``,
  beside it where a case says so, each sealing its report with the grader's key and the case's nonce,
  ``sealed_ranks``, in a run closed by ``rank_guard.RankGuard``);
  reply with each run as plain data. The grader sends it to a fresh sandbox in which no cell of the
  student's ran.

Nothing here is trusted by the grader: the student's code may rewrite this module while it runs. The
grader takes only plain data from it, and decides nothing from what it says beyond that data, and
counts what an instructor's rank observed only where its seal holds. The worker is non-dumpable from its
start (``close_to_peers``), and so are the fork server and every rank of a rank run
(``course_grading/rank_guard.py``): the student's rank, the same user in the same sandbox, can
neither ptrace this process nor read its memory, where the key is while the ranks run.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from typing import Any

from course_grading import plain
from course_grading.rank_guard import RankGuard, close_to_peers


def _error(err: BaseException) -> dict:
    """The error as the student should read it: their frames and the library's, none of the worker's."""
    frames = [f for f in traceback.extract_tb(err.__traceback__) if "course_grading" not in f.filename]
    lines = ["Traceback (most recent call last):\n", *traceback.format_list(frames)] if frames else []
    lines += traceback.format_exception_only(type(err), err)
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
        self.cells = 0

    def ready(self) -> dict:
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

    def call(self, name: str, args: Any, kwargs: Any) -> dict:
        fn = self.space.get(name)
        if fn is None or not callable(fn):
            return {
                "ok": False,
                "error": {"ename": "NameError", "evalue": f"{name} is not defined", "traceback": ""},
            }
        try:
            value = fn(*plain.decode(args), **plain.decode(kwargs))
            return {"ok": True, "value": plain.encode(value)}
        except BaseException as err:  # sys.exit inside the function fails this call only
            return {"ok": False, "error": _error(err)}

    def ranks(self, source: str, cases: list, stall_s: float, key: str = "",
              nonces: list | None = None) -> dict:  # fmt: skip
        from course_assignments.rank_checks import run_cases

        path = os.path.join(os.environ.get("TMPDIR", "/tmp"), "your_rank.py")  # noqa: S108  the sandbox's own
        with open(path, "w") as file:
            file.write(source)
        peers = os.path.join(os.path.dirname(os.path.abspath(__file__)), "peer_ranks.py")
        try:
            private = [(bytes.fromhex(key), nonce) for nonce in nonces or []] if key else []
            runs = run_cases(path, cases, float(stall_s), peers, RankGuard(), private)
            return {"ok": True, "value": plain.encode(runs)}
        except BaseException as err:
            return {"ok": False, "error": _error(err)}


def main() -> None:
    close_to_peers()  # before any request: no process of the sandbox may read or drive this one (ptrace)
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
