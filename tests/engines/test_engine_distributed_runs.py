"""Distributed engine with real processes: every schedule against the reference, injected latency,
memory, and failures. Starting processes is slow on 2 cores, so each launch runs several specs."""

from __future__ import annotations

import tempfile

import pytest
from support.distributed_runs import TINY, assert_matches_reference, specs_for

import course_lib.engines.idle_release  # noqa: F401 (as the lessons run: graphs released while idle)
from course_lib.engines.faults import Fault
from course_lib.shelf.costs import Link
from course_lib.shelf.distributed_engine import DistributedError, launch, make_spec, run_distributed
from course_lib.shelf.first_schedules import build_schedule
from course_lib.shelf.reference import TrainConfig

pytestmark = pytest.mark.processes

LINK = Link(latency_s=0.05)

# (schedule, virtual, m, checkpoint, partition): several m, partitions and checkpoint modes
P2_JOBS = [
    ("naive", 1, 2, "always", None),
    ("gpipe", 1, 4, "never", None),
    ("1f1b", 1, 4, "never", None),
    ("interleaved-1f1b", 2, 4, "except_last", None),
    ("zb-h1", 1, 8, "always", [3, 5]),
]
P4_JOBS = [
    ("1f1b", 1, 8, "never", [1, 3, 2, 2]),
    ("interleaved-1f1b", 2, 4, "never", None),
    ("zb-h1", 1, 4, "except_last", None),
]








@pytest.fixture(scope="module")
def p2_runs():
    cfg = TrainConfig(**TINY, microbatches=2)
    extra = [
        make_spec(cfg, "naive", 2, threads=1),
        make_spec(cfg, "naive", 2, links=LINK, threads=1),
        make_spec(cfg, "gpipe", 2, links=[LINK], threads=1),
    ]
    # the message plumbing NCCL gets (one process group per direction), checked here with gloo
    nccl_style = make_spec(
        TrainConfig(**TINY, microbatches=4), "interleaved-1f1b", 2, virtual=2, direction_groups=True,
        links=Link(1e-3), return_grads=True, threads=1,
    )  # fmt: skip
    results = launch(specs_for(P2_JOBS, 2) + extra + [nccl_style])
    return results[: len(P2_JOBS)], results[len(P2_JOBS) : -1], results[-1]


@pytest.mark.timeout(240)
def test_every_schedule_gives_the_reference_loss_and_gradients_p2(p2_runs):
    assert_matches_reference(P2_JOBS, p2_runs[0])
    assert_matches_reference([("interleaved-1f1b", 2, 4, "never", None)], [p2_runs[2]])


@pytest.mark.timeout(240)
def test_measured_timeline_and_memory_p2(p2_runs):
    by_name = {job[0]: r for job, r in zip(P2_JOBS, p2_runs[0], strict=True)}
    gpipe, ofob = by_name["gpipe"], by_name["1f1b"]
    for r in p2_runs[0]:
        tl = r.timeline
        assert tl.source == "measured" and 0 < tl.bubble_fraction < 1
        virtual = 2 if r.schedule == "interleaved-1f1b" else 1
        sched = build_schedule(r.schedule, 2, r.config["microbatches"], virtual)
        assert sorted(map(str, (s.action for s in tl.spans))) == sorted(map(str, sched.actions()))
        assert all(t.end >= t.start for t in tl.transfers) and tl.transfers
    # GPipe holds all m = 4 micro-batches on rank 0, 1F1B at most p = 2 (same stage, same sizes)
    assert gpipe.timeline.peak_inflight(0) == 4 and ofob.timeline.peak_inflight(0) == 2
    ratio = max(gpipe.peak_saved_bytes[0]) / max(ofob.peak_saved_bytes[0])
    assert 1.7 < ratio < 2.3, ratio
    assert gpipe.to_json()["timeline_source"] == "measured"


@pytest.mark.timeout(240)
def test_injected_latency_delays_delivery_not_compute(p2_runs):
    free, slow, gpipe = p2_runs[1]
    # naive, m = 2: each micro-batch crosses the link twice (activation up, gradient down), one
    # after the other, so the step grows by 2 micro-batches x 2 x 50 ms = 4L (less the few ms a free
    # localhost message took; more if the shared machine delays a process). The upper bound is the
    # design's, not a guess at the noise: the latency is paid once per crossing, not twice (by the
    # sender and again by the receiver), which would add 8L
    assert slow.timeline.makespan >= 4 * LINK.latency_s
    added = slow.timeline.makespan - free.timeline.makespan
    assert 4 * LINK.latency_s - free.timeline.makespan < added < 8 * LINK.latency_s, added
    span = {str(s.action): s for s in slow.timeline.spans}
    for mb in range(2):  # every crossing is exposed: the consumer starts >= 50 ms after the producer
        assert span[f"1F{mb}"].start - span[f"0F{mb}"].end >= LINK.latency_s - 1e-3
        assert span[f"0B{mb}"].start - span[f"1B{mb}"].end >= LINK.latency_s - 1e-3
    for t in slow.timeline.transfers:
        assert t.end - t.start >= LINK.latency_s - 1e-3
    # GPipe: rank 0 runs its second forward while the first activation is still on the wire:
    # the link delays delivery, never the sender's compute
    first_up = next(t for t in gpipe.timeline.transfers if str(t.action) == "0F0")
    assert first_up.end - first_up.start >= LINK.latency_s - 1e-3
    second = next(s for s in gpipe.timeline.spans_of(0) if str(s.action) == "0F1")
    assert second.start < first_up.end


@pytest.mark.timeout(300)
def test_every_schedule_gives_the_reference_loss_and_gradients_p4():
    assert_matches_reference(P4_JOBS, launch(specs_for(P4_JOBS, 4)))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("fault", [Fault(rank=1, how="kill", step=1, after_actions=2), Fault(rank=0)])
def test_a_failed_rank_stops_the_others_and_is_named(fault, tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the run's log goes
    cfg = TrainConfig(**(TINY | dict(steps=3)), microbatches=4)
    with pytest.raises(DistributedError) as info:
        run_distributed(cfg, "1f1b", 2, timeout_s=8, fault=fault, threads=1)
    err = info.value
    assert err.failed_rank == fault.rank and f"rank {fault.rank} failed" in str(err)
    assert ("SIGKILL" if fault.how == "kill" else "injected fault") in str(err)
    # one line, naming the log that holds the ranks' tracebacks
    [log] = tmp_path.glob("course_lib-ranks-*.log")
    assert "\n" not in str(err) and str(err).endswith(f"(ranks' tracebacks: {log})")
    assert f"rank {fault.rank}: pid " in log.read_text()
    if fault.how == "raise":
        assert "Traceback" in log.read_text() and "injected fault" in log.read_text()
    survivor = 1 - fault.rank
    # the survivor stopped by itself (it saw the connection close), well within the bound
    assert err.stopped_after_s[survivor] < 8
    assert "stopped by the launcher" not in err.outcomes[survivor]
    assert f"from rank {fault.rank}" in err.outcomes[survivor]
