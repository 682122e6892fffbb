"""What a failed run's message adds: the likely reason, where an input of the run points to one.

A room beside the distributed engine's ``launch`` (``course_lib/shelf/distributed_engine.py``), which
passes a failed run's DistributedError through ``FAILURE_HINTS``; importing this module
(``course_lib.engines`` does, so ``course_lib.lesson`` and the command line load it) registers two there:

- a rank died before it could report while this process runs a script: the script may start its run when
  imported, with no ``if __name__ == "__main__":`` guard (``naming_a_missing_guard``);
- a run timed out and its links have a latency: a micro-batch pays it at every boundary, one after
  another, against the timeout (``naming_slow_links``).

Each returns the error unchanged where its case does not apply, so the message of any other failure is
the launcher's own.
"""

from __future__ import annotations

import sys

from course_lib.shelf.distributed_engine import FAILURE_HINTS
from course_lib.shelf.launcher import DistributedError
from course_lib.shelf.run_spec import RunSpec


def with_hint(err: DistributedError, hint: str) -> DistributedError:
    """The same failure, its message followed by `hint`."""
    named = DistributedError(f"{err}; {hint}", err.failed_rank, err.cause, err.outcomes)
    named.stopped_after_s = err.stopped_after_s
    return named


def naming_a_missing_guard(err: DistributedError, *_) -> DistributedError:
    """`err` with a hint when a rank died before it could report and this process runs a script: the
    spawn and forkserver start methods import that script again in every rank, and one without an
    ``if __name__ == "__main__":`` guard starts its run again there, which multiprocessing refuses
    (its traceback goes to this terminal, not to the rank log)."""
    main = sys.modules.get("__main__")
    script = getattr(main, "__spec__", None) is None and hasattr(main, "__file__")  # python path/to/x.py
    if not (script and "exit code 1 without reporting" in err.cause):
        return err
    hint = f'if {main.__file__} starts the run when imported, put its code under `if __name__ == "__main__":`'
    return with_hint(err, f"{hint}, as every rank imports the script again")


def naming_slow_links(err: DistributedError, specs: list[RunSpec], timeout_s: float) -> DistributedError:
    """`err` saying which input made a timed-out run slow, when its links have a latency: a micro-batch's
    forward and backward cross 2(n-1) boundaries one after another, each paying it, against the timeout."""
    waits = [(link.latency_s, 2 * (s.schedule.n_stages - 1)) for s in specs for link in s.links or ()]
    latency, messages = max(waits, default=(0.0, 0))
    timed_out = any(w in err.cause for w in ("stopped answering", "imed out", "timeout"))
    if not (timed_out and latency > 0):
        return err
    return with_hint(
        err,
        f"the links' latency of {latency:g} s, paid by {messages} messages one after another "
        f"({latency * messages:g} s for one micro-batch), against the timeout of {timeout_s:g} s may be what "
        "made it slow: raise --timeout (timeout_s) or lower --latency",
    )


for _hint in (naming_a_missing_guard, naming_slow_links):
    if _hint not in FAILURE_HINTS:
        FAILURE_HINTS.append(_hint)
