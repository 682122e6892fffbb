"""The distributed engine: one process per pipeline rank, real sends and receives, measured wall clock.

From a notebook or Python (spawns p processes on this machine, returns the result to the caller)::

    from course_lib.shelf.reference import TrainConfig
    from course_lib.shelf.distributed_engine import run_distributed
    from course_lib.shelf.costs import Link
    r = run_distributed(TrainConfig(n_layers=8, steps=5), "1f1b", stages=2)
    r.losses, r.step_time_s, r.timeline.bubble_fraction        # measured
    r = run_distributed(TrainConfig(n_layers=8, steps=5), "1f1b", stages=2,
                        links=Link(latency_s=0.05))               # a 50 ms link between the stages

A built schedule runs as well as a name (one process per device of it), e.g. 1F1B with a deeper
warm-up to hide a slow link (``course_lib/schedules/latency_aware.py``)::

    from course_lib.schedules.latency_aware import latency_aware_1f1b
    r = run_distributed(TrainConfig(n_layers=8, steps=5, batch_size=8, microbatches=8),
                        latency_aware_1f1b(2, 8, extra_per_link=3), links=Link(latency_s=0.03))

TP x PP x DP (Megatron's layout, ``course_lib/tp/mesh.py``): t * p * d processes; each pipeline
stage split across t ranks (``course_lib/tp/shard.py``), d replicas each on its share of every
micro-batch, gradients averaged over the replicas once per step::

    r = run_distributed(TrainConfig(n_layers=4, steps=2, batch_size=8), "1f1b", stages=2, tp=2, dp=2)
    r.losses, r.timeline          # the timeline of rank 0's pipeline (replica 0, TP rank 0)

From the shell, with torchrun (one process per rank; rank 0 prints the summary; ``cli/torchrun.py``)::

    torchrun --nproc-per-node 2 -m course_lib.cli.torchrun --schedule 1f1b --layers 8 --steps 5
    torchrun --nproc-per-node 2 -m course_lib.cli.torchrun --schedule interleaved-1f1b \\
        --virtual-stages 2 --microbatches 4 --latency 0.05 --json

(Spell flags out under torchrun: it reads ``-m`` and abbreviations such as ``--virtual`` as its own.)

Several machines (README.md, "Several machines"; the interface: ``course_lib/netif.py``), the same
command on every node but for --node-rank::

    python -m course_lib.cli.torchrun --nnodes 2 --nproc-per-node 1 --node-rank 0 --master-addr HOST0 \\
        --master-port 29500 --rdzv-conf timeout=60 -m course_lib.cli.torchrun --schedule gpipe --layers 80

(torchrun's launch with torchrun's arguments; a node whose rendezvous fails ends with one line.)

Backend: gloo on CPUs, NCCL when the ranks run on GPUs (``--device cuda``: rank r uses its local
GPU). A failed rank stops the others and is named (``course_lib/shelf/launcher.py`` says how); under torchrun,
torchrun itself tears the group down and names the failed rank.

This module is the parent's side: check a run (``make_spec``) and spawn its ranks (``launch``). What
each rank does, from joining the group to handing rank 0 its record, is ``dist_worker.py``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import replace

import torch
from tqdm.auto import tqdm

from course_lib.engines.torch_pipelining import check_runner
from course_lib.shelf.costs import Link
from course_lib.shelf.errors import check_threads, check_timeout, divisors, require
from course_lib.shelf.launcher import DistributedError, spawn
from course_lib.shelf.local_engine import make_plan
from course_lib.shelf.model import load_corpus
from course_lib.shelf.rank_loop import run_specs
from course_lib.shelf.reference import TrainConfig
from course_lib.shelf.run_spec import FAULT_KINDS, DistributedResult, Fault, RunSpec
from course_lib.shelf.schedule import Schedule
from course_lib.shelf.stage import gpu_count
from course_lib.tp.mesh import Mesh
from course_lib.tp.shard import check_divisible

__all__ = ["DistributedError", "DistributedResult", "Fault", "launch", "make_spec", "run_distributed"]

# Each rank is a whole Python process with torch loaded (about 300 MB): 64 of them fill a laptop's memory
MAX_LOCAL_RANKS = 64


def _backend_device(device: str, local_ranks: int) -> str:
    """'cpu' or 'cuda' for every rank: CUDA needs one GPU per rank on this machine."""
    device = device.strip().lower()
    require(
        device in ("cpu", "cuda", "auto"), f"the distributed engine runs on 'cpu' or 'cuda', got {device!r}"
    )
    enough = gpu_count() >= local_ranks
    require(
        device != "cuda" or enough,
        f"device 'cuda' needs one GPU per rank: {local_ranks} ranks, {gpu_count()} GPUs on this machine",
    )
    return "cuda" if device == "cuda" or (device == "auto" and enough) else "cpu"


def make_spec(
    cfg: TrainConfig, schedule: str | Schedule = "1f1b", stages: int | None = None, *,
    virtual: int | None = None, partition: list[int] | tuple[int, ...] | None = None,
    links: Link | list[Link] | None = None, checkpoint: str = "never", timeout_s: float = 60.0,
    fault: Fault | None = None, return_grads: bool = False, threads: int | None = None,
    local_ranks: int | None = None, direction_groups: bool | None = None, track_memory: bool = True,
    tp: int = 1, dp: int = 1, pace_s: tuple[float, float] | None = None, runner: str = "distributed",
) -> RunSpec:  # fmt: skip
    """Check every input and build the spec; raises CourseError before any process starts.

    `schedule`: a name (built for `stages` ranks, default 2, x `virtual`) or a built Schedule such as
    ``latency_aware_1f1b(2, 8, extra_per_link=3)``, which says how many ranks and stages per rank.
    The plan (schedule, `partition`: layers per stage with embedding and head, `links`: a Link or one
    per stage boundary, `checkpoint`) is the local engine's (``shelf.local_engine.make_plan``). `timeout_s`:
    how long a rank waits for a silent peer; `fault`: a Fault (its rank of all t x p x d), to watch a
    failure; `threads`: torch threads per rank; ``track_memory=False`` skips measuring bytes saved for
    backward (for timing). `tp`: ranks each stage is split across; `dp`: data-parallel replicas.
    `pace_s`: (forward, backward) seconds, the least each F and B span lasts (a fixed stage cost).
    `runner`: "distributed" (this engine), "torch" or "torch-csv" (torch_pipelining.py: the same run on
    torch.distributed.pipelining, by torch's class for the schedule or by its runtime fed our CSV)."""
    if stages is None and not isinstance(schedule, Schedule):
        stages = 2
    plan = make_plan(cfg, schedule, stages, virtual, partition, checkpoint, links)
    sched, ranks = plan.schedule, plan.schedule.n_devices
    ours_only = dict(links=links, checkpoint=checkpoint != "never", fault=fault, return_grads=return_grads,
                     tp=tp > 1, dp=dp > 1, pace_s=pace_s)  # fmt: skip
    check_runner(runner, sched, cfg, ours_only)
    mesh = Mesh(t=tp, p=ranks, d=dp)
    local_ranks = local_ranks or mesh.world  # ranks on this machine (torchrun: LOCAL_WORLD_SIZE)
    _check_mesh(cfg, mesh, local_ranks)
    _check_data(cfg)
    require(
        sched.n_stages == ranks * sched.stages_per_device,
        f"schedule {sched.name!r} puts {sched.n_stages} stages on {ranks} devices; the distributed engine "
        "needs the same number of stages on every device",
    )
    timeout_s = check_timeout(timeout_s)
    _check_latency(plan.links, timeout_s)
    if fault is not None:
        require(fault.how in FAULT_KINDS, f"fault.how must be one of {FAULT_KINDS}, got {fault.how!r}")
        require(0 <= fault.rank < mesh.world, f"fault.rank must be in 0..{mesh.world - 1}, got {fault.rank}")
    if pace_s is not None:
        require(
            len(pace_s) == 2 and all(x > 0 for x in pace_s) and not sched.split_backward,
            f"pace_s must be (forward, backward) seconds > 0, for a schedule with a fused backward; got "
            f"{pace_s!r} for {sched.name!r}",
        )
    device = _backend_device(cfg.device, local_ranks)
    return RunSpec(
        cfg=replace(cfg, device=device), schedule=sched, partition=plan.partition, ranks=ranks,
        virtual=sched.stages_per_device, links=tuple(plan.links) if plan.links is not None else None,
        checkpoint=checkpoint, timeout_s=float(timeout_s), backend="nccl" if device == "cuda" else "gloo",
        # NCCL needs them (see comm.py); with gloo they are optional (the tests use them there)
        direction_groups=device == "cuda" if direction_groups is None else direction_groups,
        track_memory=track_memory and runner == "distributed", fault=fault, return_grads=return_grads,
        threads=check_threads(threads) or max(1, (os.cpu_count() or 1) // local_ranks), tp=tp, dp=dp,
        pace_s=None if pace_s is None else (float(pace_s[0]), float(pace_s[1])), runner=runner,
    )  # fmt: skip


def _check_mesh(cfg: TrainConfig, mesh: Mesh, local_ranks: int) -> None:
    """TP must split the heads and the width (and so the MLP's 4x width) evenly; DP must split every
    micro-batch evenly; and this machine must not be asked for more processes than MAX_LOCAL_RANKS."""
    check_divisible(cfg.model_config(vocab_size=2), mesh.t)
    per_mb = cfg.batch_size // cfg.microbatches
    require(
        per_mb % mesh.d == 0,
        f"dp={mesh.d} replicas cannot share a micro-batch of {per_mb} samples (batch_size {cfg.batch_size} / "
        f"{cfg.microbatches} micro-batches) evenly; choose dp among the divisors of {per_mb}: "
        f"{', '.join(map(str, divisors(per_mb)))}",
    )
    require(
        local_ranks <= MAX_LOCAL_RANKS,
        f"t x p x d = {mesh.t} x {mesh.p} x {mesh.d} = {mesh.world} ranks would start {local_ranks} "
        f"processes on this machine, over the limit of {MAX_LOCAL_RANKS} "
        "(course_lib.shelf.distributed_engine.MAX_LOCAL_RANKS)",
    )


def _check_latency(links: list[Link] | None, timeout_s: float) -> None:
    """A rank waits for every message at least its link's latency: one at or over the timeout would
    fail the run after the timeout, blaming a rank that "stopped answering". Refused here instead."""
    slowest = max((link.latency_s for link in links or ()), default=0.0)
    require(
        slowest < timeout_s,
        f"link latency {slowest:g} s is not below the timeout of {timeout_s:g} s: every rank would wait "
        f"longer than the timeout for its first message; raise --timeout (timeout_s) above "
        f"{slowest:g} s times the messages a step waits for in a row, or lower the latency",
    )


def _check_data(cfg: TrainConfig) -> None:
    """Refuse here what the reference trainer refuses when it reads its first windows of data (a
    missing file, a `seq_len` longer than a split): the same calls, so the same rule and message."""
    corpus = load_corpus(cfg.data_path) if cfg.data_path else load_corpus()
    for split in ("val", "train"):  # the reference evaluates before it trains
        corpus.batch(split, 1, cfg.seq_len, torch.Generator())


def launch(
    specs: list[RunSpec], progress: bool = False, stop: Callable[[int], bool] | None = None
) -> list[DistributedResult]:
    """Spawn the ranks once and run every spec (all with the same ranks and backend) in turn.
    Starting processes is the slow part on a laptop, so the tests group several runs this way.
    `stop(steps_done)`, the local engine's protocol, is asked many times a second; True ends every
    rank's process and raises KeyboardInterrupt (``spawn``'s `should_stop`)."""
    require(len(specs) >= 1, "launch needs at least one spec (from make_spec)")
    mesh, backend = specs[0].mesh, specs[0].backend
    require(
        all(s.mesh == mesh and s.backend == backend for s in specs),
        "every spec of one launch needs the same ranks (tp, stages, dp) and the same device",
    )
    ranks = mesh.world
    timeout_s = max(s.timeout_s for s in specs)
    steps = sum(s.cfg.steps for s in specs)
    with tqdm(total=steps, desc=f"distributed, {ranks} ranks", disable=not progress) as bar:
        done = [0]  # steps done (a disabled bar does not count them)

        def on_progress(rank: int, loss: float) -> None:
            done[0] += 1
            bar.update(1)
            bar.set_postfix(loss=f"{loss:.3f}")

        asked = None if stop is None else (lambda: stop(done[0]))
        try:
            values = spawn(
                run_specs, ranks, (specs,), backend=backend, timeout_s=timeout_s, on_progress=on_progress,
                should_stop=asked,
            )  # fmt: skip
        except DistributedError as err:
            raise naming_slow_links(naming_a_missing_guard(err), specs, timeout_s) from None
    return values[0]


def naming_a_missing_guard(err: DistributedError) -> DistributedError:
    """`err` with a hint when a rank died before it could report and this process runs a script: the
    spawn and forkserver start methods import that script again in every rank, and one without an
    ``if __name__ == "__main__":`` guard starts its run again there, which multiprocessing refuses
    (its traceback goes to this terminal, not to the rank log)."""
    main = sys.modules.get("__main__")
    script = getattr(main, "__spec__", None) is None and hasattr(main, "__file__")  # python path/to/x.py
    if not (script and "exit code 1 without reporting" in err.cause):
        return err
    return _with_hint(err, f"if {main.__file__} starts the run when imported, put its code under "
                      '`if __name__ == "__main__":`, as every rank imports the script again')  # fmt: skip


def _with_hint(err: DistributedError, hint: str) -> DistributedError:
    """The same failure, its message followed by `hint`."""
    named = DistributedError(f"{err}; {hint}", err.failed_rank, err.cause, err.outcomes)
    named.stopped_after_s = err.stopped_after_s
    return named


def naming_slow_links(err: DistributedError, specs: list[RunSpec], timeout_s: float) -> DistributedError:
    """`err` saying which input made a timed-out run slow, when its links have a latency: a micro-batch's
    forward and backward cross 2(n-1) boundaries one after another, each paying it, against the timeout."""
    waits = [(link.latency_s, 2 * (s.schedule.n_stages - 1)) for s in specs for link in s.links or ()]
    latency, messages = max(waits, default=(0.0, 0))
    timed_out = any(w in err.cause for w in ("stopped answering", "imed out", "timeout"))
    if not (timed_out and latency > 0):
        return err
    return _with_hint(
        err, f"the links' latency of {latency:g} s, paid by {messages} messages one after another "
        f"({latency * messages:g} s for one micro-batch), against the timeout of {timeout_s:g} s may be what "
        "made it slow: raise --timeout (timeout_s) or lower --latency",
    )  # fmt: skip


def run_distributed(
    cfg: TrainConfig, schedule: str | Schedule = "1f1b", stages: int | None = None, *, progress: bool = False,
    stop: Callable[[int], bool] | None = None, **options,
) -> DistributedResult:  # fmt: skip
    """Train with `stages` processes on this machine (gloo on CPU, NCCL with ``cfg.device='cuda'``).

    `schedule` and the options are ``make_spec``'s, all checked before any process starts. A failed
    rank raises DistributedError naming it, its exception and the log of the ranks' tracebacks: a
    crash at once, a stopped process in seconds, a hang within ``timeout_s`` (``launch.py`` says how).
    ``progress=True`` shows a progress bar (steps done, last loss); `stop(steps_done)` (see ``launch``)
    ends the run early."""
    return launch([make_spec(cfg, schedule, stages, **options)], progress, stop)[0]


if __name__ == "__main__":  # `torchrun ... -m course_lib.shelf.distributed_engine` works: it runs
    import runpy  # the CLI's entry point by name, so that the engines import nothing from the floor above

    runpy.run_module("course_lib.cli.torchrun", run_name="__main__", alter_sys=True)
