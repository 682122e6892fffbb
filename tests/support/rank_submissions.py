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
