"""scale_out: costs read back from a Timeline, replayed; torchrun command text."""

from __future__ import annotations

import re

import pytest
from support.committed import output_text, source

from course_lib.lessons.scale_out import replay, torchrun_commands
from course_lib.shelf.costs import Link, StageCosts
from course_lib.shelf.errors import CourseError
from course_lib.shelf.first_schedules import build_schedule
from course_lib.shelf.simulator import simulate
from course_lib.shelf.timeline import MEASURED_COMPUTE


def test_costs_read_back_and_replayed_reproduce_the_timeline():
    sched = build_schedule("1f1b", 3, 6)
    tl = simulate(sched, StageCosts.fused(f=[1.0, 2.0, 3.0], b=[2.0, 4.0, 5.0]), boundary_bytes=8)
    again = replay([tl, tl], sched, boundary_bytes=8)
    assert again.source == MEASURED_COMPUTE
    assert again.makespan == pytest.approx(tl.makespan)
    slow = replay([tl], sched, links=Link(latency_s=1.0))
    assert slow.makespan > tl.makespan  # links are simulated on top of the measured compute


def test_torchrun_commands():
    (one,) = torchrun_commands(nproc_per_node=4, engine_args="--schedule gpipe")
    assert one == (
        ".venv/bin/torchrun --nproc-per-node 4 --master-addr 127.0.0.1 --master-port 29500 "
        "-m course_lib.cli.torchrun --schedule gpipe"
    )
    two = torchrun_commands(nproc_per_node=1, nnodes=2, endpoint="10.0.0.1:29500")
    assert len(two) == 2
    assert "--node-rank 0" in two[0] and "--node-rank 1" in two[1]
    # across nodes the course's launcher, which answers a missing peer in one line
    assert all(c.startswith(".venv/bin/python -m course_lib.cli.torchrun --nnodes 2 ") for c in two)
    assert all("--master-addr 10.0.0.1 --master-port 29500 --rdzv-conf timeout=60 -m" in c for c in two)
    with pytest.raises(CourseError, match="got 0"):
        torchrun_commands(nproc_per_node=0)
    with pytest.raises(CourseError, match="HOST:PORT"):
        torchrun_commands(nnodes=2, endpoint="nohost")
    with pytest.raises(CourseError, match="at least one"):
        replay([], build_schedule("1f1b", 2, 2))


def test_train_for_real_refuses_too_many_ranks_before_starting():
    from course_lib.lessons.scale_out import train_distributed_for
    from course_lib.widgets.dashboard import DashboardConfig

    c = DashboardConfig("1f1b", 8, 4, 1, "free", Link(), StageCosts(), 0)
    with pytest.raises(CourseError, match="p=8 is more than this lesson allows"):
        train_distributed_for(c)


def test_lesson_08_quotes_its_printed_link_cost_and_its_paced_effect_stands_clear():
    printed = output_text("08_scaling_out", "ff9833fb")
    formula = re.search(r"formula, equal stages:\s+\+(\d+) ms", printed).group(1)
    assert f"= {formula} ms per step" in source("08_scaling_out", "254c8b56")
    # the paced pair, as committed: the link's cost at least 3x the two ranges added, near the formula
    pattern = r"paced, 3 repeats: \+(\d+) ms .*spread (\d+) ms.*: ([\d.]+)x its spread: decisive"
    paced = re.search(pattern, printed)
    assert paced is not None, printed
    added, spread, ratio = (float(x) for x in paced.groups())
    assert ratio >= 3 and abs(added - float(formula)) <= 0.15 * float(formula) + spread


def test_lesson_08_text_names_the_settings_its_code_runs():
    code = source("08_scaling_out", "ba8bf209")
    found = re.search(
        r"P, M, LATENCY, PACE, REPEATS = (\d+), (\d+), ([\d.]+), \(([\d.]+), ([\d.]+)\), (\d+)", code
    )
    p, m, latency, pace_f, pace_b, repeats = (float(x) for x in found.groups())
    assert "steps=3," in code and repeats == 3  # "three steps each", "three times"
    text = " ".join(source("08_scaling_out", "418ce9f9").split())
    assert f"p = {p:.0f} processes" in text and f"m = {m:.0f} micro-batches" in text
    assert f"**{latency * 1e3:.0f} ms of latency injected**" in text and "three steps each" in text
    assert f"({pace_f * 1e3:.0f} ms forward, {pace_b * 1e3:.0f} ms backward" in text and "three times" in text
    assert f"How much should {latency * 1e3:.0f} ms cost?" in source("08_scaling_out", "254c8b56")
