"""Distributed engine without processes: input checks, the message plan, the rank loop (ranks as
threads), injected-link timing, merging."""

from __future__ import annotations

import math
import threading
import time

import pytest
import torch

from course_lib.cli import main
from course_lib.engines import injected_links
from course_lib.engines.faults import Fault
from course_lib.shelf import distributed_engine
from course_lib.shelf.costs import Link
from course_lib.shelf.distributed_engine import make_spec
from course_lib.shelf.errors import CourseError
from course_lib.shelf.first_schedules import build_schedule
from course_lib.shelf.model import split_microbatches, uniform
from course_lib.shelf.p2p import message_tag
from course_lib.shelf.rank_loop import PipelineRank, StepRecorder, run_schedule
from course_lib.shelf.reference import TrainConfig, first_batch, max_grad_diff, reference_gradients, train
from course_lib.shelf.run_spec import RankRecord, RunSpec, StepRecord, build_result
from course_lib.shelf.schedule import Action, Kind, incoming_messages, input_message, message_of
from course_lib.shelf.timeline import MEASURED

TINY = dict(n_layers=6, d_model=16, n_heads=2, seq_len=16, batch_size=8, steps=1)


# ---- bad input fails before any process starts ---------------------------------------------------
@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(stages=0), ["stages", "0"]),
        (dict(stages=2.5), ["stages", "2.5"]),
        (dict(cfg=TrainConfig(**TINY, microbatches=3)), ["3 micro-batches", "choose m from"]),
        (dict(schedule="pipedream-2bw"), ["pipedream-2bw", "1f1b"]),
        (dict(partition=[4, 3]), ["[4, 3]", "8"]),  # covers 7 of 8 layers
        (dict(partition=[2, 2, 4]), ["3 stages", "2"]),
        (dict(partition=[0, 8]), ["at least one layer", "[0, 8]"]),
        (dict(stages=9), ["9 stages", "8 layers"]),
        (dict(links=[Link(), Link()]), ["links has 2 entries", "1 stage boundar"]),
        (dict(links="fast"), ["links", "fast"]),
        (dict(checkpoint="sometimes"), ["sometimes", "except_last"]),
        (dict(timeout_s=0), ["timeout_s", "0"]),
        (dict(cfg=TrainConfig(**TINY, device="tpu")), ["tpu"]),
        (dict(fault=Fault(rank=5)), ["fault.rank", "5"]),
        (dict(fault=Fault(rank=0, how="explode")), ["explode", "raise"]),
    ],
)
def test_bad_input_is_refused_with_the_value_named(kwargs, words):
    args = dict(cfg=TrainConfig(**TINY, microbatches=4), schedule="1f1b", stages=2) | kwargs
    with pytest.raises(CourseError) as err:
        make_spec(args.pop("cfg"), args.pop("schedule"), args.pop("stages"), **args)
    for word in words:
        assert word in str(err.value), (word, str(err.value))


@pytest.mark.parametrize(
    "kwargs, room",
    [
        (dict(links=Link(0.01)), "injected_links"),
        (dict(cfg=TrainConfig(**TINY, microbatches=4, tie_embeddings=True)), "whole_model"),
        (dict(cfg=TrainConfig(**TINY, microbatches=4, clip_grad_norm=1.0)), "whole_model"),
    ],
)
def test_a_run_whose_room_is_not_loaded_is_refused_naming_the_room(kwargs, room, monkeypatch):
    """Injected links and the whole model's rules live in rooms: without them, such a run is refused
    before any process starts (never run with its links or its rules silently left out)."""
    loaded = [o for o in distributed_engine.ROOM_OPTIONS if {"links", "tie_embeddings"}.isdisjoint(o.names)]
    monkeypatch.setattr(distributed_engine, "ROOM_OPTIONS", loaded)
    args = dict(cfg=TrainConfig(**TINY, microbatches=4)) | kwargs
    with pytest.raises(CourseError, match=f"an option of the room course_lib.engines.{room}, which is not"):
        make_spec(args.pop("cfg"), "1f1b", 2, **args)
    plain = make_spec(TrainConfig(**TINY, microbatches=4), "1f1b", 2)  # asks nothing of them: runs plain
    assert plain.rooms == tuple(distributed_engine.DEFAULT_ROOMS)


@pytest.mark.parametrize("change", [dict(seq_len=200_000), dict(data_path="/nonexistent/corpus.txt")])
def test_data_the_reference_refuses_is_refused_before_any_rank_starts(change):
    cfg = TrainConfig(**(TINY | change), microbatches=4)
    with pytest.raises(CourseError) as reference:
        train(cfg, progress=False)
    with pytest.raises(CourseError) as engine:
        make_spec(cfg, "1f1b", 2)
    assert str(engine.value) == str(reference.value)


def test_the_command_line_refuses_it_as_the_reference_does(capsys):
    size = ["--layers", "2", "--steps", "1", "--seq-len", "200000"]
    assert main(["train", *size]) == 2
    reference = capsys.readouterr().err
    assert main(["train", "--engine", "distributed", "--stages", "2", *size]) == 2
    assert capsys.readouterr().err == reference and "seq_len=200000" in reference


def test_cuda_needs_one_gpu_per_rank():
    if torch.cuda.device_count() >= 2:
        pytest.skip("this machine has the GPUs")
    with pytest.raises(CourseError, match="cuda"):  # no GPU at all, or fewer than ranks
        make_spec(TrainConfig(**TINY, microbatches=4, device="cuda"), "1f1b", 2)


def test_a_good_spec_has_one_link_per_boundary_and_gloo_on_cpu():
    spec = make_spec(TrainConfig(**TINY, microbatches=4), "interleaved-1f1b", 2, virtual=2, links=Link(0.01))
    assert spec.backend == "gloo" and spec.schedule.n_stages == 4
    assert spec.links == (Link(0.01),) * 3


# ---- the message plan --------------------------------------------------------------------------
def test_messages_cross_ranks_only_and_follow_the_senders_order():
    sched = build_schedule("interleaved-1f1b", 2, 4, virtual=2)  # stage s on rank s % 2
    incoming = incoming_messages(sched, device=1)
    # rank 1 holds stages 1 and 3: it receives activations of stages 0 and 2, gradients of stage 2
    kinds = {(m.producer.stage, m.producer.kind) for m in incoming}
    assert kinds == {(0, Kind.F), (2, Kind.F), (2, Kind.B)}
    assert len(incoming) == 3 * 4
    sent_order = [a for a in sched.orders[0] if message_of(a, sched) is not None]
    assert [m.producer for m in incoming] == sent_order
    # every receive the schedule needs is in the plan, and nothing else
    needed = [input_message(a, sched) for a in sched.orders[1]]
    assert sorted(m.producer for m in needed if m) == sorted(m.producer for m in incoming)


def test_stages_on_one_rank_exchange_nothing():
    sched = build_schedule("1f1b", 1, 4)
    assert incoming_messages(sched, 0) == []
    assert all(message_of(a, sched) is None for a in sched.orders[0])


def test_tags_are_unique_over_two_steps():
    sched = build_schedule("zb-h1", 4, 8)
    msgs = [m for d in range(4) for m in incoming_messages(sched, d)]
    tags = [(m.src, m.dst, message_tag(m, sched, step)) for step in (0, 1) for m in msgs]
    assert len(set(tags)) == len(tags) == 2 * 2 * 3 * 8  # 2 steps, 2 directions, 3 boundaries, 8 mbs


# ---- the rank loop, with threads for ranks ------------------------------------------------------
class ThreadComm:
    """Stands in for RankComm: the ranks are threads, a message is an entry in a shared dict."""

    def __init__(self, box: dict, ready: threading.Condition):
        self.box, self.ready = box, ready

    def recv_activation(self, msg):
        assert msg.producer.kind is Kind.F
        return self._receive(msg)

    def recv_grad(self, msg):
        assert msg.producer.kind is not Kind.F
        return self._receive(msg)

    def send_activation(self, msg, tensor):
        assert msg.producer.kind is Kind.F
        self._send(msg, tensor)

    def send_grad(self, msg, tensor):
        assert msg.producer.kind is not Kind.F
        self._send(msg, tensor)

    def _receive(self, msg):
        with self.ready:
            assert self.ready.wait_for(lambda: msg.producer in self.box, timeout=60), f"{msg} never came"
            return self.box.pop(msg.producer)

    def _send(self, msg, tensor):
        with self.ready:
            self.box[msg.producer] = tensor.detach().clone()
            self.ready.notify_all()


@pytest.mark.parametrize(
    "schedule, ranks, virtual, m",
    [
        ("gpipe", 2, 1, 4),
        ("1f1b", 3, 1, 4),
        ("zb-h1", 2, 1, 4),
        ("interleaved-1f1b", 2, 2, 4),
        ("1f1b", 1, 1, 2),
        ("looped-bfs", 2, 2, 4),
        ("interleaved-zb", 2, 2, 4),
        ("zb-h2", 3, 1, 4),
        ("zb-v", 2, 2, 4),  # the V's turn: stage 1 -> 2 stays on device 1
        ("dualpipe-v", 2, 2, 4),
    ],
)
def test_the_rank_loop_gives_the_reference_gradients(corpus, schedule, ranks, virtual, m):
    spec = make_spec(TrainConfig(**TINY, microbatches=m), schedule, ranks, virtual=virtual)
    built = [PipelineRank(spec, r, torch.device("cpu")) for r in range(ranks)]
    batch = split_microbatches(*first_batch(corpus, spec.cfg), m)
    box, ready, errors = {}, threading.Condition(), []

    def rank_thread(rank):
        try:
            recorder = StepRecorder(time.perf_counter, torch.device("cpu"))
            run_schedule(rank, batch, ThreadComm(box, ready), recorder)
        except BaseException as err:  # reported below, in the test's thread
            errors.append(err)

    threads = [threading.Thread(target=rank_thread, args=(rank,)) for rank in built]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and not box  # every message sent was received
    loss, want = reference_gradients(spec.cfg, corpus)
    assert built[spec.schedule.stage_to_device[-1]].loss() == pytest.approx(loss, rel=1e-5)
    got = {name: p.grad for rank in built for name, p in rank.params.items()}
    assert sorted(got) == sorted(want) and max_grad_diff(got, want) < 1e-6


# ---- injected links: delivery times, without processes ----------------------------------------
def test_injected_link_queues_bandwidth_but_overlaps_latency(monkeypatch):
    sent = []
    monkeypatch.setattr(
        injected_links.dist,
        "isend",
        lambda t, dst, group, tag: sent.append((time.perf_counter(), tag)) or "work",
    )
    wire = injected_links.Wire(dst=1)
    # 10 kB take 0.1 s on the wire, then 0.2 s of latency: wide margins, so a busy machine that pauses
    # this test for tens of milliseconds cannot change what is checked
    link = Link(latency_s=0.2, bandwidth_Bps=1e5)
    t0 = time.perf_counter()
    due = [wire.enqueue(torch.zeros(1), tag, 10_000, link) for tag in range(3)]
    returned = time.perf_counter()
    assert returned < due[0]  # every enqueue returned before the first delivery: the sender goes on
    # the wire is busy 0.1 s per message; the 0.2 s latencies overlap
    gaps = [b - a for a, b in zip(due, due[1:], strict=False)]
    assert gaps == pytest.approx([0.1, 0.1], abs=1e-3)
    assert 0.3 <= due[0] - t0 <= 0.3 + (returned - t0)
    assert wire.drain() == ["work"] * 3
    wire.close()
    for (when, tag), deadline in zip(sent, due, strict=True):
        assert when >= deadline - 1e-4 and tag in (0, 1, 2)
    assert [tag for _, tag in sent] == [0, 1, 2]
    assert not math.isinf(due[-1])


# ---- merging the ranks' records -----------------------------------------------------------------
def test_merge_makes_one_measured_timeline_with_transfers():
    from course_lib.shelf.p2p import RecvEvent, SendEvent

    sched = build_schedule("gpipe", 2, 1)
    f0, f1, b1, b0 = Action(0, Kind.F, 0), Action(1, Kind.F, 0), Action(1, Kind.B, 0), Action(0, Kind.B, 0)

    def step(spans, sends, recvs):
        return StepRecord(start=0.0, end=1.0, spans=spans, sends=sends, recvs=recvs, peak_saved_bytes=10)

    rec0 = RankRecord(stage=0, global_rank=0, losses=[], n_params=10, steps=[step(
        [(f0, 1.0, 1.1), (b0, 1.5, 1.7)], [SendEvent(f0, 1, 1.1, None, 64)], [RecvEvent(b1, 1, 1.1, 1.45)],
    )])  # fmt: skip
    rec1 = RankRecord(stage=1, global_rank=1, losses=[2.5], n_params=20, steps=[step(
        [(f1, 1.2, 1.3), (b1, 1.3, 1.4)], [SendEvent(b1, 0, 1.4, None, 64)], [RecvEvent(f0, 0, 1.1, 1.2)],
    )])  # fmt: skip
    result = build_result([rec1, rec0], RunSpec(TrainConfig(**TINY), sched, uniform(8, 2)))
    tl = result.timeline
    assert tl.source == MEASURED and result.losses == [2.5] and result.n_params == 30
    assert result.runner == "distributed" and result.csv_text is None
    assert tl.makespan == pytest.approx(0.7)
    assert tl.busy(0) == pytest.approx(0.3) and tl.busy(1) == pytest.approx(0.2)
    assert tl.bubble_fraction == pytest.approx(1 - 0.5 / 1.4)
    by_action = {t.action: t for t in tl.transfers}
    assert by_action[f0].end == pytest.approx(0.2)  # the receiver waited: arrival = end of its wait
    assert by_action[b1].start == pytest.approx(0.4) and by_action[b1].end == pytest.approx(0.45)


def test_memory_probes_can_be_switched_off():
    cfg = TrainConfig(**TINY, microbatches=4)
    assert make_spec(cfg, "1f1b", 2, track_memory=False).track_memory is False
    assert make_spec(cfg, "1f1b", 2).track_memory is True


def test_a_split_backward_spec_carries_its_runtime_into_a_rank_that_loaded_nothing():
    # a spawned rank starts empty: the spec names the runtime of I and W, so unpickling it registers it
    import pickle
    import subprocess
    import sys

    import course_lib.schedules  # noqa: F401 (registers zb-h1)
    from course_lib.engines.split_backward import SplitBackwardStage

    spec = make_spec(TrainConfig(n_layers=2, microbatches=4, steps=1), "zb-h1", 2)
    assert spec.split_runtime is SplitBackwardStage
    assert make_spec(TrainConfig(n_layers=2, microbatches=4, steps=1), "1f1b", 2).split_runtime is None
    code = (
        "import pickle, sys\n"
        "spec = pickle.loads(sys.stdin.buffer.read())\n"
        "from course_lib.shelf.stage import SPLIT_BACKWARD_RUNTIME\n"
        "print([c.__name__ for c in SPLIT_BACKWARD_RUNTIME])\n"
    )
    sent = pickle.dumps(spec)
    out = subprocess.run([sys.executable, "-c", code], input=sent, capture_output=True, check=True)
    assert out.stdout.decode().strip() == "['SplitBackwardStage']"
