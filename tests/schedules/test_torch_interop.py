"""Our schedules against torch.distributed.pipelining's own orders (its schedule IR, ``pipeline_order``).

PyTorch's schedule classes compute every rank's order in their constructors. They only read a few
attributes of the stage objects (group size and rank, number of stages, the stage's module), so
light stand-ins are enough: no process group, no model. The tests call the library's
``torch_order`` / ``torch_schedule``, which lean on private API (``_Action``, ``pipeline_order``,
``_load_csv``); if a future torch moves it the tests skip and say why.

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
- ScheduleInterleavedZeroBubble (v=2), ScheduleLoopedBFS, ScheduleZBVZeroBubble and ScheduleDualPipeV
  (V placement) give orders our validator accepts. DualPipeV overlaps F and B (OVERLAP_F_B) and mixes B
  with I + W: torch_order writes an overlap as its sub-actions (F first) and each B as I then W
  (schedules/v_shape.py); tests/schedules/test_schedules_vshape.py compares ZB-V and DualPipeV with ours.
"""

from __future__ import annotations

import pytest
import torch
from support.torch_orders import ours_or_none, same, theirs_or_none

from course_lib.schedules.torch_csv import read_csv, write_csv
from course_lib.schedules.torch_orders import torch_order, torch_schedule
from course_lib.shelf.errors import CourseError
from course_lib.shelf.first_schedules import build_schedule
from course_lib.shelf.schedule import Action, Kind
from course_lib.shelf.validate import check

pytest.importorskip("torch.distributed.pipelining.schedules", reason="torch without distributed pipelining")








def test_gpipe_matches_torch():
    for p in range(1, 9):
        for m in range(1, 17):
            theirs = torch_order("ScheduleGPipe", p, m)
            assert same(theirs, build_schedule("gpipe", p, m)) and check(theirs) == [], (p, m)


def test_interleaved_1f1b_matches_torch_including_which_sizes_it_rejects():
    """Fails before torch_order read p*v stages and torch's placement: the validator rejected v > 1."""
    compared = 0
    for v in (1, 2, 3):
        for p in range(1, 7):
            for m in range(1, 13):
                theirs = theirs_or_none("ScheduleInterleaved1F1B", p, m, v)
                assert same(theirs, ours_or_none("interleaved-1f1b", p, m, v)), (p, m, v)
                if theirs is not None:
                    assert check(theirs) == [], (p, m, v)
                    compared += 1
    assert compared > 150  # most of the grid really was compared, not just rejected on both sides


def test_zero_bubble_one_stage_per_rank_is_our_zb_h1():
    """Fails before torch_order set split_backward: the validator rejected every I and W."""
    compared = 0
    for p in range(1, 7):
        for m in range(1, 13):
            theirs = theirs_or_none("ScheduleInterleavedZeroBubble", p, m)
            if theirs is not None:
                assert same(theirs, build_schedule("zb-h1", p, m)), (p, m)
                assert check(theirs) == [], (p, m)
                compared += 1
    assert compared > 40


@pytest.mark.parametrize(
    "name, v, placement",
    [
        ("ScheduleInterleavedZeroBubble", 2, [0, 1, 2, 3, 0, 1, 2, 3]),
        ("ScheduleLoopedBFS", 2, [0, 1, 2, 3, 0, 1, 2, 3]),
        ("ScheduleZBVZeroBubble", 2, [0, 1, 2, 3, 3, 2, 1, 0]),  # V placement: stages 0 and 7 on rank 0
        ("ScheduleDualPipeV", 2, [0, 1, 2, 3, 3, 2, 1, 0]),
    ],
)
def test_torchs_multi_stage_classes_come_through_valid(name, v, placement):
    for m in (4, 8, 12) if "DualPipe" not in name else (8, 12):  # DualPipeV: m >= 2p
        theirs = torch_order(name, 4, m, v)
        assert theirs.stage_to_device == placement and theirs.n_stages == 8
        assert theirs.split_backward == ("ZeroBubble" in name or "DualPipe" in name)
        assert check(theirs) == [], (name, m)


def test_our_names_reach_the_registered_torch_class_and_the_rest_is_refused():
    by_our_name = torch_order("interleaved", 2, 4, 2)
    assert by_our_name.orders == torch_order("ScheduleInterleaved1F1B", 2, 4, 2).orders
    assert torch_order("zb-h1", 3, 6).name == "torch-ScheduleInterleavedZeroBubble"
    with pytest.raises(CourseError, match="'latency-aware-1f1b' has no class in torch"):
        torch_order("latency-aware-1f1b", 2, 4)
    overlapped = torch_order("ScheduleDualPipeV", 4, 8)  # v: 2, the only one V shapes take
    assert overlapped.n_stages == 8 and check(overlapped) == []  # OVERLAP_F_B written as its sub-actions
    with pytest.raises(CourseError, match="one stage per rank, so v must be 1, got 2"):
        torch_order("gpipe", 2, 4, 2)
    with pytest.raises(CourseError, match="refuses p=4, m=8, v=3: ZBV requires exactly 2"):
        torch_order("ScheduleZBVZeroBubble", 4, 8, 3)
    with pytest.raises(CourseError, match="no schedule class 'ScheduleNope'"):
        torch_order("ScheduleNope", 2, 2)


def torch_1f1b(p: int, m: int):
    return torch_order("Schedule1F1B", p, m)


def test_torch_1f1b_last_rank_is_defective_and_the_validator_says_how():
    assert theirs_or_none("Schedule1F1B", 4, 3) is None  # torch asks for m >= p
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
    theirs = torch_schedule("ScheduleInterleaved1F1B", 2, 4, 2)
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
