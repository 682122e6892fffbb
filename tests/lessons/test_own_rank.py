"""Lesson 04c's harness (course_lib/lessons/own_rank.py): the lesson's GPipe rank function, written to a file
as its %%writefile cell writes it, is imported by spawned ranks, matches the reference trainer, runs in
GPipe's order and holds all m micro-batches; each common mistake is named; a rank that waits for a message
nobody sends, or 1F1B's blocking sends (assignment a04c's solution), is reported with rank, operation, peer
and seconds, within the stall limit, while the lesson's GPipe with blocking sends still finishes."""

from __future__ import annotations

import re
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest
from support.committed import output_text, source
from support.own_rank_lesson import LESSON_FUNCTION, lesson_function, solution_function, written

from course_lib.lessons.own_rank import make_job, one_f_one_b_bound, run_own_pipeline
from course_lib.shelf.errors import CourseError
from course_lib.shelf.schedule import Kind

SMALL = dict(n_layers=2, seq_len=8, function=LESSON_FUNCTION)  # tiny: the tests are about messages, not speed
BLOCKING = ("sends.append(dist.isend(", "(dist.send(")  # the lesson's first break, on both sends


def changed(base: str, *pairs: tuple[str, str]) -> str:
    """`base` with each (old, new) replaced; every old must be there (a test of nothing otherwise)."""
    for old, new in pairs:
        assert old in base, old
        base = base.replace(old, new)
    return base


def test_a_missing_file_is_refused_before_any_process_starts(tmp_path):
    with pytest.raises(CourseError, match="write your rank function there first"):
        make_job(tmp_path / "nothing.py")


@pytest.mark.processes
@pytest.mark.parametrize("p, m", [(2, 3), (4, 2)])  # m not a multiple of p; m < p
def test_the_lessons_function_runs_gpipe_on_spawned_ranks_equal_to_the_reference(tmp_path, p, m):
    run = run_own_pipeline(written(tmp_path, "mine", lesson_function()), p, m, stall_s=20, **SMALL)
    assert run.error is None, run.error
    assert run.ok, run.summary()
    assert run.mistakes == []
    assert run.peak_held == [m] * p  # GPipe: every stage holds all m, above 1F1B's bound but on the last
    assert f"GPipe holds all m: {[m] * p}; 1F1B's bound: {one_f_one_b_bound(p, m)}" in run.summary()
    for r in run.ranks:  # m activations forward and m gradients back over every boundary
        neighbours = [q for q in (r.rank - 1, r.rank + 1) if 0 <= q < p]
        want = dict.fromkeys(neighbours, m)
        assert Counter(x.peer for x in r.sent) == Counter(x.peer for x in r.received) == want
        assert all(x.shape == (1, 8, 32) and x.dtype == "float32" for x in r.sent + r.received)
    for stage in range(p):  # GPipe's order, the simulator's build_schedule("gpipe"): F 0..m-1, then B 0..m-1
        spans = sorted((s for s in run.timeline.spans if s.action.stage == stage), key=lambda s: s.start)
        assert [(s.action.kind, s.action.microbatch) for s in spans] == (
            [(Kind.F, i) for i in range(m)] + [(Kind.B, i) for i in range(m)]
        )
    assert len(run.timeline.spans) == 2 * p * m and run.timeline.source == "measured"


@pytest.mark.processes
def test_blocking_sends_finish_in_gpipe_and_deadlock_in_1f1b_as_a_stall_not_a_hang(tmp_path):
    path = written(tmp_path, "gpipe", changed(lesson_function(), BLOCKING))
    gpipe = run_own_pipeline(path, 2, 3, stall_s=20, **SMALL)
    assert gpipe.ok and gpipe.stalls == [], gpipe.summary()  # each phase's messages go one way
    one_f_one_b = changed(solution_function(), ("pending.append(dist.isend(", "(dist.send("))
    started = time.perf_counter()
    run = run_own_pipeline(written(tmp_path, "blocking", one_f_one_b), 2, 3, n_layers=2, seq_len=8, stall_s=1)
    assert time.perf_counter() - started < 30  # the stall limit plus the launcher's grace, with slack
    assert not run.ok
    assert {(s.rank, s.operation, s.peer) for s in run.stalls} == {(0, "send", 1), (1, "send", 0)}
    assert all(s.waited_s >= 0.9 for s in run.stalls)
    assert "wait for each other" in run.summary()


@pytest.mark.processes
def test_a_gradient_nobody_sends_is_reported_as_a_stall_of_the_rank_that_waits_for_it(tmp_path):
    source_ = changed(lesson_function(), ("sends.append(dist.isend(dx, dst=rank.prev))", "pass"))
    logs = set(Path(tempfile.gettempdir()).glob("course_lib-ranks-*.log"))
    started = time.perf_counter()
    run = run_own_pipeline(written(tmp_path, "no_gradient", source_), 2, 3, stall_s=1, **SMALL)
    # the stall report is what the student reads: the ranks' log (gloo's timeouts) is not left behind
    assert set(Path(tempfile.gettempdir()).glob("course_lib-ranks-*.log")) <= logs
    assert time.perf_counter() - started < 30
    assert not run.ok
    assert [(s.rank, s.operation, s.peer) for s in run.stalls] == [(0, "recv", 1)]
    assert run.stalls[0].waited_s >= 0.9
    assert "rank 0 waited" in run.summary() and "wait for each other" not in run.summary()


@pytest.mark.processes
def test_each_common_mistake_is_named(tmp_path):
    base = lesson_function()
    no_scale = changed(base, (" / rank.m\n", "\n"))
    unscaled = run_own_pipeline(written(tmp_path, "unscaled", no_scale), 2, 2, **SMALL)
    assert unscaled.error is None and not unscaled.ok
    assert unscaled.loss == pytest.approx(2 * unscaled.reference_loss, rel=1e-5)  # m = 2 times the mean

    wrong = changed(base, ("dtype=rank.dtype, device=rank.device", "dtype=torch.float64"))
    refused = run_own_pipeline(written(tmp_path, "dtype", wrong), 2, 2, **SMALL)
    assert "receive buffer must match" in refused.error and "float64" in refused.error

    reuse = changed(
        base,
        ("    sends = []", "    sends, out = [], torch.empty(rank.shape)"),
        ("sends.append(dist.isend(y.detach(), dst=rank.next))",
         "out.copy_(y.detach()); sends.append(dist.isend(out, dst=rank.next))"),
    )  # fmt: skip
    early = changed(base, ("dist.recv(dy, src=rank.next)", "sends.append(dist.irecv(dy, src=rank.next))"))
    for name, source_, kind in (("reuse", reuse, "[reuse]"), ("early", early, "[early]")):
        run = run_own_pipeline(written(tmp_path, name, source_), 2, 3, **SMALL)
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
    broken = output_text("04c_write_the_pipeline", "w04c-09")
    blocking, no_gradient = broken.split("no_gradient_sent:")
    assert "equal to the reference" in blocking and "stalled" not in blocking  # GPipe's blocking sends finish
    assert "rank 0 waited 2.0 s in recv from rank 1" in no_gradient and "rank 1 waited" not in no_gradient
    runs = output_text("04c_write_the_pipeline", "w04c-05")
    assert runs.count("equal to the reference") == 2 and "NOT" not in runs


def test_the_lessons_memory_sentence_follows_its_printed_numbers():
    runs = output_text("04c_write_the_pipeline", "w04c-05")
    for p, m in ((2, 4), (4, 6)):
        held, bound = [m] * p, one_f_one_b_bound(p, m)
        assert f"per stage: {held} (GPipe holds all m: {held}; 1F1B's bound: {bound})" in runs
        assert f"{sum(held)} micro-batches' activations, 1F1B's bound {sum(bound)}\n" in runs
    text = " ".join(source("04c_write_the_pipeline", "w04c-05a").split())
    assert "at p = 4, m = 6, 10 micro-batches' activations in all instead of 24" in text


@pytest.mark.processes
def test_a_rank_that_computes_without_end_is_stopped_by_the_runs_wall_clock(tmp_path):
    loop = "def one_f_one_b(rank):\n    while True:\n        pass\n"
    started = time.perf_counter()
    run = run_own_pipeline(written(tmp_path, "loop", loop), 2, 2, stall_s=1, limit_s=3, n_layers=2, seq_len=8)
    assert time.perf_counter() - started < 30
    assert "wall clock of 3 s" in run.error and not run.ok


@pytest.mark.processes
def test_batch_isend_irecv_is_watched_as_isend_and_irecv(tmp_path):
    batched = changed(
        lesson_function(),
        *((f"dist.recv({buf}, src={src})",
           f"for work in dist.batch_isend_irecv([dist.P2POp(dist.irecv, {buf}, {src})]):\n"
           f"                work.wait()") for buf, src in (("x", "rank.prev"), ("dy", "rank.next"))),
    )  # fmt: skip
    run = run_own_pipeline(written(tmp_path, "batched", batched), 2, 3, **SMALL)
    assert run.ok and run.mistakes == [], run.summary()
    assert [len(r.received) for r in run.ranks] == [3, 3]
