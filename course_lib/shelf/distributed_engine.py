"""The distributed engine, the parent's side: check a run, spawn its ranks (lessons 04c, 08).

``make_spec`` checks a run and ``launch`` spawns one process per pipeline rank: real sends and
receives, measured wall clock. What each rank does, from joining the group to handing rank 0 its
record, is ``rank_loop.py``::

    from course_lib.shelf.reference import TrainConfig
    from course_lib.shelf.distributed_engine import run_distributed
    from course_lib.shelf.costs import Link
    r = run_distributed(TrainConfig(n_layers=8, steps=5), "1f1b", stages=2)
    r.losses, r.step_time_s, r.timeline.bubble_fraction        # measured
    r = run_distributed(TrainConfig(n_layers=8, steps=5), "1f1b", stages=2,
                        links=Link(latency_s=0.05))               # a 50 ms link (engines/injected_links.py)

A built schedule runs as well as a name (one process per device of it), e.g.
``latency_aware_1f1b(2, 8, extra_per_link=3)`` (``course_lib/schedules/latency_aware.py``).

TP x PP x DP (Megatron's layout), an injected fault, torch's own runtime, injected links, paced ops and
the whole model's gradient rules are rooms of their own (``course_lib/tp/mesh.py``, ``course_lib/engines/``):
each adds its options to ``make_spec`` when imported (``course_lib.lesson`` and the command line import
them), and widens the ranks only of a run that asks for it::

    import course_lib.tp.mesh  # noqa: F401  (adds tp= and dp=)
    r = run_distributed(TrainConfig(n_layers=4, steps=2, batch_size=8), "1f1b", stages=2, tp=2, dp=2)

From the shell, one process per rank under torchrun, on one machine or several (``cli/torchrun.py``)::

    torchrun --nproc-per-node 2 -m course_lib.cli.torchrun --schedule 1f1b --layers 8 --steps 5

Backend: gloo on CPUs, NCCL when the ranks run on GPUs (``--device cuda``: rank r uses its local GPU).
A failed rank stops the others and is named (``launcher.py`` says how); under torchrun, torchrun itself
tears the group down and names the failed rank.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
from tqdm.auto import tqdm

from course_lib.shelf.costs import Link
from course_lib.shelf.errors import check_threads, check_timeout, require
from course_lib.shelf.launcher import DistributedError, spawn
from course_lib.shelf.local_engine import make_plan
from course_lib.shelf.model import load_corpus
from course_lib.shelf.rank_loop import run_specs
from course_lib.shelf.reference import TrainConfig
from course_lib.shelf.run_spec import DistributedResult, RunSpec
from course_lib.shelf.schedule import Schedule
from course_lib.shelf.stage import SPLIT_BACKWARD_RUNTIME, gpu_count

__all__ = ["DistributedError", "DistributedResult", "launch", "make_spec", "run_distributed"]

# Each rank is a whole Python process with torch loaded (about 300 MB): 64 of them fill a laptop's memory
MAX_LOCAL_RANKS = 64


@dataclass(frozen=True)
class RoomOption:
    """Options of ``make_spec`` that a room adds when it is imported: ``widen(spec, given, local_ranks)``
    checks the values `given` (by name) and returns the spec widened; rooms widen in `order`. Values
    equal to `idle` ask nothing of the room: the plain pipeline runs."""

    names: tuple[str, ...]
    idle: dict
    widen: Callable[[RunSpec, dict, int | None], RunSpec]
    order: int = 0


ROOM_OPTIONS: list[RoomOption] = []  # filled by the rooms (add_room_option), read by make_spec
# rooms every run of this engine takes once loaded (speed: engines/idle_release.py)
DEFAULT_ROOMS: list[type] = []
# the rooms' options, their idle values and where each room lives: only to accept an idle value, and
# to say what to import, when the room is not loaded
ROOM_HOMES = {"tp": (1, "course_lib.tp.mesh"), "dp": (1, "course_lib.tp.mesh"),
              "fault": (None, "course_lib.engines.faults"),
              "runner": ("distributed", "course_lib.engines.torch_pipelining"),
              "pace_s": (None, "course_lib.engines.paced_ops"),
              "links": (None, "course_lib.engines.injected_links"),
              "tie_embeddings": (False, "course_lib.engines.whole_model"),
              "clip_grad_norm": (None, "course_lib.engines.whole_model")}  # fmt: skip
# what rooms add to a failed run's message (engines/failure_hints.py): (error, specs, timeout_s) -> the
# error, with a hint or as it was
FAILURE_HINTS: list[Callable[[DistributedError, list[RunSpec], float], DistributedError]] = []


def add_room_option(option: RoomOption) -> None:
    """Called by a room when imported (again: replaced, so a reloaded room counts once)."""
    ROOM_OPTIONS[:] = [o for o in ROOM_OPTIONS if o.names != option.names] + [option]
    ROOM_OPTIONS.sort(key=lambda o: o.order)


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
    virtual: int | None = None, partition: list[int] | tuple[int, ...] | str | None = None,
    links: Link | list[Link] | None = None, checkpoint: str = "never", timeout_s: float = 60.0,
    return_grads: bool = False, threads: int | None = None, local_ranks: int | None = None,
    direction_groups: bool | None = None, track_memory: bool = True, **room_options,
) -> RunSpec:  # fmt: skip
    """Check every input and build the spec; raises CourseError before any process starts.

    `schedule`: a name (built for `stages` ranks, default 2, x `virtual`) or a built Schedule such as
    ``latency_aware_1f1b(2, 8, extra_per_link=3)``, which says how many ranks and stages per rank.
    The plan (schedule, `partition`: layers per stage with embedding and head, `links`: a Link or one
    per stage boundary, `checkpoint`) is the local engine's (``shelf.local_engine.make_plan``).
    `timeout_s`: how long a
    rank waits for a silent peer; `threads`: torch threads per rank; `local_ranks`: ranks on this
    machine (default all); ``track_memory=False`` skips measuring bytes saved for backward (for
    timing). `room_options`: the rooms' (ROOM_OPTIONS), e.g. ``tp=2, dp=2`` (TP x PP x DP),
    ``fault=Fault(rank=1)``, ``runner="torch"`` (torch.distributed.pipelining runs it), ``pace_s=(F, B)``
    (each op lasts at least this long: a fixed stage cost)."""
    if stages is None and not isinstance(schedule, Schedule) and not isinstance(partition, str):
        stages = 2  # (a layout string says its own stages: one rank each unless `stages` is given)
    plan = make_plan(cfg, schedule, stages, virtual, partition, checkpoint, links)
    sched = plan.schedule
    _check_data(cfg)
    require(
        sched.n_stages == sched.n_devices * sched.stages_per_device,
        f"schedule {sched.name!r} puts {sched.n_stages} stages on {sched.n_devices} devices; the "
        "distributed engine needs the same number of stages on every device",
    )
    timeout_s = check_timeout(timeout_s)
    spec = RunSpec(
        cfg=cfg, schedule=sched, partition=plan.partition, checkpoint=checkpoint, timeout_s=float(timeout_s),
        links=tuple(plan.links) if plan.links is not None else None, return_grads=return_grads,
        track_memory=track_memory, rooms=tuple(DEFAULT_ROOMS), split_runtime=_split_runtime(sched),
    )  # fmt: skip
    # the plan's links and the config's whole-model rules are rooms' too (injected_links, whole_model)
    rules = {"tie_embeddings": cfg.tie_embeddings, "clip_grad_norm": cfg.clip_grad_norm}
    spec = _widen(spec, room_options | rules | {"links": spec.links}, local_ranks)
    local_ranks = local_ranks or spec.world  # ranks on this machine (torchrun: LOCAL_WORLD_SIZE)
    require(
        local_ranks <= MAX_LOCAL_RANKS,
        f"{spec.world} ranks would start {local_ranks} processes on this machine, over the limit of "
        f"{MAX_LOCAL_RANKS} (course_lib.shelf.distributed_engine.MAX_LOCAL_RANKS)",
    )
    device = _backend_device(cfg.device, local_ranks)
    return replace(
        spec, cfg=replace(cfg, device=device), backend="nccl" if device == "cuda" else "gloo",
        # NCCL needs them (see p2p.py); with gloo they are optional (the tests use them there)
        direction_groups=device == "cuda" if direction_groups is None else direction_groups,
        threads=check_threads(threads) or max(1, (os.cpu_count() or 1) // local_ranks),
    )  # fmt: skip


def _split_runtime(schedule: Schedule) -> type | None:
    """The registered runtime of I and W for a schedule that splits backward (checked here, before any
    process starts, rather than in each rank)."""
    if not schedule.split_backward:
        return None
    require(
        bool(SPLIT_BACKWARD_RUNTIME),
        f"schedule {schedule.name!r} splits backward into I and W, whose runtime lives in the room "
        "course_lib.engines.split_backward: `import course_lib.engines` first (course_lib.lesson and the "
        "command line do)",
    )
    return SPLIT_BACKWARD_RUNTIME[-1]


def _widen(spec: RunSpec, options: dict, local_ranks: int | None) -> RunSpec:
    """`spec` widened by each room whose options ask something of it (in the rooms' order)."""
    for room in ROOM_OPTIONS:
        given = {name: options.pop(name) for name in room.names if name in options}
        if any(value != room.idle.get(name) for name, value in given.items()):
            spec = room.widen(spec, given, local_ranks)
    for name, value in options.items():  # no loaded room took it
        idle, home = ROOM_HOMES.get(name, (None, None))
        require(home is not None, f"make_spec got an unknown option {name}={value!r}")
        require(value == idle, f"make_spec got {name}={value!r}, an option of the room {home}, which is not "
                f"loaded: import {home} first (course_lib.lesson and the command line do)")  # fmt: skip
    return spec


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
    ranks, backend = specs[0].world, specs[0].backend
    require(
        all(s.world == ranks and s.backend == backend for s in specs),
        "every spec of one launch needs the same ranks (tp, stages, dp) and the same device",
    )
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
            for hint in FAILURE_HINTS:
                err = hint(err, specs, timeout_s)
            raise err from None
    return values[0]


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
