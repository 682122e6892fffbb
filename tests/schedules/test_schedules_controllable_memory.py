"""V-Min and V-Half (arXiv 2405.15362): memory and idle time as stated, valid orders, PyTorch's CSV
loader, the registry's names, and both engines trained to the reference's gradients."""

from __future__ import annotations

import pytest
import torch

from course_lib import cli
from course_lib.schedules.closed_forms import Case
from course_lib.schedules.controllable_memory import v_half_idle_slots, v_min_idle_slots
from course_lib.schedules.torch_csv import read_csv, to_csv_text, write_csv
from course_lib.schedules.torch_orders import torch_schedule
from course_lib.shelf.costs import StageCosts
from course_lib.shelf.errors import CourseError
from course_lib.shelf.first_schedules import SCHEDULES, build_schedule, resolve_name
from course_lib.shelf.simulator import simulate
from course_lib.shelf.validate import check

NAMES = ("v-min", "v-half")
PAPER_MEMORY = {"v-min": lambda p: (p + 4) // 3, "v-half": lambda p: (p + 2) // 2}  # device micro-batches


@pytest.mark.parametrize("name", NAMES)
def test_large_pipes_hold_the_papers_memory_and_the_stated_idle(name):
    # the closed-form grid (test_schedules_closed_forms) stops at p = 8; the module states p <= 32
    idle_slots = {"v-min": v_min_idle_slots, "v-half": v_half_idle_slots}[name]
    for p in (9, 16, 32):
        m = (p + 1) // 2 + 1  # both forms hold from about p/2 micro-batches on
        schedule = build_schedule(name, p, m)
        assert check(schedule) == []
        assert schedule.stage_to_device == build_schedule("zb-v", p, m).stage_to_device
        tl = simulate(schedule, StageCosts(1.0, 1.0, 1.0))
        peaks = [tl.peak_inflight(d) for d in range(p)]
        assert max(peaks) == 2 * PAPER_MEMORY[name](p), p  # two stages' micro-batches per device one
        assert tl.makespan - 6 * m == idle_slots(p), p
        assert tl.bubble_fraction == pytest.approx(SCHEDULES[name].bubble.at(Case(p, m, 2)), abs=1e-12)


def test_less_memory_costs_bubble_v_min_v_half_zb_v():
    p, m, costs = 8, 24, StageCosts(1.0, 1.0, 1.0)
    runs = {n: simulate(build_schedule(n, p, m), costs) for n in ("v-min", "v-half", "zb-v")}
    peak = {n: max(tl.peak_inflight(d) for d in range(p)) for n, tl in runs.items()}
    assert peak == {"v-min": 8, "v-half": 10, "zb-v": 16}  # stages' micro-batches: p/3, p/2, p devices'
    assert runs["v-min"].bubble_fraction > runs["v-half"].bubble_fraction > runs["zb-v"].bubble_fraction
    # the paper's approximations at equal costs, idle over ideal compute: about 2p/3m and p/2m, i.e.
    # about 4p and 3p idle slots per device; this V-Min has a little less, this V-Half up to 7p/2
    ideal = 6 * m
    assert runs["v-min"].makespan - ideal == v_min_idle_slots(p) == 27 <= 4 * p
    assert runs["v-half"].makespan - ideal == v_half_idle_slots(p) == 24 == 3 * p
    for q in range(2, 65):
        assert v_min_idle_slots(q) <= 4 * q and 3 * q - 3 <= v_half_idle_slots(q) <= 3.5 * q


def test_unequal_costs_open_steady_state_gaps_so_the_bubble_form_does_not_hold():
    # the order is made at F = I = W; with W cheaper the idle time grows with m (the paper's V-Min and
    # V-Half also need conditions on F, B, W): the form says it does not apply
    costs = StageCosts(1.0, 2.0, 0.5)
    idle = [simulate(build_schedule("v-min", 4, m), costs).makespan - m * 2 * 3.5 for m in (8, 16)]
    assert idle[1] > idle[0]
    assert SCHEDULES["v-min"].bubble.at(Case(4, 8, 2, 1.0, 2.0, 0.5)) is None


def test_names_and_virtual():
    assert resolve_name("V-Min") == "v-min" and resolve_name("vhalf") == "v-half"
    assert build_schedule("v-half", 3, 5).stages_per_device == 2
    with pytest.raises(CourseError, match="virtual must be 2, got 3"):
        build_schedule("v-min", 3, 5, virtual=3)


@pytest.mark.parametrize("name", NAMES)
def test_torchs_loader_reads_our_csv_and_so_do_we(name, tmp_path):
    path = tmp_path / f"{name}.csv"
    for p, m in ((2, 4), (3, 7), (4, 5)):
        ours = build_schedule(name, p, m)
        write_csv(ours, path)
        assert (read_csv(path).orders, read_csv(path).stage_to_device) == (ours.orders, ours.stage_to_device)
        theirs = torch_schedule("ScheduleZBVZeroBubble", p, m)  # torch's V placement, its order replaced
        try:
            theirs._load_csv(str(path))
        except (AttributeError, TypeError) as err:
            pytest.skip(f"torch {torch.__version__} changed _load_csv: {err!r}")
        assert [[str(a) for a in theirs.pipeline_order[r]] for r in range(p)] == [
            [str(a) for a in order] for order in ours.orders
        ], (p, m)


def test_usable_by_name_in_the_cli_and_the_dashboard(monkeypatch, capsys):
    monkeypatch.setattr(cli, "COMMANDS", {"schedule": cli.COMMANDS["schedule"]})
    argv = ["schedule", "--schedule", "V-Half", "--stages", "3", "--microbatches", "5"]
    assert cli.main([*argv, "--format", "torch-csv"]) == 0
    assert capsys.readouterr().out == to_csv_text(build_schedule("v-half", 3, 5))
    pytest.importorskip("ipywidgets")
    from course_lib.widgets.dashboard import PipelineDashboard

    board = PipelineDashboard(schedule="v-min", p=4, m=8)
    assert board.config().schedule == "v-min" and board.config().v == 2 and board.v_slider.disabled
    assert board.timeline is not None and board.timeline.n_stages == 8


# both engines train them: tests/schedules/test_schedules_vshape.py (test_local_engine_equals_the_reference
# and test_distributed_engine_equals_the_reference, in the launch of two ranks)
