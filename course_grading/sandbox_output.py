"""What a sandboxed student's code prints, read by the grader without a thread of its own.

The grader reads the worker's stdout and stderr while it waits for a reply (``Sandbox._request``
selects on both pipes), so a full pipe never blocks the worker; after the reply, ``take`` drains what
is left. The worker flushes before it replies, so the output of a request is never late: a reader
thread could fall behind on a busy machine and hand one cell's output to the next.
"""

from __future__ import annotations

import os
import select


class Output:
    """The sandbox's stdout and stderr, read while the grader waits for a reply (the first `cap` characters
    since the last take() kept). The worker flushes before it replies: `drain` then reads all it printed."""

    def __init__(self, stream, cap: int) -> None:
        self.stream = stream  # held, so that its fd stays open after the process and its Popen are gone
        self.fd, self.cap, self.kept, self.dropped, self.open = stream.fileno(), cap, [], 0, True
        os.set_blocking(self.fd, False)

    def read(self) -> None:
        try:
            chunk = os.read(self.fd, 65536)
        except BlockingIOError:
            return
        self.open = bool(chunk)
        room = max(self.cap - sum(len(k) for k in self.kept), 0)
        self.kept.append(chunk[:room].decode(errors="replace"))
        self.dropped += max(len(chunk) - room, 0)

    def drain(self) -> None:
        while self.open and select.select([self.fd], [], [], 0)[0]:
            self.read()

    def take(self) -> str:
        self.drain()
        text, dropped = "".join(self.kept), self.dropped
        self.kept, self.dropped = [], 0
        return text + (f"\n... ({dropped} more characters of output not shown)\n" if dropped else "")
