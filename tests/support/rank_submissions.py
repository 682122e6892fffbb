"""Assignment a04c's submissions that make the common mistakes: the instructor's solution with one line
changed each (tests/grading/test_rank_assignment.py and bench/bench_rank_assignment.py grade them with
nbgrader). Each: (the solution's text, what replaces it, the check it fails, words of its verdict)."""

from __future__ import annotations

import json
from pathlib import Path

from support.assignments import COURSE, grade_info

NAME = "a04c_write_the_pipeline"
ANSWER = "a04c_one_f_one_b"  # the answer cell's grade_id

SEND_ACTIVATION = "pending.append(dist.isend(out.detach(), dst=rank.next))"
SEND_GRADIENT = "pending.append(dist.isend(dx, dst=rank.prev))"
MISTAKES = {
    # both neighbours send first, blocking: each waits in send for the other's receive (a deadlock)
    "wrong order": (
        ((SEND_ACTIVATION, "dist.send(out.detach(), dst=rank.next)"),
         (SEND_GRADIENT, "dist.send(dx, dst=rank.prev)")),
        "no stall",
        "deadlocked: rank 0 waited in send, rank 1 in send",
    ),
    "unscaled": (
        ((" / rank.m\n", "\n"),),
        "loss",
        "m times the reference's: divide each micro-batch's loss",
    ),
    "wrong dtype": (
        (("dtype=rank.dtype, device=rank.device)",
          "dtype=torch.float64 if src == rank.prev else rank.dtype, device=rank.device)"),),
        "buffers",
        "a receive buffer has the sender's shape and dtype",
    ),
    "buffer reused": (
        (("    pending = []", "    pending, keep = [], torch.empty(rank.shape)"),
         (SEND_ACTIVATION,
          "keep.copy_(out.detach())\n            pending.append(dist.isend(keep, dst=rank.next))")),
        "buffers",
        "changed a tensor before its send completed",
    ),
    "backward before its gradient": (
        (("        grad = None if rank.is_last else arrive(rank.next)",
          "        grad = None if rank.is_last else torch.empty(rank.shape)\n"
          "        if grad is not None:\n            pending.append(dist.irecv(grad, src=rank.next))"),),
        "buffers",
        "a backward must not start before its gradient arrived",
    ),
}  # fmt: skip


def solution_source() -> str:
    (notebook,) = (COURSE / "source" / NAME).glob("*.ipynb")
    nb_cells = json.loads(notebook.read_text())["cells"]
    (cell,) = [c for c in nb_cells if grade_info(c).get("grade_id") == ANSWER]
    text = "".join(cell["source"])
    return text.replace("    ### BEGIN SOLUTION\n", "").replace("    ### END SOLUTION", "").rstrip() + "\n"


def mistaken(kind: str) -> str:
    """The solution's answer cell with `kind`'s mistake in it."""
    source = solution_source()
    for old, new in MISTAKES[kind][0]:
        assert old in source, f"{kind}: the solution's {old!r} is not there to replace"
        source = source.replace(old, new)
    return source


def submit(course: Path, student: str, answer: str) -> None:
    """The released notebook with its answer cell replaced by `answer`, as submitted/<student>/<NAME>/."""
    (released,) = (course / "release" / NAME).glob("*.ipynb")
    nb = json.loads(released.read_text())
    for cell in nb["cells"]:
        if grade_info(cell).get("grade_id") == ANSWER:
            cell["source"] = answer
    folder = course / "submitted" / student / NAME
    folder.mkdir(parents=True)
    (folder / released.name).write_text(json.dumps(nb))


# The solution with a cheat before its first line: what a student's rank could try against the instructor's
# ranks beside it (tests/grading/test_sealed_ranks.py). Each runs in the student's rank, first thing.
FIRST_LINE = (
    '    """One rank of 1F1B: warm-up, steady state, cool-down, with its own sends and receives."""\n'
)
CHEATS = {
    # the neighbour's report, forged: every message "ok", put on the launcher's result queue after the
    # neighbour's own (the launcher keeps the last report it reads for a rank)
    "forged report": """    import os, pickle, sys, threading, time
    from multiprocessing.connection import Connection
    from course_lib.lessons.own_rank import RankResult
    frame = sys._getframe()
    while "results" not in frame.f_locals:  # the launcher's queue, in the frame that called us
        frame = frame.f_back
    results, peer = frame.f_locals["results"], (rank.next if rank.next is not None else rank.prev)
    pipe = Connection(os.dup(results._writer.fileno()))  # its own: the queue's closes with the rank's exit
    said = [f"activation {rank.stage} {i} ok" for i in range(rank.m + 1)]  # one more: the forgery's mark
    forged = RankResult(peer, peer, [], [], {}, [], [], [], 0, 0.0, [0.0], said, 0, [0.0])

    def forge():
        time.sleep(2.0)
        results._sem.acquire()  # as put does
        with results._wlock:
            pipe.send_bytes(pickle.dumps(("ok", peer, pickle.dumps(forged))))

    threading.Thread(target=forge).start()  # not a daemon: the process waits for it before it exits
""",
    # the neighbour's, the fork server's and the worker's memory, read through /proc and ptrace; beside
    # them, a child of its own that made itself dumpable ("child": the calls where nothing stops them)
    "memory reader": """    import ctypes, errno, os, signal, time
    libc = ctypes.CDLL(None, use_errno=True)

    def parent(pid):
        return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])

    def probe(name, pid):
        try:
            with open(f"/proc/{pid}/mem", "rb"):
                mem = "opened"
        except OSError as err:
            mem = type(err).__name__
        traced = libc.ptrace(16, pid, 0, 0)  # PTRACE_ATTACH
        how = "attached" if traced == 0 else errno.errorcode[ctypes.get_errno()]
        rank.observed.append(f"probe {name} mem={mem} ptrace={how}")

    me, server = os.getpid(), os.getppid()
    for pid in (int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != me):
        try:
            if parent(pid) == server:
                probe("neighbour", pid)
        except OSError:
            pass
    probe("server", server)
    probe("worker", parent(server))
    child = os.fork()
    if child == 0:
        libc.prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE, 1
        time.sleep(30)
        os._exit(0)
    time.sleep(0.3)
    probe("child", child)
    os.kill(child, signal.SIGKILL)
    os.waitpid(child, 0)
""",
}


def cheating(kind: str, source: str) -> str:
    """`source` (the solution, as a cell or a module) with `kind`'s cheat before its first line."""
    assert FIRST_LINE in source, "the solution's docstring moved: the cheat has no place to go"
    return source.replace(FIRST_LINE, FIRST_LINE + CHEATS[kind], 1)
