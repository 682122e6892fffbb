"""The course's one stop rule, from a cell: Kernel > Interrupt ends a run with one line, no traceback.

A real kernel (the lessons' own, started by jupyter_client) runs ``lesson.setup()``, then a cell that
trains; the test interrupts it as JupyterLab's Kernel > Interrupt does (SIGINT to the kernel). Runs
started by a widget's button are covered in test_dashboard.py and test_lessons_02_04.py.
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.processes, pytest.mark.timeout(180)]  # a kernel process
SHM = Path("/dev/shm")
SEM_INODE = re.compile(r"^\S+ \S+ \S+ \S+ (\d+) +/dev/shm/sem\.", re.M)  # a mapped semaphore's inode

TRAINING_CELL = """
from course_lib.shelf.reference import TrainConfig, train
print("training", flush=True)
train(TrainConfig(n_layers=2, steps=100_000, seq_len=8, batch_size=2, microbatches=1), progress=False)
"""


@pytest.fixture(scope="module")
def kernel():
    jupyter_client = pytest.importorskip("jupyter_client")
    manager, client = jupyter_client.manager.start_new_kernel(kernel_name="python3")
    try:
        yield manager, client
    finally:
        client.stop_channels()
        # as JupyterLab's shutdown: the kernel exits, and its multiprocessing folder (pymp-*, the
        # forkserver's socket) goes with it; now=True kills its process group, forkserver included
        manager.shutdown_kernel()


def run(
    kernel, code: str, interrupt_on: str | None = None, wait_s: float = 0.5, timeout_s: float = 120
) -> tuple[str, list]:
    """Execute `code`; SIGINT the kernel `wait_s` after `interrupt_on` was printed, as Kernel > Interrupt
    does (to the kernel's process group). Returns (status, outputs)."""
    manager, client = kernel
    msg_id, outputs = client.execute(code), []
    deadline = time.monotonic() + timeout_s
    while True:
        msg = client.get_iopub_msg(timeout=max(1.0, deadline - time.monotonic()))
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        kind, content = msg["msg_type"], msg["content"]
        if kind == "status" and content["execution_state"] == "idle":
            break
        if kind in ("stream", "error", "display_data"):
            outputs.append((kind, content))
            if interrupt_on and kind == "stream" and interrupt_on in content["text"]:
                time.sleep(wait_s)  # inside the training loop by now
                manager.interrupt_kernel()
    return _reply(client, msg_id)["content"]["status"], outputs


def _reply(client, msg_id: str, timeout_s: float = 30) -> dict:
    """The shell reply to `msg_id`. Not simply the next shell message: on a busy machine
    start_new_kernel's wait_for_ready may have sent kernel_info more than once, and the extra
    kernel_info replies ("status": "ok") still wait in the shell channel."""
    deadline = time.monotonic() + timeout_s
    while True:
        msg = client.get_shell_msg(timeout=max(1.0, deadline - time.monotonic()))
        if msg["parent_header"].get("msg_id") == msg_id:
            return msg


def test_an_interrupted_training_cell_shows_one_line_and_stops_run_all(kernel):
    status, outputs = run(kernel, "from course_lib import lesson\nlesson.setup(quiet=True)")
    from course_lib.lesson import READABLE_OUTPUT

    styles = [c["data"].get("text/html", "") for kind, c in outputs if kind == "display_data"]
    assert status == "ok" and styles == [f"<style>{READABLE_OUTPUT}</style>"]  # lines wrap between words
    status, outputs = run(kernel, TRAINING_CELL, interrupt_on="training")
    errors = [content for kind, content in outputs if kind == "error"]
    assert status == "error"  # the cell failed: "Run All" stops here, not in a later cell that needs it
    assert len(errors) == 1 and errors[0]["ename"] == "KeyboardInterrupt"
    assert errors[0]["traceback"] == [
        "KeyboardInterrupt: stopped by Kernel > Interrupt; what this cell computed is lost: run it again to "
        "start over"
    ]  # one line: no frames from inside torch
    assert run(kernel, "1 + 1")[0] == "ok"  # the kernel works on


def test_an_error_that_is_no_interrupt_keeps_its_traceback(kernel):
    run(kernel, "from course_lib import lesson\nlesson.setup(quiet=True)")
    status, outputs = run(kernel, "def f():\n    raise ValueError('a real bug')\nf()")
    (error,) = [content for kind, content in outputs if kind == "error"]
    assert status == "error" and error["ename"] == "ValueError" and len(error["traceback"]) > 1


DISTRIBUTED_CELL = """
from course_lib.shelf.distributed_engine import run_distributed
from course_lib.shelf.reference import TrainConfig
cfg = TrainConfig(n_layers=2, steps=100_000, seq_len=8, batch_size=2, microbatches=2, eval_batches=1)
print("starting the ranks", flush=True)
run_distributed(cfg, "1f1b", stages=2)
"""


def test_an_interrupted_distributed_run_says_its_processes_ended_and_none_is_left(kernel):
    run(kernel, "from course_lib import lesson\nlesson.setup(quiet=True)")
    # the semaphores the kernel maps while the run is on, by inode: glibc makes each under a temporary
    # name it then links to sem.mp-... and deletes, so the maps show the deleted name; and only the
    # kernel's own: the other test worker's runs make theirs in /dev/shm meanwhile
    mapped, running = set(), threading.Event()
    maps = Path(f"/proc/{kernel[0].provisioner.process.pid}/maps")

    def sample() -> None:
        while not running.wait(0.05):
            mapped.update(map(int, SEM_INODE.findall(maps.read_text())))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        status, outputs = run(kernel, DISTRIBUTED_CELL, interrupt_on="starting the ranks", wait_s=8)
    finally:
        running.set()
        sampler.join()
    (error,) = [content for kind, content in outputs if kind == "error"]
    assert status == "error" and len(error["traceback"]) == 1
    assert error["traceback"][0].endswith("(all 2 rank processes ended)"), error["traceback"]
    status, outputs = run(kernel, "import multiprocessing\nprint(len(multiprocessing.active_children()))")
    assert outputs[-1][1]["text"].strip() == "0"  # no rank left behind
    # nor the launcher's queue's semaphores: freed with the stopped cell's locals, not at the kernel's end
    # (a kernel killed with SIGKILL, as jupyter_client's shutdown does, would have left them)
    assert mapped and [p.name for p in SHM.glob("sem.mp-*") if p.stat().st_ino in mapped] == []
