"""Injected links: a message between two processes on one machine arrives as over a real link.

A room beside the shelf's sends and receives (``course_lib/shelf/p2p.py``): importing it
(``course_lib.engines`` does, so ``course_lib.lesson`` and the command line load it) lets
``run_distributed(..., links=Link(...))`` run on real processes. A 50 ms WAN between datacentres then
runs for real on one laptop; compare its measured step with a free link's::

    from course_lib.shelf.costs import Link
    r = run_distributed(TrainConfig(n_layers=8, steps=5), "1f1b", stages=2, links=Link(latency_s=0.05))

A real link delays *delivery*, not the sender: the sender's network card takes the bytes and the GPU
goes on computing. So does this room, with one sender thread per destination rank (``Wire``, one per
direction): the compute thread queues each message with the time it would arrive, and the wire hands
it to ``isend`` then. A spec with links carries ``InjectedLinks`` among its rooms, so every rank
(pickled by reference) imports this module and sends through ``LinkedComm``.

What a link's latency does to a run's timeout is checked here too: a latency at or over the timeout is
refused before any process starts (a run that timed out with slow links says so: ``failure_hints.py``).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import partial

import torch
import torch.distributed as dist

from course_lib.shelf.costs import Link
from course_lib.shelf.distributed_engine import RoomOption, add_room_option
from course_lib.shelf.errors import require
from course_lib.shelf.launcher import PeerFailure
from course_lib.shelf.p2p import RankComm
from course_lib.shelf.rank_loop import PipelineRank
from course_lib.shelf.run_spec import RunSpec
from course_lib.shelf.schedule import Message


class Wire(threading.Thread):
    """One direction of an injected link: delivers queued messages at their delivery times, in order.

    A real link delays *delivery*, not the sender: the last byte lands ``latency + bytes / bandwidth``
    after it left, and messages on one wire queue for bandwidth while their latencies overlap::

        on_wire_end = max(wire_free, now) + bytes / bandwidth;  wire_free = on_wire_end
        deliver_at  = on_wire_end + latency

    Delivery times on one wire only grow, so one thread per wire delivers them in order without adding
    delay (the transfer on localhost itself takes microseconds)."""

    def __init__(self, dst: int):
        super().__init__(name=f"course-link-to-rank{dst}", daemon=True)
        self.dst, self.items, self.handles = dst, queue.Queue(), []
        self.error: BaseException | None = None
        self.wire_free = 0.0
        self.start()

    def enqueue(self, tensor: torch.Tensor, tag: int, nbytes: int, link: Link, group=None) -> float:
        """Queue `tensor` (on process `group`, None: the default one); its delivery time (perf_counter)."""
        self.wire_free = max(self.wire_free, time.perf_counter()) + nbytes / link.bandwidth_Bps
        deliver_at = self.wire_free + link.latency_s
        self.items.put((tensor, tag, deliver_at, group))
        return deliver_at

    def run(self) -> None:
        while (item := self.items.get()) is not None:
            try:
                tensor, tag, deliver_at, group = item
                if tensor.is_cuda:
                    torch.cuda.set_device(tensor.device)
                time.sleep(max(0.0, deliver_at - time.perf_counter()))
                if self.error is None:
                    self.handles.append(dist.isend(tensor, dst=self.dst, group=group, tag=tag))
            except BaseException as err:  # reported to the compute thread by drain()
                self.error = err
            finally:
                self.items.task_done()

    def drain(self) -> list[object]:
        """Block until every queued message has been handed to torch.distributed; return the sends."""
        self.items.join()
        if self.error is not None:
            raise self.error
        handles, self.handles = self.handles, []
        return handles

    def close(self) -> None:
        self.items.put(None)
        self.join(timeout=1.0)


@dataclass
class LinkedComm(RankComm):
    """A rank's sends and receives, each send handed to the wire towards its receiver."""

    links: Sequence[Link] = ()  # one per stage boundary

    def __post_init__(self) -> None:
        super().__post_init__()
        self.wires: dict[int, Wire] = {}  # one per destination

    def hand_over(self, msg: Message, tensor: torch.Tensor, tag: int) -> float:
        """Queue `tensor` on its wire, which delivers it as over the boundary's link; when (rank clock)."""
        dst = self._global(msg.dst)
        wire = self.wires.get(dst) or self.wires.setdefault(dst, Wire(dst))
        return wire.enqueue(tensor, tag, tensor.nbytes, self.links[msg.boundary], self._group(msg)) - self.t0

    def finish(self) -> None:
        """Wait until every wire has handed its messages over, then until every send has left."""
        try:
            for wire in self.wires.values():
                self.handles += wire.drain()
        except Exception as err:
            raise PeerFailure(f"rank {self.rank}: a send failed: {type(err).__name__}: {err}") from err
        super().finish()

    def close(self) -> None:
        """Stop the wire threads."""
        for wire in self.wires.values():
            wire.close()


class InjectedLinks(PipelineRank):
    """A pipeline rank whose messages cross the spec's links (``LinkedComm``)."""

    @property
    def comm_type(self) -> partial[LinkedComm]:
        return partial(LinkedComm, links=self.spec.links)


def check_latency(links: Sequence[Link], timeout_s: float) -> None:
    """A rank waits for every message at least its link's latency: one at or over the timeout would
    fail the run after the timeout, blaming a rank that "stopped answering". Refused here instead."""
    slowest = max((link.latency_s for link in links), default=0.0)
    require(
        slowest < timeout_s,
        f"link latency {slowest:g} s is not below the timeout of {timeout_s:g} s: every rank would wait "
        f"longer than the timeout for its first message; raise --timeout (timeout_s) above "
        f"{slowest:g} s times the messages a step waits for in a row, or lower the latency",
    )


def _widen(spec: RunSpec, given: dict, local_ranks: int | None) -> RunSpec:
    """A spec with links: checked against its timeout, its ranks sending through ``LinkedComm``."""
    check_latency(spec.links, spec.timeout_s)
    return replace(spec, rooms=(*spec.rooms, InjectedLinks))


add_room_option(RoomOption(("links",), {"links": None}, _widen))
