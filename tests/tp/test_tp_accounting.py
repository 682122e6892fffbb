"""Message counts against the formulas; the alpha-beta cost model against hand numbers and the simulator."""

import pytest

from course_lib.cli import main as main_for_tests
from course_lib.network import ring_all_reduce_s
from course_lib.shelf.costs import Link, StageCosts
from course_lib.shelf.first_schedules import build_schedule
from course_lib.shelf.simulator import simulate
from course_lib.tp.accounting import Workload, comparison_rows, pp_log_from_schedule, pp_sends, tp_allreduces
from course_lib.tp.cost import Scenario, crossover_latency, pp_step, stall_fraction, tp_step


def test_tp_formula_80_layers():
    assert tp_allreduces(80, 8, 1, backward=False) == 160  # per generated token
    assert tp_allreduces(80, 8, 1) == 320  # forward + backward of one micro-batch
    assert tp_allreduces(80, 8, 4) == 1280
    assert tp_allreduces(80, 1, 4) == 0  # one rank: nothing to reduce


@pytest.mark.parametrize("name", ["gpipe", "1f1b", "zb-h1"])
@pytest.mark.parametrize("p", [2, 3, 4])
@pytest.mark.parametrize("m", [1, 4])
def test_pp_messages_read_off_the_schedule_equal_the_formula(name, p, m):
    log = pp_log_from_schedule(build_schedule(name, p, m), message_bytes=100)
    assert log.count("send", "forward") == (p - 1) * m  # p-1 boundary sends per micro-batch each way
    assert log.count("send", "backward") == (p - 1) * m
    assert log.count() == pp_sends(p, m) and log.nbytes == 100 * pp_sends(p, m)


def test_interleaving_multiplies_the_sends_and_one_device_sends_nothing():
    sched = build_schedule("interleaved_1f1b", 2, 4, virtual=2)  # 4 stages on 2 devices: 3 boundaries
    log = pp_log_from_schedule(sched, 1)
    assert log.count("send", "forward") == 3 * 4  # interleaving multiplies p2p traffic by v
    assert pp_log_from_schedule(build_schedule("1f1b", 1, 4), 1).count() == 0


def test_comparison_rows_70b():
    rows = {(r.scheme, r.what): r for r in comparison_rows(Workload(microbatches=8), 8)}
    assert rows["TP", "generated token"].messages == 160
    assert rows["PP", "generated token"].messages == 7
    assert rows["TP", "training step"].messages == 4 * 80 * 8
    assert rows["PP", "training step"].messages == 2 * 7 * 8
    assert rows["PP", "training step"].message_bytes == 4096 * 8192 * 2  # 64 MiB: b*s*h, bf16
    assert rows["TP", "training step"].bytes_per_device == pytest.approx(2560 * 2 * 7 / 8 * 64 * 2**20)


def test_ring_allreduce_alpha_beta():
    assert ring_all_reduce_s(1e6, 1, Link(1e-3, 1e9)) == 0
    assert ring_all_reduce_s(1e6, 4, Link(1e-6, 1e9)) == pytest.approx(6e-6 + 1.5e-3)
    assert ring_all_reduce_s(0, 8, Link(2e-6, 1e9)) == pytest.approx(28e-6)


def test_sweep_slopes_and_crossover():
    sc = Scenario(
        "toy",
        n_layers=10,
        devices=4,
        compute_per_layer_s=1e-3,
        message_bytes=0,
        bandwidth_Bps=1e9,
        microbatches=2,
    )
    # TP: 4L syncs per micro-batch, each 2(t-1) hops; PP: 2(p-1) hops per step
    assert tp_step(sc, 1e-3).total_s - tp_step(sc, 0).total_s == pytest.approx(2 * 40 * 6 * 1e-3)
    assert pp_step(sc, 1e-3).total_s - pp_step(sc, 0).total_s == pytest.approx(6 * 1e-3)
    x = crossover_latency(sc)
    assert tp_step(sc, x).total_s == pytest.approx(pp_step(sc, x).total_s)
    assert tp_step(sc, x / 2).total_s < pp_step(sc, x / 2).total_s  # TP wins below, PP above
    assert tp_step(sc, 2 * x).total_s > pp_step(sc, 2 * x).total_s
    assert tp_step(sc, 0).wait_share == 0 and pp_step(sc, 0).wait_share == pytest.approx(3 / 5)


@pytest.mark.parametrize("latency", [0.0, 1e-4, 5e-3])
def test_pp_model_equals_simulated_gpipe(latency):
    sc = Scenario(
        "toy",
        n_layers=8,
        devices=4,
        compute_per_layer_s=3e-3,
        message_bytes=1e6,
        bandwidth_Bps=1e9,
        microbatches=4,
    )
    stage = 8 * 3e-3 / 4
    tl = simulate(
        build_schedule("gpipe", 4, 4),
        StageCosts.fused(f=stage / 3, b=2 * stage / 3),
        boundary_bytes=1e6,
        links=Link(latency_s=latency, bandwidth_Bps=1e9),
    )
    assert pp_step(sc, latency).total_s == pytest.approx(tl.makespan, rel=1e-9)


def test_stall_check_of_the_2us_claim():
    # 70B decode at TP=8: 2 syncs of 2 us against ~42 us of weight streaming per layer: single digits
    assert stall_fraction(2 * 2e-6, 42e-6) == pytest.approx(4 / 46)
    assert stall_fraction(2 * 2e-6, 42e-6) < 0.10
    assert stall_fraction(0, 0) == 0


def test_cli_prints_counts_and_crossover(capsys):
    assert main_for_tests(["tp", "sweep"]) == 0
    assert "crossover: PP's step is shorter above" in capsys.readouterr().out
    assert main_for_tests(["tp", "counts", "--layers", "6", "--devices", "2"]) == 0
    out = capsys.readouterr().out
    assert "12 all-reduces; formula 2L = 12" in out and "24 all-reduces; formula 4L = 24" in out
