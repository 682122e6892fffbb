"""V-shape schedules (ZB-V, DualPipeV): torch's orders, placement, messages, closed forms, real training.

Findings recorded here, for torch 2.13:
- ScheduleZBVZeroBubble gives exactly our zb-v order for every p and m tried, m < 2p-1 included (torch
  plans for max(2p-1, m) micro-batches and drops the extra; so do we).
- ScheduleDualPipeV gives exactly our dualpipe-v order once its OVERLAP_F_B actions are written as their
  sub-actions (forward first) and its full backwards B as I then W (schedules/v_shape.py says why);
  both refuse m < 2p, ours saying why.
"""

from __future__ import annotations

import pytest
import torch

from course_lib import cli
from course_lib.schedules.closed_forms import Case
from course_lib.schedules.torch_csv import read_csv, to_csv_text, write_csv
from course_lib.schedules.torch_orders import torch_order, torch_schedule
from course_lib.shelf.costs import StageCosts
from course_lib.shelf.errors import CourseError
from course_lib.shelf.first_schedules import SCHEDULES, build_schedule, resolve_name
from course_lib.shelf.local_engine import LocalPipelineTrainer
from course_lib.shelf.reference import TrainConfig, reference_gradients, reference_run
from course_lib.shelf.schedule import Action, Kind, local_producer, messages
from course_lib.shelf.simulator import simulate
from course_lib.shelf.validate import check

V_SHAPES = ("zb-v", "dualpipe-v")
TORCH = {"zb-v": "ScheduleZBVZeroBubble", "dualpipe-v": "ScheduleDualPipeV"}


def ours_or_none(name: str, p: int, m: int):
    try:
        return build_schedule(name, p, m)
    except CourseError:
        return None


def theirs_or_none(name: str, p: int, m: int):
    try:
        return torch_order(TORCH[name], p, m)
    except CourseError as err:
        if "changed the private pipelining API" in str(err):
            pytest.skip(str(err))
        assert "refuses" in str(err)
        return None


# ---- orders: equal to PyTorch's ------------------------------------------------------------------
@pytest.mark.parametrize("name", V_SHAPES)
def test_orders_equal_torchs_and_both_refuse_the_same_sizes(name):
    compared = 0
    for p in range(1, 7):
        for m in range(1, 17):
            ours, theirs = ours_or_none(name, p, m), theirs_or_none(name, p, m)
            assert (ours is None) == (theirs is None), (p, m)
            if ours is None:
                continue
            fields = ("orders", "n_stages", "n_microbatches", "stage_to_device", "split_backward")
            assert all(getattr(ours, f) == getattr(theirs, f) for f in fields), (p, m)
            assert check(ours) == [], (p, m)
            compared += 1
    assert compared > (90 if name == "zb-v" else 40)


def test_dualpipe_v_refuses_fewer_micro_batches_than_stages_and_says_why():
    assert theirs_or_none("dualpipe-v", 3, 5) is None  # torch: "at least as many microbatches as stages"
    with pytest.raises(CourseError, match=r"m >= 2p = 6 for p=3, got m=5"):
        build_schedule("dualpipe-v", 3, 5)


def test_torchs_overlapped_and_full_backwards_are_written_as_documented():
    """torch's raw DualPipeV list: OVERLAP_F_B(F, B) becomes F, then B; each B becomes I then W."""
    raw = torch_schedule("ScheduleDualPipeV", 2, 4).pipeline_order
    compute = [[a for a in raw[r] if a is not None and a.is_compute_op] for r in (0, 1)]
    assert [str(a) for a in compute[0][7:9]] == ["(0F3;3B1)OVERLAP_F_B", "(3F2;0B0)OVERLAP_F_B"]
    ours = build_schedule("dualpipe-v", 2, 4)
    assert " ".join(map(str, ours.orders[0])) == (
        "0F0 0F1 0F2 3F0 3I0 3W0 3F1 0F3 3I1 3W1 3F2 0I0 0W0 3I2 3W2 3F3 0I1 0W1 3I3 3W3 0I2 0W2 0I3 0W3"
    )
    for rank in (0, 1):
        expected = []
        for sub in (sub for a in compute[rank] for sub in (a.sub_actions or (a,))):
            kind, s, mb = sub.computation_type.value, sub.stage_index, sub.microbatch_index
            expected += [f"{s}I{mb}", f"{s}W{mb}"] if kind == "B" else [f"{s}{kind}{mb}"]
        assert [str(a) for a in ours.orders[rank]] == expected


# ---- registry, names, placement ----------------------------------------------------------------
def test_names_torch_class_names_and_the_v_placement():
    assert resolve_name("ScheduleZBVZeroBubble") == resolve_name("ZBV") == "zb-v"
    assert resolve_name("ScheduleDualPipeV") == resolve_name("DualPipeV") == "dualpipe-v"
    for name in V_SHAPES:
        info = SCHEDULES[name]
        assert info.uses_virtual and info.fixed_virtual == 2 and info.default_virtual == 2
        s = build_schedule(name, 4, 8)  # v defaults to 2
        assert s.stage_to_device == [0, 1, 2, 3, 3, 2, 1, 0] and s.n_stages == 8
        assert s.stages_of(0) == [0, 7] and s.stages_of(3) == [3, 4]
        assert build_schedule(name, 4, 8, virtual=2).orders == s.orders
        for v in (1, 3):
            with pytest.raises(CourseError, match=f"two stages per device .* virtual must be 2, got {v}"):
                build_schedule(name, 4, 8, virtual=v)


@pytest.mark.parametrize("name", V_SHAPES)
def test_the_turn_of_the_v_is_local_and_every_other_boundary_a_message(name):
    p, m = 3, 6
    s = build_schedule(name, p, m)
    boundaries = [msg.boundary for msg in messages(s)]
    assert p - 1 not in boundaries  # stage p-1 -> stage p never leaves device p-1
    assert len(boundaries) == 2 * m * (2 * p - 2)  # an activation up and a gradient down per other boundary
    assert local_producer(Action(p, Kind.F, 0), s) == Action(p - 1, Kind.F, 0)
    assert local_producer(Action(p - 1, Kind.I, 0), s) == Action(p, Kind.I, 0)
    tl = simulate(s, StageCosts(1.0, 1.0, 1.0), boundary_bytes=1000)
    assert not any(t.src_device == t.dst_device for t in tl.transfers)
    assert len(tl.transfers) == len(boundaries)


# ---- CSV ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", V_SHAPES)
def test_csv_round_trip(name, tmp_path):
    for p, m in ((1, 4), (2, 4), (3, 7), (4, 8)):
        original = build_schedule(name, p, m)
        write_csv(original, tmp_path / "s.csv")
        back = read_csv(tmp_path / "s.csv")
        assert back.orders == original.orders and back.stage_to_device == original.stage_to_device
        assert (back.n_stages, back.split_backward) == (2 * p, True) and check(back) == []


def test_torch_loads_our_zb_v_csv(tmp_path):
    ours = build_schedule("zb-v", 2, 4)
    write_csv(ours, tmp_path / "ours.csv")
    theirs = torch_schedule("ScheduleZBVZeroBubble", 2, 4)
    try:
        theirs._load_csv(str(tmp_path / "ours.csv"))
    except (AttributeError, TypeError) as err:
        pytest.skip(f"torch {torch.__version__} changed _load_csv: {err!r}")
    loaded = [[str(a) for a in theirs.pipeline_order[r]] for r in (0, 1)]
    assert loaded == [list(map(str, order)) for order in ours.orders]


@pytest.mark.parametrize("name", V_SHAPES)
def test_we_read_torchs_csv_overlapped_pairs_included(name, tmp_path):
    theirs = torch_schedule(TORCH[name], 3, 6)
    try:
        theirs._dump_csv(str(tmp_path / "theirs.csv"), format="compute_only")
    except (AttributeError, TypeError) as err:
        pytest.skip(f"torch {torch.__version__} changed _dump_csv: {err!r}")
    text = (tmp_path / "theirs.csv").read_text()
    assert ("OVERLAP_F_B" in text) == (name == "dualpipe-v")  # cells like (0F3;3B1)OVERLAP_F_B
    back = read_csv(tmp_path / "theirs.csv")
    assert back.orders == build_schedule(name, 3, 6).orders and back.stage_to_device == [0, 1, 2, 2, 1, 0]


def test_cli_defaults_v_shapes_to_two_stages_per_device(monkeypatch, capsys):
    monkeypatch.setattr(cli, "COMMANDS", {"schedule": cli.COMMANDS["schedule"]})
    argv = ["schedule", "--schedule", "ScheduleZBVZeroBubble", "--stages", "2", "--microbatches", "4"]
    assert cli.main([*argv, "--format", "torch-csv"]) == 0
    assert capsys.readouterr().out == to_csv_text(build_schedule("zb-v", 2, 4))
    assert cli.main([*argv, "--virtual", "3"]) != 0
    assert "virtual must be 2, got 3" in capsys.readouterr().err


# ---- closed forms = simulator where they hold ---------------------------------------------------
COSTS = [(1.0, 1.0, 1.0), (1.0, 2.0, 0.5), (2.0, 1.0, 1.0), (1.0, 3.0, 2.0), (1.0, 1.0, 0.0), (0.5, 1.0, 1.0),
         (2.0, 2.0, 1.0)]  # fmt: skip


@pytest.mark.parametrize("name", V_SHAPES)
def test_closed_forms_equal_the_simulator_where_they_hold(name):
    info, held = SCHEDULES[name], 0
    for p in range(1, 7):
        for m in range(1, 15):
            if (schedule := ours_or_none(name, p, m)) is None:
                continue
            for f, i, w in COSTS:
                tl = simulate(schedule, StageCosts(f, i, w))
                case = Case(p, m, 2, f, i, w)
                if info.bubble.holds(case):
                    want = info.bubble.value(case)
                    assert tl.bubble_fraction == pytest.approx(want, abs=1e-12), (p, m, f, i, w)
                    held += 1
                peak = max(tl.peak_inflight(d) for d in range(p))
                assert info.peak.holds(case) and peak == info.peak.value(case), (p, m, f, i, w)
    assert held > 100  # most cases in range really were compared


def test_the_ranges_are_real_but_not_tight_everywhere():
    """Outside its range a formula and the simulator part, on this grid, except where a range is only
    sufficient: ZB-V below m = 2p-1 and at W > I with p = 2, DualPipeV at p = 2 (cases listed)."""
    coincide = []
    for name in V_SHAPES:
        info = SCHEDULES[name]
        for p in range(2, 7):
            for m in range(2 * p, 2 * p + 4):
                schedule = build_schedule(name, p, m)
                for f, i, w in COSTS:
                    case = Case(p, m, 2, f, i, w)
                    got = simulate(schedule, StageCosts(f, i, w)).bubble_fraction
                    want = info.bubble.value(case)
                    if not info.bubble.holds(case) and got == pytest.approx(want, abs=1e-9):
                        coincide.append((name, p, (f, i, w)))
    assert sorted(set(coincide)) == [
        ("dualpipe-v", 2, (0.5, 1.0, 1.0)), ("dualpipe-v", 2, (1.0, 2.0, 0.5)),
    ]  # fmt: skip


def test_zb_v_holds_1f1bs_memory_and_spreads_it_evenly():
    tl = simulate(build_schedule("zb-v", 4, 12))
    # 2p stages' micro-batches (each half a device's layers): 1F1B's p, on every device
    assert [tl.peak_inflight(d) for d in range(4)] == [8, 8, 8, 8]
    one_f_one_b = simulate(build_schedule("1f1b", 4, 12))
    assert [one_f_one_b.peak_inflight(d) for d in range(4)] == [4, 3, 2, 1]


# ---- trained for real: the local engine ---------------------------------------------------------
SMALL = dict(d_model=16, n_heads=2, seq_len=8, lr=1e-2, eval_batches=1, batch_size=8, steps=1)


@pytest.mark.parametrize(
    "name, p, m, partition",
    [
        ("zb-v", 1, 2, None), ("zb-v", 2, 4, [1, 3, 2, 2]), ("zb-v", 2, 2, None), ("zb-v", 4, 8, None),
        ("zb-v", 4, 4, [1, 1, 2, 1, 1, 1, 1, 2]), ("dualpipe-v", 1, 2, None),
        ("dualpipe-v", 2, 4, [2, 1, 3, 2]),
        ("dualpipe-v", 2, 8, None), ("dualpipe-v", 4, 8, [2, 1, 1, 1, 1, 1, 1, 2]),
        # V-Min and V-Half (schedules/controllable_memory.py;
        # tests/schedules/test_schedules_controllable_memory.py)
        ("v-min", 2, 4, [1, 3, 2, 2]), ("v-min", 4, 8, None), ("v-half", 3, 8, None), ("v-half", 4, 4, None),
    ],
)  # fmt: skip
def test_local_engine_equals_the_reference(corpus, name, p, m, partition):
    cfg = TrainConfig(n_layers=6 if p < 4 else 8, microbatches=m, **SMALL)
    trainer = LocalPipelineTrainer(cfg, name, p, partition=partition, corpus=corpus)
    assert trainer.schedule.stages_per_device == 2
    x, y = corpus.batch("train", cfg.batch_size, cfg.seq_len, torch.Generator().manual_seed(3))
    ref_loss, want = reference_gradients(cfg, corpus, batch=(x, y))
    loss, _ = trainer.compute_gradients(x, y)
    assert loss == pytest.approx(ref_loss, rel=1e-5)
    for key, param in trainer.model.named_parameters():
        torch.testing.assert_close(param.grad, want[key], rtol=1e-5, atol=1e-7, msg=f"{name} {key}")


def test_local_engine_takes_virtual_2_and_refuses_3(corpus):
    cfg = TrainConfig(n_layers=6, microbatches=4, **SMALL)
    assert LocalPipelineTrainer(cfg, "zb-v", 2, virtual=2, corpus=corpus).schedule.n_stages == 4
    with pytest.raises(CourseError, match="virtual must be 2, got 3"):
        LocalPipelineTrainer(cfg, "dualpipe-v", 2, virtual=3, corpus=corpus)


# ---- trained for real: the distributed engine ---------------------------------------------------


TINY = dict(n_layers=6, d_model=16, n_heads=2, seq_len=16, batch_size=8, steps=2)
DIST_JOBS = [  # (schedule, ranks, m, partition)
    ("zb-v", 2, 4, [1, 3, 2, 2]),
    ("dualpipe-v", 2, 4, None),
    ("zb-v", 4, 8, None),
    ("dualpipe-v", 4, 8, [1, 1, 1, 2, 1, 1, 1, 2]),
    ("v-min", 2, 8, None),  # schedules/controllable_memory.py, in the same launch as the two above
    ("v-half", 2, 4, [1, 3, 3, 1]),
]


@pytest.mark.processes
@pytest.mark.timeout(400)
@pytest.mark.parametrize("ranks", [2, 4])
def test_distributed_engine_equals_the_reference(ranks):
    from course_lib.shelf.distributed_engine import launch, make_spec

    jobs = [job for job in DIST_JOBS if job[1] == ranks]
    tiny = TINY | dict(n_layers=6 if ranks == 2 else 8)  # 8 or 10 layers to cut into 2p stages
    specs = [
        make_spec(TrainConfig(**tiny, microbatches=m), s, r, partition=part, return_grads=True, threads=1)
        for s, r, m, part in jobs
    ]  # fmt: skip
    for (name, _, m, _), result in zip(jobs, launch(specs), strict=True):
        assert result.schedule == name and specs[0].virtual == 2
        losses, grads, params = reference_run(TrainConfig(**tiny, microbatches=m))
        assert result.losses == pytest.approx(losses, rel=1e-5), name
        for key, g in grads.items():
            torch.testing.assert_close(result.grads[key], g, rtol=1e-5, atol=1e-7, msg=f"{name} {key}")
            torch.testing.assert_close(result.params[key], params[key].detach(), rtol=1e-5, atol=1e-6)


def test_dashboard_takes_the_names_and_fixes_v_at_two():
    pytest.importorskip("ipywidgets")
    from course_lib.widgets.dashboard import PipelineDashboard

    board = PipelineDashboard(schedule="ScheduleZBVZeroBubble", p=2, m=4, v=3)
    assert board.config().schedule == "zb-v" and board.config().v == 2 and board.v_slider.disabled
    assert board.timeline is not None and board.timeline.n_stages == 4
    board.schedule_dropdown.value = "dualpipe-v"
    board.m_slider.value = 3  # m < 2p: the box says why instead of drawing
    assert "2p = 4 for p=2, got m=3" in board.summary.value and board.timeline is None
