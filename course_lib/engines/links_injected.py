"""Injected links: make a message between two processes on one machine arrive as over a real link.

A real link delays *delivery*, not the sender: the sender's network card takes the bytes and the
GPU goes on computing; the last byte lands ``latency + bytes / bandwidth`` later, and messages on
the same wire queue for bandwidth while their latencies overlap (several can be in flight). This
module does the same with one sender thread per destination rank (one wire per direction):

    compute thread --enqueue--> [queue] --> sender thread: sleep until the message's delivery
                                                           time, then isend it

The delivery time is worked out when the message is enqueued, with the alpha-beta model of
``course_lib.shelf.costs.Link`` and a wire that is busy for ``bytes / bandwidth`` per message:

    on_wire_end = max(wire_free, now) + bytes / bandwidth;  wire_free = on_wire_end
    deliver_at  = on_wire_end + latency

Delivery times on one wire only grow, so one thread per wire can deliver them in order without
adding delay. The transfer on localhost itself takes microseconds, small next to the injected
milliseconds. So WAN lessons (50 ms between datacentres) run for real on a laptop: pass
``links=Link(latency_s=0.05)`` to ``run_distributed`` and compare the measured step with a free link.
"""

from __future__ import annotations

import queue
import threading
import time

import torch
import torch.distributed as dist

from course_lib.shelf.costs import Link


class _Wire(threading.Thread):
    """One direction of one link: delivers queued messages at their delivery times, in order."""

    def __init__(self, dst: int):
        super().__init__(name=f"course-link-to-rank{dst}", daemon=True)
        self.dst = dst
        self.items: queue.Queue = queue.Queue()
        self.handles: list[object] = []
        self.error: BaseException | None = None
        self.wire_free = 0.0

    def run(self) -> None:
        while True:
            item = self.items.get()
            try:
                if item is None:  # shutdown
                    return
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


class InjectedLinks:
    """The sender side of every injected link of one rank (one thread per destination rank)."""

    def __init__(self) -> None:
        self._wires: dict[int, _Wire] = {}

    def enqueue(self, tensor: torch.Tensor, dst: int, tag: int, nbytes: int, link: Link, group=None) -> float:
        """Queue `tensor` for rank `dst` (on process `group`, None: the default one); returns its
        delivery time (perf_counter seconds)."""
        wire = self._wires.get(dst)
        if wire is None:
            wire = self._wires[dst] = _Wire(dst)
            wire.start()
        now = time.perf_counter()
        wire.wire_free = max(wire.wire_free, now) + nbytes / link.bandwidth_Bps  # 0 s on a free link
        deliver_at = wire.wire_free + link.latency_s
        wire.items.put((tensor, tag, deliver_at, group))
        return deliver_at

    def drain(self) -> list[object]:
        """Block until every queued message has been handed to torch.distributed; return the sends."""
        handles = []
        for wire in self._wires.values():
            wire.items.join()
            if wire.error is not None:
                raise wire.error
            handles += wire.handles
            wire.handles = []
        return handles

    def close(self) -> None:
        for wire in self._wires.values():
            wire.items.put(None)
        for wire in self._wires.values():
            wire.join(timeout=1.0)
