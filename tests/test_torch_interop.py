"""Our schedules against torch.distributed.pipelining's own orders (its schedule IR, ``pipeline_order``).

PyTorch's schedule classes compute every rank's order in their constructors. They only read a few
attributes of the stage objects (group size and rank, number of stages, the stage's module), so
light stand-ins are enough: no process group, no model. This leans on private API (``_Action``,
``pipeline_order``, ``_load_csv``); if a future torch moves it the tests skip and say why.

Findings recorded here, for torch 2.13:
- ScheduleGPipe and ScheduleInterleaved1F1B (v = 1, 2, 3) produce exactly our orders, and reject
  exactly the (p, m) our interleaved builder rejects.
- Schedule1F1B's ``pipeline_order`` is defective on its last rank: it runs forwards for micro-batches
  1..m instead of 0..m-1, so F0 of the last stage never runs, F(m) is a micro-batch that does not
  exist, and the last rank's first backward B0 waits forever for that missing F0. Every other rank
  matches ours. (Schedule1F1B's ``_step_microbatches`` runs its own loop, not this list, so the
  defect is in the IR that tools read, not in training.)
- ScheduleInterleavedZeroBubble with one stage per rank produces exactly our ZB-H1 order, where it
  accepts m (it applies the interleaved rounds rule; our ZB-H1 takes any m).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from course_lib.errors import CourseError
from course_lib.schedules.builders import build_schedule
from course_lib.schedules.ir import Action, Kind, Schedule
from course_lib.schedules.torch_csv import read_csv, write_csv
from course_lib.schedules.validate import check

S = pytest.importorskip(
    "torch.distributed.pipelining.schedules", reason="torch without distributed pipelining"
)


def stand_in(p: int, v: int = 1, rank: int = 0) -> SimpleNamespace:
    """What PyTorch's schedule constructors read from a stage, and nothing more."""
    return SimpleNamespace(
        num_stages=p * v, group_size=p, group_rank=rank, stage_index=rank, submod=torch.nn.Identity()
    )


def torch_orders(cls, stages, m: int) -> list[list[Action]] | None:
    """Per-rank compute actions of torch schedule `cls(stages, m)`; None if torch rejects the sizes."""
    try:
        schedule = cls(stages, m)
        order = schedule.pipeline_order
        return [
            [
                Action(a.stage_index, Kind(a.computation_type.value), a.microbatch_index)
                for a in order[rank]
                if a is not None and a.is_compute_op  # None: an idle slot; REDUCE_GRAD etc.: not compute
            ]
            for rank in sorted(order)
        ]
    except ValueError:
        return None
    except (AttributeError, TypeError, KeyError) as err:
        pytest.skip(f"torch {torch.__version__} changed the private pipelining API these tests read: {err!r}")


def test_gpipe_matches_torch():
    for p in range(1, 9):
        for m in range(1, 17):
            assert torch_orders(S.ScheduleGPipe, stand_in(p), m) == build_schedule("gpipe", p, m).orders


def test_interleaved_1f1b_matches_torch_including_which_sizes_it_rejects():
    compared = 0
    for v in (1, 2, 3):
        for p in range(1, 7):
            for m in range(1, 13):
                theirs = torch_orders(S.ScheduleInterleaved1F1B, [stand_in(p, v)] * v, m)
                try:
                    ours = build_schedule("interleaved-1f1b", p, m, v).orders
                except CourseError:
                    ours = None
                assert theirs == ours, (p, m, v)
                compared += ours is not None
    assert compared > 150  # most of the grid really was compared, not just rejected on both sides


def test_zero_bubble_one_stage_per_rank_is_our_zb_h1():
    compared = 0
    for p in range(1, 7):
        for m in range(1, 13):
            theirs = torch_orders(S.ScheduleInterleavedZeroBubble, [stand_in(p)], m)
            if theirs is not None:
                assert theirs == build_schedule("zb-h1", p, m).orders, (p, m)
                compared += 1
    assert compared > 40


def torch_1f1b(p: int, m: int) -> Schedule:
    orders = torch_orders(S.Schedule1F1B, stand_in(p), m)
    assert orders is not None
    return Schedule("torch-1f1b", p, m, orders, list(range(p)))


def test_torch_1f1b_last_rank_is_defective_and_the_validator_says_how():
    assert torch_orders(S.Schedule1F1B, stand_in(4), 3) is None  # torch asks for m >= p
    theirs = torch_1f1b(4, 6)
    assert " ".join(map(str, theirs.orders[3])) == "3F1 3B0 3F2 3B1 3F3 3B2 3F4 3B3 3F5 3B4 3F6 3B5"
    assert check(theirs) == [
        "device 3 runs 3F6, but micro-batch 6 does not exist (m=6, so micro-batches are 0..5)",
        "3F0 (stage 3's forward of micro-batch 0) is missing: device 3 holds stage 3 and must run it once",
        "deadlock: device 0 is stuck at 0B0: it needs 1B0 (stage 1's backward for micro-batch 0), "
        "which device 1 cannot run yet either (see device 1)",
        "deadlock: device 1 is stuck at 1B0: it needs 2B0 (stage 2's backward for micro-batch 0), "
        "which device 2 cannot run yet either (see device 2)",
        "deadlock: device 2 is stuck at 2B0: it needs 3B0 (stage 3's backward for micro-batch 0), "
        "which device 3 cannot run yet either (see device 3)",
        "deadlock: device 3 is stuck at 3B0: it needs 3F0 (stage 3's forward of micro-batch 0), "
        "which no device runs",
    ]


def test_torch_1f1b_defect_over_the_grid():
    for p in range(1, 9):
        for m in range(p, 17):
            theirs, ours = torch_1f1b(p, m), build_schedule("1f1b", p, m)
            last = p - 1
            assert theirs.orders[:last] == ours.orders[:last], (p, m)  # every other rank is right
            # the last rank's forwards are shifted by one micro-batch: 1..m instead of 0..m-1
            shifted = [Action(a.stage, a.kind, a.microbatch + (a.kind is Kind.F)) for a in ours.orders[last]]
            assert theirs.orders[last] == shifted, (p, m)
            problems = check(theirs)
            assert problems[:2] == [
                f"device {last} runs {last}F{m}, but micro-batch {m} does not exist "
                f"(m={m}, so micro-batches are 0..{m - 1})",
                f"{last}F0 (stage {last}'s forward of micro-batch 0) is missing: device {last} holds stage "
                f"{last} and must run it once",
            ]
            assert problems[-1] == (
                f"deadlock: device {last} is stuck at {last}B0: it needs {last}F0 "
                f"(stage {last}'s forward of micro-batch 0), which no device runs"
            )


def test_torch_loads_our_csv_and_we_load_torchs(tmp_path):
    ours = build_schedule("interleaved-1f1b", 2, 4, virtual=2)
    write_csv(ours, tmp_path / "ours.csv")
    theirs = S.ScheduleInterleaved1F1B([stand_in(2, 2)] * 2, 4)
    try:
        theirs._load_csv(str(tmp_path / "ours.csv"))  # runs torch's own schedule validation too
        theirs._dump_csv(str(tmp_path / "theirs.csv"), format="compute_only")
    except (AttributeError, TypeError) as err:
        pytest.skip(f"torch {torch.__version__} changed _load_csv/_dump_csv: {err!r}")
    assert [[str(a) for a in theirs.pipeline_order[r]] for r in (0, 1)] == [
        [str(a) for a in order] for order in ours.orders
    ]
    assert theirs.stage_index_to_group_rank == {0: 0, 1: 1, 2: 0, 3: 1}
    back = read_csv(tmp_path / "theirs.csv")
    assert back.orders == ours.orders and back.stage_to_device == ours.stage_to_device
