"""PyTorch's own per-rank schedule orders (torch.distributed.pipelining), read as our Schedule IR.

torch's schedule classes (``ScheduleGPipe``, ``Schedule1F1B``, ...) compute every rank's order in
their constructor, as ``pipeline_order``: rank -> list of ``_Action`` (or None for an idle slot).
They read only a few attributes of each stage, so light stand-ins are enough: no process group,
no model, a few milliseconds. Then our validator can read torch's order like any other schedule.

Try it::

    from course_lib.schedules.torch_orders import torch_order
    from course_lib.schedules.validate import check
    theirs = torch_order("Schedule1F1B", p=4, m=6)
    print(theirs)           # compare with build_schedule("1f1b", 4, 6)
    print(check(theirs))    # [] when the order is valid; otherwise what is wrong, in words

This leans on torch's private API (``pipeline_order``, ``_Action``); if a torch version moves it,
``torch_order`` raises a CourseError that says so. tests/test_torch_interop.py records what torch
2.13 produces.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

from course_lib.errors import CourseError
from course_lib.schedules.ir import Action, Kind, Schedule, loop_placement


def _stand_in(p: int, v: int, rank: int) -> SimpleNamespace:
    # exactly what torch's schedule constructors read from a stage object
    return SimpleNamespace(
        num_stages=p * v, group_size=p, group_rank=rank, stage_index=rank, submod=torch.nn.Identity()
    )


def torch_order(class_name: str, p: int, m: int, v: int = 1) -> Schedule:
    """Rank-by-rank compute actions of ``torch.distributed.pipelining.schedules.<class_name>`` for p
    ranks, m micro-batches and v stages per rank, as a Schedule named ``torch-<class_name>``.

    Raises CourseError (naming the class and sizes) if torch refuses the sizes or lacks the API."""
    try:
        from torch.distributed.pipelining import schedules
    except ImportError as err:  # torch built without distributed
        raise CourseError(f"this torch ({torch.__version__}) has no torch.distributed.pipelining") from err
    cls = getattr(schedules, class_name, None)
    if cls is None:
        raise CourseError(f"torch {torch.__version__} has no schedule class {class_name!r}")
    stand_ins = [_stand_in(p, v, 0)] * v
    try:
        # single-stage classes take one stage, multi-stage classes a list of this rank's stages
        sched = cls(stand_ins if v > 1 or "Interleaved" in class_name else stand_ins[0], m)
        order = sched.pipeline_order
    except ValueError as err:
        raise CourseError(f"torch's {class_name} refuses p={p}, m={m}, v={v}: {err}") from err
    except (AttributeError, TypeError, KeyError) as err:
        raise CourseError(
            f"torch {torch.__version__} changed the private pipelining API this reads: {err!r}"
        ) from err
    orders = [
        [
            Action(a.stage_index, Kind(a.computation_type.value), a.microbatch_index)
            for a in order[rank]
            if a is not None and a.is_compute_op  # None: idle slot; REDUCE_GRAD, sends: not compute
        ]
        for rank in sorted(order)
    ]
    return Schedule(f"torch-{class_name}", p, m, orders, loop_placement(p * v, p))
