"""A rank's receive buffers take the dtype of what is sent; a send of another dtype or shape is refused
before it leaves (without processes: torch.distributed's irecv and isend are stood in for)."""

from __future__ import annotations

import pytest
import torch

from course_lib.engines.idle_release import IdleComm
from course_lib.shelf import p2p as comm
from course_lib.shelf.errors import CourseError
from course_lib.shelf.first_schedules import build_schedule
from course_lib.shelf.schedule import incoming_messages, messages

SHAPE = (2, 8, 4)  # one micro-batch's activations: samples, tokens, width


def _comm(monkeypatch, rank: int, **dtype) -> tuple[comm.RankComm, list]:
    posted: list = []
    monkeypatch.setattr(comm.dist, "irecv", lambda buf, src, group, tag: posted.append((buf, src)) or "work")
    monkeypatch.setattr(comm.dist, "isend", lambda t, dst, group, tag: posted.append((t, dst)) or "work")
    schedule = build_schedule("1f1b", 2, 3)
    return comm.RankComm(schedule, rank, SHAPE, torch.device("cpu"), 0.0, **dtype), posted


@pytest.mark.parametrize("dtype", [None, torch.float64, torch.bfloat16])
def test_receive_buffers_have_the_dtype_of_the_messages(monkeypatch, dtype):
    rank, posted = _comm(monkeypatch, 1, **({} if dtype is None else {"dtype": dtype}))
    rank.begin_step(0)
    want = incoming_messages(rank.schedule, 1)
    assert len(posted) == len(want) == 3  # rank 1 receives the 3 forwards' activations
    assert all(buf.dtype == (dtype or torch.float32) and tuple(buf.shape) == SHAPE for buf, _ in posted)


def test_a_send_of_another_dtype_or_shape_is_refused_before_it_leaves(monkeypatch):
    rank, posted = _comm(monkeypatch, 0, dtype=torch.float64)
    first = next(m for m in messages(rank.schedule) if m.src == 0)
    rank.send_activation(first, torch.zeros(SHAPE, dtype=torch.float64))
    assert len(posted) == 1 and posted[0][0].dtype == torch.float64
    refused = r"as torch.float32 \(2, 8, 4\), but rank 1 receives into torch.float64"
    with pytest.raises(CourseError, match=refused):
        rank.send_activation(first, torch.zeros(SHAPE))
    with pytest.raises(CourseError, match=r"\(2, 8, 5\)"):
        rank.send_activation(first, torch.zeros(2, 8, 5, dtype=torch.float64))
    assert len(posted) == 1  # nothing more left


class _Done:
    def wait(self) -> None:
        pass


def test_receive_buffers_are_reused_step_after_step_but_not_after_an_interrupted_step(monkeypatch):
    rank, posted = _comm(monkeypatch, 1)
    monkeypatch.setattr(comm.dist, "irecv", lambda buf, src, group, tag: posted.append(buf) or _Done())
    rank.begin_step(0)
    for msg in rank.incoming:
        rank.recv_activation(msg)
    first = list(posted)
    rank.begin_step(1)  # every receive of step 0 was consumed: the same buffers again
    assert [id(b) for b in posted[3:]] == [id(b) for b in first]
    rank.recv_activation(rank.incoming[0])  # then the step stops (Ctrl-C, a failed peer): 2 left posted
    rank.begin_step(2)
    again = posted[6:]
    assert again[0] is first[0] and again[1] is not first[1] and again[2] is not first[2]


def test_a_receive_the_last_step_waited_for_first_releases_the_spent_graphs(monkeypatch):
    rank, _ = _comm(monkeypatch, 1)
    monkeypatch.setattr(comm.dist, "irecv", lambda buf, src, group, tag: _Done())
    released = []
    stage = type("Stage", (), {"release_graphs": lambda self: released.append(1)})()
    idle = IdleComm(rank, [stage])
    idle.begin_step(0)
    first, second, third = rank.incoming
    assert idle.waited_last_step(first) == 0.0  # the first step has no last step
    idle.recv_activation(first)
    assert released == []
    rank.recv_events = [
        comm.RecvEvent(first.producer, 0, 1.0, 1.25),
        comm.RecvEvent(second.producer, 0, 2.0, 2.0),
    ]
    idle.begin_step(1)
    assert [idle.waited_last_step(m) for m in (first, second, third)] == [0.25, 0.0, 0.0]
    idle.recv_activation(first)  # waited 0.25 s last step: release now, while waiting again
    idle.recv_activation(second)  # came at once last step: no time to hide it
    assert released == [1] and idle.recv_events == rank.recv_events and len(rank.recv_events) == 2
