"""The launcher of the distributed engine: start one process per rank, collect, and stop on failure.

``launch(specs)`` spawns p processes on this machine (spawn start method, so it works from a notebook
too), each joins the process group (MASTER_ADDR 127.0.0.1, a free port) and runs every spec in turn;
rank 0 merges the ranks' records and sends the result back through a queue.

Failures: a rank that raises reports its exception and exits at once; its peers, blocked in a
receive, see the closed connection and stop too; a rank that hangs is caught by the process group's
timeout in its peers. The launcher waits at most ``timeout_s`` after the first failure for the rest
to stop by themselves, then kills what is left, and raises DistributedError naming the rank that
failed first (a rank that only saw a peer disappear is not the cause). Use it through
``course_lib.engines.distributed.run_distributed``.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import queue
import socket
import sys
import time
import traceback
from dataclasses import asdict
from datetime import timedelta

import torch
import torch.distributed as dist
from tqdm.auto import tqdm

from course_lib.engines.comm import PeerFailure
from course_lib.engines.dist_result import DistributedResult, build_result
from course_lib.engines.dist_worker import RunSpec, run_rank
from course_lib.errors import require


class DistributedError(RuntimeError):
    """A rank failed. ``failed_rank`` and ``cause`` say which and why; ``outcomes`` how each rank ended."""

    def __init__(self, message: str, failed_rank: int | None, cause: str, outcomes: dict[int, str]):
        super().__init__(message)
        self.failed_rank, self.cause, self.outcomes = failed_rank, cause, outcomes
        self.stopped_after_s: dict[int, float] = {}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_rank(spec: RunSpec, rank: int, world: int) -> torch.device:
    timeout = timedelta(seconds=spec.timeout_s)
    dist.init_process_group(spec.backend, rank=rank, world_size=world, timeout=timeout)
    if spec.backend == "nccl":
        local = int(os.environ.get("LOCAL_RANK", rank))
        torch.cuda.set_device(local)
        return torch.device(f"cuda:{local}")
    return torch.device("cpu")


def gather_and_merge(spec: RunSpec, rank: int, record: dict) -> DistributedResult | None:
    records = [None] * spec.ranks if rank == 0 else None
    dist.gather_object(record, records, dst=0)
    if rank != 0:
        return None
    return build_result(records, spec.build_schedule(), asdict(spec.cfg))


def _spawned_rank(rank: int, world: int, port: int, specs: list[RunSpec], results) -> None:
    """Entry point of one spawned process: run every spec in turn (one process group), report to
    the launcher, and never hang on the way out."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    try:
        device = init_rank(specs[0], rank, world)
        merged = []
        for spec in specs:

            def report(step: int, loss: float | None) -> None:
                if loss is not None:  # the rank with the last stage tells the launcher's progress bar
                    results.put(("step", rank, loss))

            merged.append(gather_and_merge(spec, rank, run_rank(spec, rank, device, report)))
        # pickled here, by value: torch's queue pickler would share tensors through file
        # descriptors that vanish when this process exits
        results.put(("ok", rank, pickle.dumps(merged)))
        dist.destroy_process_group()
    except BaseException as err:  # report, then leave at once: the peers see the closed connection
        peer = err.peer if isinstance(err, PeerFailure) else None
        results.put(("error", rank, (isinstance(err, PeerFailure), f"{type(err).__name__}: {err}", peer)))
        print(f"[rank {rank}] {traceback.format_exc()}", file=sys.stderr)
        results.close()
        results.join_thread()
        os._exit(1)


def _watch(procs, results, timeout_s: float, bar=None):
    """Collect reports until every process ended; after the first failure give the others
    `timeout_s` to stop by themselves, then kill them."""
    merged, errors, killed = None, {}, set()
    exited_at: dict[int, float] = {}
    failed_at = None
    while True:
        now = time.monotonic()
        for rank, p in enumerate(procs):
            if rank not in exited_at and not p.is_alive():
                exited_at[rank] = now
        try:  # drain after looking at the exits: a report sent before exiting is in the pipe
            while True:
                kind, rank, payload = results.get(timeout=0.05)
                if kind == "step":
                    if bar is not None:
                        bar.update(1)
                        bar.set_postfix(loss=f"{payload:.3f}")
                elif kind == "ok":
                    merged = pickle.loads(payload) if rank == 0 else merged
                else:
                    errors[rank] = payload
        except queue.Empty:
            pass
        for rank, p in enumerate(procs):
            if rank in exited_at and p.exitcode != 0 and rank not in errors and rank not in killed:
                how = "was killed (SIGKILL)" if p.exitcode == -9 else f"died with exit code {p.exitcode}"
                errors[rank] = (False, f"the process {how} without reporting (its stderr says more)", None)
        if errors and failed_at is None:
            failed_at = now
        if len(exited_at) == len(procs):
            break
        if failed_at is not None and now - failed_at > timeout_s:
            for rank, p in enumerate(procs):
                if p.is_alive():
                    killed.add(rank)
                    p.kill()
            for p in procs:
                p.join(5)
            for rank in killed:
                exited_at[rank] = time.monotonic()
            break
    stopped_after = {r: max(0.0, t - failed_at) for r, t in exited_at.items()} if failed_at else {}
    return merged, errors, killed, stopped_after


def launch(specs: list[RunSpec], progress: bool = False) -> list[DistributedResult]:
    """Spawn the ranks once and run every spec (all with the same number of ranks) in turn.
    Starting processes is the slow part on a laptop, so the tests group several runs this way."""
    stages = specs[0].ranks
    require(all(s.ranks == stages for s in specs), "every spec of one launch needs the same number of ranks")
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    port = free_port()
    procs = [
        ctx.Process(target=_spawned_rank, args=(r, stages, port, specs, results), daemon=True)
        for r in range(stages)
    ]
    for p in procs:
        p.start()
    total = sum(s.cfg.steps for s in specs)
    with tqdm(total=total, desc=f"distributed, {stages} ranks", disable=not progress) as bar:
        merged, errors, killed, stopped_after = _watch(procs, results, max(s.timeout_s for s in specs), bar)
    for p in procs:
        p.join(1)
    if errors or merged is None:
        # the cause: a rank's own failure, not a peer that only saw the connection close
        primary = sorted(r for r, (secondary, _, _) in errors.items() if not secondary)
        if primary:
            rank, cause = primary[0], errors[primary[0]][1]
        elif errors:  # only waits that failed: blame the rank that was waited for (it hung)
            waiter = min(errors)
            rank = errors[waiter][2]
            cause = f"it stopped answering; rank {waiter} reported: {errors[waiter][1]}"
        else:
            rank, cause = None, "no result came back from rank 0"
        outcomes = {r: errors[r][1] if r in errors else "finished" for r in range(stages)}
        outcomes |= {r: "stopped by the launcher after the timeout" for r in killed}
        err = DistributedError(f"rank {rank} failed: {cause}", rank, cause, outcomes)
        err.stopped_after_s = stopped_after
        raise err
    return merged
