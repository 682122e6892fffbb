"""PyTorch's own per-rank schedule orders (torch.distributed.pipelining), read as our Schedule IR.

torch's schedule classes (``ScheduleGPipe``, ``Schedule1F1B``, ...) compute every rank's order in
their constructor, as ``pipeline_order``: rank -> list of ``_Action`` (or None for an idle slot).
They read only a few attributes of each stage, so light stand-ins are enough: no process group,
no model, a few milliseconds. Then our validator can read torch's order like any other schedule.

Try it::

    from course_lib.schedules.torch_orders import torch_order
    from course_lib.shelf.validate import check
    theirs = torch_order("Schedule1F1B", p=4, m=6)      # or our name: torch_order("1f1b", 4, 6)
    print(theirs)           # compare with build_schedule("1f1b", 4, 6)
    print(check(theirs))    # [] when the order is valid; otherwise what is wrong, in words

The number of stages (p*v), where each stage lives (torch's ``stage_index_to_group_rank``: loop or
V placement) and whether backward is split into I + W are read off torch's schedule, so every class
whose order our IR can express comes through. Two of torch's forms are rewritten, as
schedules/v_shape.py explains: an ``OVERLAP_F_B`` action (DualPipeV) becomes its sub-actions, forward
first; in a schedule that mixes full backwards B with split ones (I + W), each B becomes I then W.
This leans on torch's private API (``pipeline_order``, ``_Action``); if a torch version moves it,
``torch_order`` raises a CourseError that says so. tests/schedules/test_torch_interop.py records what torch
2.13 produces.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

from course_lib.schedules.v_shape import split_full_backwards
from course_lib.shelf.errors import CourseError, require
from course_lib.shelf.first_schedules import SCHEDULES, resolve_name
from course_lib.shelf.schedule import Action, Kind, Schedule


def _stand_in(p: int, v: int) -> SimpleNamespace:
    # exactly what torch's schedule constructors read from a stage object (rank 0's view)
    return SimpleNamespace(
        num_stages=p * v, group_size=p, group_rank=0, stage_index=0, submod=torch.nn.Identity()
    )


def _torch_class(schedules, name: str) -> type:
    """torch's class for `name`: a class name of torch's, or one of our names with a torch_class."""
    cls = getattr(schedules, name, None)
    if name.startswith("Schedule") and isinstance(cls, type):
        return cls
    try:
        info = SCHEDULES[resolve_name(name)]
    except CourseError:
        raise CourseError(
            f"torch {torch.__version__} has no schedule class {name!r}, and it is none of ours "
            f"({', '.join(SCHEDULES)})"
        ) from None
    require(
        info.torch_class is not None,
        f"schedule {info.name!r} has no class in torch.distributed.pipelining; those that do: "
        + ", ".join(f"{i.name} ({i.torch_class})" for i in SCHEDULES.values() if i.torch_class),
    )
    return getattr(schedules, info.torch_class)


def _compute_actions(rank_order: list, class_name: str) -> list[Action]:
    # None: an idle slot; REDUCE_GRAD, sends and receives are not compute. An overlapped forward and
    # backward (OVERLAP_F_B, DualPipeV) is its sub-actions in torch's order: the forward, then the backward
    compute = [a for a in rank_order if a is not None and a.is_compute_op]
    flat = [sub for a in compute for sub in (a.sub_actions or (a,))]
    unknown = sorted({a.computation_type.value for a in flat} - {k.value for k in Kind})
    require(
        not unknown,
        f"torch's {class_name} uses {', '.join(unknown)} actions, which our IR (F, B, I, W) cannot express",
    )
    return [Action(a.stage_index, Kind(a.computation_type.value), a.microbatch_index) for a in flat]


def torch_schedule(schedule: str, p: int, m: int, v: int | None = None):
    """torch's schedule object for p ranks, m micro-batches and v stages per rank, built on stand-in
    stages (rank 0's view). It holds every rank's ``pipeline_order`` and takes ``_load_csv``.
    `schedule`: a class name of ``torch.distributed.pipelining.schedules``, or one of our names that
    has one (``SCHEDULES[name].torch_class``). `v` None: 1, or 2 for the V-shape classes (their only v)."""
    try:
        from torch.distributed.pipelining import schedules
    except ImportError as err:  # torch built without distributed
        raise CourseError(f"this torch ({torch.__version__}) has no torch.distributed.pipelining") from err
    cls = _torch_class(schedules, schedule)
    if v is None:
        fixed = (i.fixed_virtual for i in SCHEDULES.values() if i.torch_class == cls.__name__)
        v = next((f for f in fixed if f), 1)
    multi = issubclass(cls, schedules.PipelineScheduleMulti)
    require(multi or v == 1, f"torch's {cls.__name__} holds one stage per rank, so v must be 1, got {v}")
    stand_ins = [_stand_in(p, v)] * v
    try:
        return cls(stand_ins if multi else stand_ins[0], m)  # multi-stage classes: this rank's stages
    except ValueError as err:
        raise CourseError(f"torch's {cls.__name__} refuses p={p}, m={m}, v={v}: {err}") from err
    except (AttributeError, TypeError, KeyError) as err:
        raise _api_changed(err) from err


def _api_changed(err: Exception) -> CourseError:
    return CourseError(f"torch {torch.__version__} changed the private pipelining API this reads: {err!r}")


def torch_order(schedule: str, p: int, m: int, v: int | None = None) -> Schedule:
    """Rank-by-rank compute actions of torch's schedule (see torch_schedule for `schedule`) as a
    Schedule named ``torch-<class name>``, with torch's placement of the p*v stages."""
    sched = torch_schedule(schedule, p, m, v)
    name, v = type(sched).__name__, sched._num_stages // p  # the v torch_schedule settled on
    try:
        order = sched.pipeline_order
        # multi-stage classes say where each stage lives (loop or V placement); single: stage s on rank s
        where = getattr(sched, "stage_index_to_group_rank", None) or {s: s for s in range(p)}
        orders = [_compute_actions(order[rank], name) for rank in sorted(order)]
    except (AttributeError, TypeError, KeyError) as err:
        raise _api_changed(err) from err
    kinds = {a.kind for o in orders for a in o}
    split = bool(kinds & {Kind.I, Kind.W})
    if split and Kind.B in kinds:  # DualPipeV: full and split backwards in one schedule
        orders = split_full_backwards(orders)
    placement = [where[s] for s in range(p * v)]
    return Schedule(f"torch-{name}", p * v, m, orders, placement, split_backward=split)
