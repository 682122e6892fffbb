"""Lesson 04c's harness (course_lib/lessons/own_rank.py): a rank function written to a file, as the lesson's
%%writefile cell writes it, is imported by spawned ranks, matches the reference trainer, and each common
mistake is named; a deadlock is reported with rank, operation, peer and seconds, within the stall limit."""

from __future__ import annotations

import re
import time
from collections import Counter

import pytest
from support.committed import output_text
from support.own_rank_lesson import lesson_function, written

from course_lib.lessons.own_rank import make_job, one_f_one_b_bound, run_own_pipeline
from course_lib.shelf.errors import CourseError

SMALL = dict(n_layers=2, seq_len=8)  # tiny: the tests are about messages, not speed


def test_a_missing_file_is_refused_before_any_process_starts(tmp_path):
    with pytest.raises(CourseError, match="write your rank function there first"):
        make_job(tmp_path / "nothing.py")


@pytest.mark.processes
@pytest.mark.parametrize("p, m", [(2, 3), (4, 2)])  # m not a multiple of p; m < p
def test_the_lessons_function_from_a_file_runs_on_spawned_ranks_and_equals_the_reference(tmp_path, p, m):
    run = run_own_pipeline(written(tmp_path, "mine", lesson_function()), p, m, stall_s=20, **SMALL)
    assert run.error is None, run.error
    assert run.ok, run.summary()
    assert run.mistakes == []
    assert run.peak_held == one_f_one_b_bound(p, m)
    for r in run.ranks:  # m activations forward and m gradients back over every boundary
        neighbours = [q for q in (r.rank - 1, r.rank + 1) if 0 <= q < p]
        want = dict.fromkeys(neighbours, m)
        assert Counter(x.peer for x in r.sent) == Counter(x.peer for x in r.received) == want
        assert all(x.shape == (1, 8, 32) and x.dtype == "float32" for x in r.sent + r.received)
    assert {s.action.stage for s in run.timeline.spans} == set(range(p))
    assert len(run.timeline.spans) == 2 * p * m and run.timeline.source == "measured"


@pytest.mark.processes
def test_blocking_sends_on_both_neighbours_are_reported_as_a_stall_not_a_hang(tmp_path):
    source = lesson_function().replace("sends.append(dist.isend(", "(dist.send(")
    started = time.perf_counter()
    run = run_own_pipeline(written(tmp_path, "blocking", source), 2, 3, stall_s=1, **SMALL)
    assert time.perf_counter() - started < 30  # the stall limit plus the launcher's grace, with slack
    assert not run.ok
    assert {(s.rank, s.operation, s.peer) for s in run.stalls} == {(0, "send", 1), (1, "send", 0)}
    assert all(s.waited_s >= 0.9 for s in run.stalls)
    assert "wait for each other" in run.summary()


@pytest.mark.processes
def test_each_common_mistake_is_named(tmp_path):
    base = lesson_function()
    no_scale = base.replace(" / rank.m  #", "  #")
    unscaled = run_own_pipeline(written(tmp_path, "unscaled", no_scale), 2, 2, **SMALL)
    assert unscaled.error is None and not unscaled.ok
    assert unscaled.loss == pytest.approx(2 * unscaled.reference_loss, rel=1e-5)  # m = 2 times the mean

    wrong = base.replace("dtype=rank.dtype, device=rank.device", "dtype=torch.float64")
    refused = run_own_pipeline(written(tmp_path, "dtype", wrong), 2, 2, **SMALL)
    assert "receive buffer must match" in refused.error and "float64" in refused.error

    reuse = base.replace("    sends = []", "    sends, out = [], torch.empty(rank.shape)").replace(
        "sends.append(dist.isend(y.detach(), dst=rank.next))",
        "out.copy_(y.detach()); sends.append(dist.isend(out, dst=rank.next))",
    )
    early = base.replace(
        "dy = None if rank.is_last else receive(rank.next)",
        "dy = None if rank.is_last else torch.empty(rank.shape)\n"
        "        if dy is not None:\n"
        "            sends.append(dist.irecv(dy, src=rank.next))",
    )
    for name, source, kind in (("reuse", reuse, "[reuse]"), ("early", early, "[early]")):
        run = run_own_pipeline(written(tmp_path, name, source), 2, 3, **SMALL)
        assert any(m.startswith(kind) for m in run.mistakes), (name, run.summary())


@pytest.mark.processes
def test_data_parallel_replicas_equal_the_reference_and_every_microbatch_sends_m_times_the_bytes(tmp_path):
    path = written(tmp_path, "mine", lesson_function())
    last = run_own_pipeline(path, 2, 3, dp=2, sync="last", stall_s=20, **SMALL)
    every = run_own_pipeline(path, 2, 3, dp=2, sync="every", stall_s=20, **SMALL)
    assert last.ok and every.ok, (last.summary(), every.summary())
    assert last.sync_bytes > 0 and every.sync_bytes == 3 * last.sync_bytes


def test_the_lessons_committed_verdicts_follow_their_ratio_and_their_labels():
    dp = output_text("04c_write_the_pipeline", "w04c-11")
    ratio = float(re.search(r"\(([\d.]+)x\)", dp).group(1))
    assert ("stands clear of the noise" in dp) == (ratio >= 3), dp
    assert ("illustrative" in dp and "bytes are the decisive figure" in dp) == (ratio < 3), dp
    assert "4x as many after every micro-batch (m = 4)" in dp and dp.count("(measured)") == 2
    stall = output_text("04c_write_the_pipeline", "w04c-09")
    for line in ("rank 0 waited 2.0 s in send to rank 1", "rank 1 waited 2.0 s in send to rank 0"):
        assert line in stall
    runs = output_text("04c_write_the_pipeline", "w04c-05")
    assert runs.count("equal to the reference") == 2 and "NOT" not in runs


@pytest.mark.processes
def test_a_rank_that_computes_without_end_is_stopped_by_the_runs_wall_clock(tmp_path):
    loop = "def one_f_one_b(rank):\n    while True:\n        pass\n"
    started = time.perf_counter()
    run = run_own_pipeline(written(tmp_path, "loop", loop), 2, 2, stall_s=1, limit_s=3, **SMALL)
    assert time.perf_counter() - started < 30
    assert "wall clock of 3 s" in run.error and not run.ok


@pytest.mark.processes
def test_batch_isend_irecv_is_watched_as_isend_and_irecv(tmp_path):
    batched = lesson_function().replace(
        "dist.recv(buf, src=src)  # blocks until the message is here",
        "for work in dist.batch_isend_irecv([dist.P2POp(dist.irecv, buf, src)]):\n            work.wait()",
    )
    run = run_own_pipeline(written(tmp_path, "batched", batched), 2, 3, **SMALL)
    assert run.ok and run.mistakes == [], run.summary()
    assert [len(r.received) for r in run.ranks] == [3, 3]
