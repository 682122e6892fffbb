"""The rank side of the distributed engine, all of it: what one rank does from joining the process
group (``init_rank`` under torchrun; ``launch.spawn`` otherwise) to handing its record to rank 0
(``gather_and_merge``). The parent's side (checking a run, spawning its ranks) is ``distributed.py``.

Every rank builds the *same* model from the seed (so no weights need to travel), keeps only the
stages the schedule places on it (several with interleaving: stage s on rank s % p), and for every
batch runs its list of actions in order: ``run_schedule``, the loop lesson 08 reads. Where each
action's input comes from is known from the schedule alone (``schedules/messages.py``): a message
from another rank, an earlier action's output on this rank, or the batch (stage 0's forward reads
the token ids). The action runs on its stage (``StageRuntime.run``); its output goes to the rank
that consumes it, or is kept here for a later action. After the last action the rank waits for its
sends and steps its optimizer: one step per batch, after the flush, as the reference trainer does.
What the loop does not need to know (the injected fault, the GPU sync, the spans it records) lives
in ``StepRecorder``. The spec a rank runs and the result rank 0 merges are ``dist_result.py``'s.

Clocks: the spans every rank records (perf_counter, seconds) must line up in one Timeline. On one
machine all processes read the same monotonic clock, so every rank takes rank 0's time 0 and the
spans are exact. Across machines each rank takes the moment it left a common barrier as its time 0,
right to within that barrier's skew (about one network latency).
"""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import Tensor, nn

from course_lib.engines import torch_pipelining
from course_lib.shelf.launcher import RankContext
from course_lib.shelf.model import Corpus, split_microbatches, stage_modules
from course_lib.shelf.p2p import RankComm, direction_groups
from course_lib.shelf.reference import make_optimizer, setup, train_batches
from course_lib.shelf.run_spec import (
    DistributedResult,
    Fault,
    RankRecord,
    RunSpec,
    StepRecord,
    build_result,
)
from course_lib.shelf.schedule import Action, Kind, Schedule, input_message, local_producer, message_of
from course_lib.shelf.stage import StageRuntime
from course_lib.tp.comm import CommLog, DistComm
from course_lib.tp.distributed import tp_layers
from course_lib.tp.mesh import MeshGroups, average_gradients, average_loss, build_groups, replica_share
from course_lib.tp.shard import is_slice

# a wait this long hides tearing down the spent backward graphs (StageRuntime.release_graphs, about
# half a millisecond each), which would delay the next action, and a peer waiting for it, anywhere else
IDLE_S = 0.003


def _inject(fault: Fault, rank: int) -> None:
    if fault.how == "raise":
        raise RuntimeError(f"injected fault: rank {rank} raised on purpose")
    if fault.how == "exit":
        os._exit(3)
    if fault.how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(10**6)  # "hang": a rank that stops answering


def _common_clock() -> float:
    """Time 0 for this rank's spans: rank 0's on one machine, else this rank's at a barrier (module doc)."""
    dist.barrier()
    here = (socket.gethostname(), time.perf_counter())
    everyone: list = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, here)
    one_machine = all(host == everyone[0][0] for host, _ in everyone)
    return everyone[0][1] if one_machine else here[1]


@dataclass
class Rank:
    """One pipeline rank's part of the model: its stages (several with interleaving), its optimizer."""

    index: int
    schedule: Schedule
    stages: dict[int, StageRuntime]  # stage -> its runtime
    params: dict[str, nn.Parameter]  # its stages' weights, named as in the whole model (as the reference)
    optimizer: torch.optim.Optimizer

    def loss(self) -> float | None:
        """The batch's loss, on the rank that holds the last stage (None elsewhere)."""
        last = self.stages.get(self.schedule.n_stages - 1)
        return None if last is None else last.loss()


def _layers(model: nn.Module, groups: MeshGroups | None) -> nn.ModuleList:
    """The model's layers as this rank holds them: whole, or its TP slice of every block."""
    if groups is None or groups.mesh.t == 1:
        return model.layers
    comm = DistComm(groups.mesh.t, CommLog(enabled=False), group=groups.tp)
    return tp_layers(model.layers, groups.mesh.t, groups.coords.tp, comm)


def build_rank(
    spec: RunSpec, index: int, torch_device: torch.device, groups: MeshGroups | None = None
) -> tuple[Corpus, Rank]:
    """The data, and the stages the schedule places on pipeline rank `index`, from the seeded model
    (with TP, this rank's slice of them: `groups` say which, and over which group f and g talk)."""
    cfg = spec.cfg
    corpus, model = setup(replace(cfg, device="cpu"))  # same weights on every rank, from the seed
    schedule = spec.schedule
    layers = _layers(model, groups)
    modules = stage_modules(layers, spec.partition)
    mine = schedule.stages_of(index)
    stages = {
        s: StageRuntime(
            s, schedule.n_stages, modules[s], cfg.microbatches, checkpoint=spec.checkpoint,
            device=torch_device, track_memory=spec.track_memory, split_backward=schedule.split_backward,
            defer_graph_release=True, precision=cfg.precision,
        )
        for s in mine
    }  # fmt: skip
    owned = {id(p) for s in mine for p in modules[s].parameters()}
    params = {name: p for name, p in layers.named_parameters(prefix="layers") if id(p) in owned}
    optimizer = make_optimizer(nn.ModuleList([modules[s] for s in mine]), cfg)
    return corpus, Rank(index, schedule, stages, params, optimizer)


def run_schedule(
    rank: Rank, batch: list[tuple[Tensor, Tensor]], comm: RankComm, recorder: StepRecorder
) -> None:
    """One batch on one pipeline rank: its actions, in the schedule's order (see the module doc).
    `batch` holds (token ids, targets) per micro-batch; `recorder` measures each action and may
    inject a fault, outside this loop's logic."""
    schedule = rank.schedule
    kept: dict[Action, Tensor] = {}  # outputs whose consumer is a stage on this rank
    for action in schedule.orders[rank.index]:
        tokens, targets = batch[action.microbatch]
        if (msg := input_message(action, schedule)) is not None:
            if comm.waited_last_step(msg) > IDLE_S:  # it will idle until the message comes: meanwhile
                for stage in rank.stages.values():
                    stage.release_graphs()
            inp = comm.receive(msg)  # posted at the start of the step: waits only if not here yet
        elif (producer := local_producer(action, schedule)) is not None:
            inp = kept.pop(producer)  # the output of a stage on this rank
        else:  # no producer: stage 0's F reads token ids, the last stage's backward starts from the loss
            inp = tokens if action.kind is Kind.F else None  # (and W needs no input)
        recorder.before(action)
        out = rank.stages[action.stage].run(action, inp, targets)
        recorder.after(action)
        if out is None:
            continue  # W, the loss, or stage 0's input gradient: nothing travels
        if (msg := message_of(action, schedule)) is not None:
            comm.send(msg, out)  # returns at once: the transfer overlaps the next actions
        else:
            kept[action] = out


class StepRecorder:
    """Around each action: inject the fault (if it is due), wait for the GPU, record the span."""

    def __init__(
        self, rank: int, fault: Fault | None, now: Callable[[], float], torch_device: torch.device,
        pace_s: tuple[float, float] | None = None,
    ):  # fmt: skip
        self.rank, self.fault, self.now, self.torch_device = rank, fault, now, torch_device
        self.pace = {} if pace_s is None else {Kind.F: pace_s[0], Kind.B: pace_s[1]}
        self.step, self.spans, self._start = 0, [], 0.0

    def begin_step(self, step: int) -> None:
        self.step, self.spans = step, []

    def before(self, action: Action) -> None:
        f = self.fault
        if f is not None and (f.rank, f.step, f.after_actions) == (self.rank, self.step, len(self.spans)):
            _inject(f, self.rank)
        self._start = self.now()

    def after(self, action: Action) -> None:
        if self.torch_device.type == "cuda":
            torch.cuda.synchronize(self.torch_device)  # the span must cover the GPU's work
        if (slot := self.pace.get(action.kind)) is not None:  # a fixed cost: sleep out the rest of the slot
            time.sleep(max(0.0, self._start + slot - self.now()))
        self.spans.append((action, self._start, self.now()))


def _rank_comm(spec: RunSpec, me: Rank, groups: MeshGroups, torch_device: torch.device) -> RankComm:
    """This rank's sends and receives, to the matching TP rank of each neighbouring stage; messages in
    the dtype its stages compute in (their weights': float32 for the toy)."""
    # gloo tells messages apart by tag; NCCL needs one group per direction (see comm.py)
    pipes = spec.mesh.pipelines()
    mine = pipes.index(groups.peers)
    schedule, dtype = me.schedule, next(iter(me.params.values())).dtype
    directions = direction_groups(schedule, pipes, mine) if spec.direction_groups else None
    t0 = _common_clock()
    cfg = spec.cfg
    shape = (cfg.batch_size // cfg.microbatches // spec.dp, cfg.seq_len, cfg.d_model)  # every message's
    stage = groups.coords.stage
    return RankComm(
        schedule, stage, shape, torch_device, t0, spec.links, directions, groups.peers, groups.pp, dtype
    )


def run_rank(
    spec: RunSpec, rank: int, torch_device: torch.device, on_loss: Callable[[float], None] | None = None,
    groups: MeshGroups | None = None,
) -> RankRecord:  # fmt: skip
    """Train `spec.cfg.steps` batches as rank `rank` (of t x p x d, ``tp/mesh.py``); return what this
    rank measured. On one rank that holds the last stage, `on_loss(loss)` follows every optimizer
    step. `groups`: this rank's TP, PP and DP groups (built here if not given)."""
    if spec.runner != "distributed":  # torch.distributed.pipelining runs it (torch_pipelining.py)
        return torch_pipelining.run_rank(spec, rank, torch_device, on_loss)
    threads = torch.get_num_threads()
    torch.set_num_threads(spec.threads)  # the ranks share the machine's cores
    groups = groups or build_groups(spec.mesh, rank)
    where = groups.coords
    corpus, me = build_rank(spec, where.stage, torch_device, groups)
    comm = _rank_comm(spec, me, groups, torch_device)
    recorder = StepRecorder(rank, spec.fault, comm.now, torch_device, spec.pace_s)
    cfg, steps, losses = spec.cfg, [], []
    try:
        for step, (x, y) in enumerate(train_batches(corpus, cfg)):
            batch = replica_share(split_microbatches(x, y, cfg.microbatches), where.dp, spec.dp)
            steps.append(_train_step(me, step, batch, comm, recorder, groups))
            if (loss := me.loss()) is not None:  # this rank holds the last stage
                losses.append(average_loss(loss, groups.dp, spec.dp, torch_device))
                if on_loss is not None and where.dp == where.tp == 0:
                    on_loss(losses[-1])
    finally:
        comm.close()
        for stage in me.stages.values():
            stage.close()
        torch.set_num_threads(threads)
    # the whole model's parameters, each counted once: replica 0's, its replicated ones on TP rank 0
    n_params = sum(p.numel() for n, p in me.params.items() if where.tp == 0 or is_slice(n))
    record = RankRecord(stage=where.stage, global_rank=rank, dp=where.dp, tp=where.tp, steps=steps,
                        losses=losses, n_params=n_params if where.dp == 0 else 0)  # fmt: skip
    if spec.return_grads:
        record.grads = {
            n: None if p.grad is None else p.grad.detach().cpu().clone() for n, p in me.params.items()
        }
        record.params = {n: p.detach().cpu().clone() for n, p in me.params.items()}
    return record


def _train_step(
    me: Rank, step: int, batch: list[tuple[Tensor, Tensor]], comm: RankComm, recorder: StepRecorder,
    groups: MeshGroups,
) -> StepRecord:  # fmt: skip
    """One batch: every action of this rank, gradients averaged over the replicas, then one optimizer
    step after the flush; its record."""
    start, cpu_start = comm.now(), time.thread_time()
    for stage in me.stages.values():
        stage.start_batch()
    me.optimizer.zero_grad(set_to_none=True)
    comm.begin_step(step)
    recorder.begin_step(step)
    run_schedule(me, batch, comm, recorder)
    comm.finish()
    sync_start = comm.now()
    average_gradients(list(me.params.values()), groups.dp, groups.mesh.d)
    sync_s = comm.now() - sync_start if groups.mesh.d > 1 else 0.0  # (one replica: nothing was sent)
    me.optimizer.step()
    peak = sum(stage.peak_saved_bytes for stage in me.stages.values())
    return StepRecord(start=start, end=comm.now(), spans=recorder.spans, sends=comm.send_events,
                      recvs=comm.recv_events, peak_saved_bytes=peak, grad_sync_s=sync_s,
                      cpu_s=time.thread_time() - cpu_start)  # fmt: skip


def init_rank(spec: RunSpec, rank: int, world: int) -> torch.device:
    """Join the process group torchrun set up (MASTER_ADDR, MASTER_PORT); the rank's device."""
    timeout = timedelta(seconds=spec.timeout_s)
    dist.init_process_group(spec.backend, rank=rank, world_size=world, timeout=timeout)
    if spec.backend == "nccl":
        local = int(os.environ.get("LOCAL_RANK", rank))
        torch.cuda.set_device(local)
        return torch.device(f"cuda:{local}")
    return torch.device("cpu")


def gather_and_merge(spec: RunSpec, rank: int, record: RankRecord) -> DistributedResult | None:
    """Every rank's record to rank 0, which merges them into one result (None on the other ranks)."""
    records = [None] * spec.world if rank == 0 else None
    dist.gather_object(record, records, dst=0)
    return build_result(records, spec) if rank == 0 else None


def run_specs(ctx: RankContext, specs: list[RunSpec]) -> list[DistributedResult] | None:
    """One spawned rank: every spec in turn, in one process group (TP, PP, DP groups built once);
    rank 0 returns the results."""
    groups = build_groups(specs[0].mesh, ctx.rank)
    merged = [
        gather_and_merge(s, ctx.rank, run_rank(s, ctx.rank, ctx.device, ctx.progress, groups)) for s in specs
    ]
    return merged if ctx.rank == 0 else None
