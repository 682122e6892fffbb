"""Looped BFS, interleaved zero bubble and ZB-H2: PyTorch's orders, CSV round trips, closed forms,
simulation, and real training on both engines against the single-device reference.

Findings recorded here, for torch 2.13:
- ScheduleLoopedBFS produces exactly our looped-bfs order for every p, m and v on the grid, and
  refuses none of them (neither do we: breadth first needs no rounds rule).
- ScheduleInterleavedZeroBubble (v = 1, 2, 3) produces exactly our interleaved-zb order and refuses
  exactly the (p, m) we refuse: m must be a multiple of max(1, m // p), as for interleaved 1F1B.
  At v = 1 it is ZB-H1; zb-h1 itself takes any m (the rounds rule plays no part with one stage per
  device), so only the class *name* belongs to interleaved-zb.
- torch has no ZB-H2 class; torch's ScheduleInterleavedZeroBubble loads our ZB-H2 order from CSV
  (running torch's own schedule validation) and dumps it back unchanged.
"""

from __future__ import annotations

import pytest
import torch
from support.distributed_runs import assert_matches_reference, specs_for
from support.torch_orders import ours_or_none, same, theirs_or_none

from course_lib.lessons.compare_schedules import idle_inside
from course_lib.schedules.closed_forms import Case
from course_lib.schedules.torch_csv import from_csv_text, read_csv, to_csv_text, write_csv
from course_lib.schedules.torch_orders import torch_order, torch_schedule
from course_lib.shelf.costs import Link, StageCosts
from course_lib.shelf.distributed_engine import launch
from course_lib.shelf.errors import CourseError
from course_lib.shelf.first_schedules import SCHEDULES, build_schedule, resolve_name
from course_lib.shelf.local_engine import LocalPipelineTrainer
from course_lib.shelf.reference import TrainConfig, max_grad_diff, reference_gradients
from course_lib.shelf.simulator import simulate
from course_lib.shelf.validate import check

pytest.importorskip("torch.distributed.pipelining.schedules", reason="torch without distributed pipelining")

FAMILY = ("looped-bfs", "interleaved-zb", "zb-h2")


# ---- orders equal PyTorch's ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, cls, rounds_rule",
    [("looped-bfs", "ScheduleLoopedBFS", False), ("interleaved-zb", "ScheduleInterleavedZeroBubble", True)],
)
def test_orders_equal_torchs_including_the_sizes_it_refuses(name, cls, rounds_rule):
    compared = rejected = 0
    for v in (1, 2, 3):
        for p in range(1, 7):
            for m in range(1, 13):
                theirs = theirs_or_none(cls, p, m, v)
                assert same(theirs, ours_or_none(name, p, m, v)), (p, m, v)
                if theirs is None:
                    rejected += 1
                    continue
                assert check(theirs) == [], (p, m, v)
                compared += 1
    # the rounds rule (m a multiple of max(1, m // p)) breaks 10 (p, m) pairs of this grid, at every v;
    # breadth first has no rounds, and torch refuses no size of it
    breaking = sum(1 for p in range(1, 7) for m in range(1, 13) if m % max(1, m // p))
    assert breaking == 10 and rejected == (3 * breaking if rounds_rule else 0)
    assert compared == 3 * 6 * 12 - rejected


def test_torchs_class_name_is_interleaved_zb_which_at_v1_is_zb_h1():
    assert resolve_name("ScheduleInterleavedZeroBubble") == resolve_name("interleaved-zb") == "interleaved-zb"
    assert resolve_name("ScheduleLoopedBFS") == "looped-bfs" and resolve_name("ZB-H2") == "zb-h2"
    assert SCHEDULES["zb-h1"].torch_class == SCHEDULES["interleaved-zb"].torch_class
    for p in range(1, 7):
        for m in range(1, 13):
            one = ours_or_none("ScheduleInterleavedZeroBubble", p, m, 1)
            if one is not None:  # where torch's rounds rule lets it build, it is ZB-H1, order for order
                assert one.orders == build_schedule("zb-h1", p, m).orders, (p, m)
    # zb-h1 takes the m the rounds rule refuses (p=4, m=9: 2 rounds do not divide 9)
    assert ours_or_none("interleaved-zb", 4, 9, 1) is None and check(build_schedule("zb-h1", 4, 9)) == []
    # torch_order reaches torch's class from either of our names
    assert torch_order("zb-h1", 3, 6).orders == torch_order("interleaved-zb", 3, 6, 1).orders
    with pytest.raises(CourseError, match="'zb-h2' has no class in torch"):
        torch_order("zb-h2", 2, 4)


def test_a_second_owner_for_a_name_is_refused():
    from course_lib.shelf.first_schedules import ScheduleInfo, register

    info = SCHEDULES["zb-h1"]
    with pytest.raises(CourseError, match="'zbh2' already belongs to 'zb-h2'"):
        register(ScheduleInfo("zb-h1-copy", info.build, "", "", info.bubble, info.peak, ""), "zbh2")
    assert "zb-h1-copy" not in SCHEDULES


# ---- CSV round trips ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, cls, p, m, v",
    [
        ("looped-bfs", "ScheduleLoopedBFS", 4, 8, 2),
        ("looped-bfs", "ScheduleLoopedBFS", 3, 5, 3),
        ("interleaved-zb", "ScheduleInterleavedZeroBubble", 4, 8, 2),
        ("interleaved-zb", "ScheduleInterleavedZeroBubble", 2, 6, 3),
        ("zb-h2", "ScheduleInterleavedZeroBubble", 4, 8, 1),  # no class of its own: torch's ZB class loads it
    ],
)
def test_torch_loads_our_csv_and_dumps_it_back_unchanged(tmp_path, name, cls, p, m, v):
    ours = build_schedule(name, p, m, v)
    back = from_csv_text(to_csv_text(ours), n_microbatches=m, n_stages=p * v)
    assert back.orders == ours.orders and back.stage_to_device == ours.stage_to_device
    write_csv(ours, tmp_path / "ours.csv")
    theirs = torch_schedule(cls, p, m, v)
    try:
        theirs._load_csv(str(tmp_path / "ours.csv"))  # runs torch's own schedule validation too
        theirs._dump_csv(str(tmp_path / "theirs.csv"), format="compute_only")
    except (AttributeError, TypeError) as err:
        pytest.skip(f"torch {torch.__version__} changed _load_csv/_dump_csv: {err!r}")
    again = read_csv(tmp_path / "theirs.csv")
    assert again.orders == ours.orders and again.stage_to_device == ours.stage_to_device
    assert again.split_backward == ours.split_backward


# ---- closed forms and the simulator ----------------------------------------------------------------
@pytest.mark.parametrize("p", [2, 3, 4, 6, 8])
def test_zb_h2_leaves_no_device_idle_between_its_first_and_last_action(p):
    """Paper, sec 2.2 and Table 2: (p-1)(T_F+T_B-2T_W) = 0 at equal costs, at 2p-1 micro-batches held.
    What the simulator's step still counts is the parallelogram's slant: device d starts d*F late."""
    for m in (2 * p - 1, 2 * p, 4 * p):
        tl = simulate(build_schedule("zb-h2", p, m))
        assert [idle_inside(tl, d) for d in range(p)] == [0.0] * p, (p, m)
        assert [tl.peak_inflight(d) for d in range(p)] == [2 * p - 1] * p
        assert tl.makespan == 3 * m + (p - 1)
        assert tl.bubble_fraction == pytest.approx(SCHEDULES["zb-h2"].bubble.at(Case(p, m)))
        h1 = simulate(build_schedule("zb-h1", p, m))  # ZB-H1 idles inside device 0's own span
        assert idle_inside(h1, 0) == p - 1 and h1.peak_inflight(0) == p


# one stage's (F, I, W), as tests/schedules/test_schedules_closed_forms.py, plus two with W < I
COSTS = [(1.0, 1.0, 1.0), (1.0, 2.0, 0.5), (2.0, 1.0, 1.0), (1.0, 3.0, 2.0), (1.0, 1.0, 0.0), (0.5, 1.0, 1.0),
         (1.0, 1.0, 0.5), (1.0, 2.0, 1.0)]  # fmt: skip


def test_the_papers_zb_h2_idle_is_what_the_first_device_idles_inside_its_span():
    """Table 2's (p-1)(T_F+T_B-2T_W) (negative: none), over a grid, where W <= F and m >= 2p-1; where W > F
    the first device idles more than that (found with the simulator)."""
    compared = 0
    for f, i, w in COSTS:
        for p in range(2, 9):
            for m in range(2 * p - 1, 2 * p + 6):
                tl = simulate(build_schedule("zb-h2", p, m), StageCosts(f, i, w))
                paper = max(0.0, (p - 1) * (f + i - 2 * w))
                if w <= f:
                    assert idle_inside(tl, 0) == pytest.approx(paper, abs=1e-9), (p, m, f, i, w)
                    compared += 1
                else:
                    assert idle_inside(tl, 0) > paper + 1e-9, (p, m, f, i, w)
    assert compared == 6 * 7 * 7


def test_interleaving_divides_the_zero_bubble_idle_share_and_looped_bfs_holds_everything():
    p, m = 4, 8
    h1, izb = (SCHEDULES[n].bubble.at(Case(p, m, v)) for n, v in (("zb-h1", 1), ("interleaved-zb", 2)))
    assert h1 == pytest.approx(3 / 27) and izb == pytest.approx(3 / 51)  # (p-1) idle over 3m or 6m + p-1
    tl = simulate(build_schedule("interleaved-zb", p, m, 2))
    assert tl.bubble_fraction == pytest.approx(izb) and tl.peak_inflight(0) == 4 + 4  # (v-1)*r + p
    bfs = simulate(build_schedule("looped-bfs", p, m, 2))
    assert bfs.bubble_fraction == pytest.approx(3 / 19)  # (p-1)/(v*m+p-1), as interleaved 1F1B
    assert [bfs.peak_inflight(d) for d in range(p)] == [16] * 4  # v*m: every device holds everything


@pytest.mark.parametrize("name, v", [("looped-bfs", 2), ("interleaved-zb", 2), ("zb-h2", 1)])
def test_per_stage_costs_and_links_are_simulated_and_the_formula_steps_aside(name, v):
    p, m = 4, 8
    schedule = build_schedule(name, p, m, v)
    n = p * v
    costs = StageCosts([1.0 + s % 3 for s in range(n)], [2.0] * n, [0.5 + (s == 0) for s in range(n)])
    link = Link(latency_s=0.25, bandwidth_Bps=1e3)
    tl = simulate(schedule, costs, boundary_bytes=100, links=link)
    per_stage_busy = sum(sum(x) * m for x in costs.per_stage(n))
    assert sum(tl.busy(d) for d in range(p)) == pytest.approx(per_stage_busy)
    assert tl.makespan > simulate(schedule, costs).makespan  # the links cost time
    assert len(tl.transfers) == 2 * m * (n - 1)  # every boundary crosses devices under loop placement
    case = Case.of(p, m, v, costs=costs, link=link, nbytes=100)
    assert SCHEDULES[name].bubble.at(case) is None  # uneven stages, slow links: trust the simulator
    assert "does not apply here" in SCHEDULES[name].bubble.explain(case)


# ---- real training, local engine --------------------------------------------------------------------
LOCAL = dict(d_model=16, n_heads=2, seq_len=8, lr=1e-2, eval_batches=1, batch_size=8, steps=2)


@pytest.mark.parametrize(
    "name, p, v, m, partition",
    [
        ("looped-bfs", 2, 2, 4, None),
        ("looped-bfs", 4, 2, 8, [1, 2, 1, 1, 1, 1, 2, 1]),
        ("interleaved-zb", 2, 2, 2, [3, 1, 2, 2]),
        ("interleaved-zb", 4, 2, 8, None),
        ("interleaved-zb", 2, 3, 4, None),
        ("zb-h2", 2, 1, 4, [5, 3]),
        ("zb-h2", 4, 1, 8, None),
        ("zb-h2", 4, 1, 2, [1, 3, 2, 2]),
    ],
)
def test_local_engine_trains_like_the_reference(corpus, name, p, v, m, partition):
    torch.manual_seed(0)
    n_layers = sum(partition) - 2 if partition else 6  # blocks; embedding and head are layers too
    cfg = TrainConfig(n_layers=n_layers, microbatches=m, **LOCAL)
    trainer = LocalPipelineTrainer(cfg, name, p, virtual=v, partition=partition, corpus=corpus)
    x, y = corpus.batch("train", cfg.batch_size, cfg.seq_len, torch.Generator().manual_seed(3))
    ref_loss, want = reference_gradients(cfg, corpus, batch=(x, y))
    loss, _ = trainer.compute_gradients(x, y)
    assert loss == pytest.approx(ref_loss, rel=1e-5)
    got = {n: prm.grad for n, prm in trainer.model.named_parameters()}
    assert sorted(got) == sorted(want) and max_grad_diff(got, want) <= 1e-5


# ---- real training, distributed engine: its rank loop runs these in tests/engines/test_engine_distributed.py


# (schedule, virtual, m, checkpoint, partition) as tests/engines/test_engine_distributed_runs.py writes them
P2_JOBS = [
    ("looped-bfs", 2, 4, "never", None),
    ("interleaved-zb", 2, 4, "except_last", [3, 1, 2, 2]),
    ("zb-h2", 1, 8, "always", [3, 5]),
]
P4_JOBS = [
    ("looped-bfs", 2, 2, "never", None),
    ("interleaved-zb", 2, 4, "never", None),
    ("zb-h2", 1, 8, "never", [1, 3, 2, 2]),
]


@pytest.mark.processes
@pytest.mark.timeout(300)
@pytest.mark.parametrize("ranks, jobs", [(2, P2_JOBS), (4, P4_JOBS)], ids=["p2", "p4"])
def test_distributed_engine_trains_like_the_reference(ranks, jobs):
    """Real processes: losses over two steps, last step's gradients and final weights equal the reference."""
    assert_matches_reference(jobs, launch(specs_for(jobs, ranks)))
