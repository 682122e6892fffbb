"""The rank loop: what one rank of the distributed engine does, read top to bottom (lessons 04c, 08).

Every rank builds the *same* model from the seed (so no weights need to travel), keeps only the
stages the schedule places on it (several with interleaving: stage s on rank s % p), and for every
batch runs its list of actions in order: ``run_schedule``, the loop below. Where each action's input
comes from is known from the schedule alone (``messages.py``): a message from another rank
(``recv_activation`` for a forward, ``recv_grad`` for a backward), an earlier action's output on this
rank, or the batch (stage 0's forward reads the token ids). The action runs on its stage
(``StageRuntime.run``); its output goes to the rank that consumes it (``send_activation``,
``send_grad``: ``p2p.py``), or is kept here for a later action. After the last action the rank waits
for its sends and steps its optimizer: one step per batch, after the flush, as the reference trainer.
Just before that step come the whole model's gradients (``finish_gradients``, the room
``engines/whole_model.py``): a tied embedding's two copies summed, one clipping norm over every rank.

``PipelineRank`` holds one rank for a whole run. Its methods marked *door* are where a room widens a
run that asks for it (``RunSpec.rooms``): TP and DP (``course_lib/tp/mesh.py``), an injected fault,
torch's runtime, injected links, paced ops, the whole model's rules (``course_lib/engines/``). A
plain pipeline runs none of their code.

Clocks: the spans every rank records (perf_counter, seconds) must line up in one Timeline. On one
machine all processes read the same monotonic clock, so every rank takes rank 0's time 0 and the
spans are exact. Across machines each rank takes the moment it left a common barrier as its time 0,
right to within that barrier's skew (about one network latency).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import Tensor, nn

from course_lib.shelf.launcher import RankContext
from course_lib.shelf.model import split_microbatches, stage_modules
from course_lib.shelf.p2p import RankComm, direction_groups
from course_lib.shelf.reference import (
    copy_tied_weight,
    corpus_and_model,
    head_weight,
    make_optimizer,
    train_batches,
)
from course_lib.shelf.run_spec import DistributedResult, RankRecord, RunSpec, StepRecord, build_result
from course_lib.shelf.schedule import Action, Kind, input_message, local_producer, message_of
from course_lib.shelf.stage import StageRuntime

Batch = list[tuple[Tensor, Tensor]]  # (token ids, targets) per micro-batch


def run_schedule(rank: PipelineRank, batch: Batch, comm: RankComm, recorder: StepRecorder) -> None:
    """One batch on one pipeline rank: its actions, in the schedule's order (see the module doc)."""
    schedule = rank.schedule
    kept: dict[Action, Tensor] = {}  # outputs whose consumer is a stage on this rank
    for action in schedule.orders[rank.index]:
        tokens, targets = batch[action.microbatch]
        msg = input_message(action, schedule)  # the message this action's input arrives in, or None
        if msg is not None and action.kind is Kind.F:
            inp = comm.recv_activation(msg)  # from the previous stage's rank (posted at the step's start)
        elif msg is not None:
            inp = comm.recv_grad(msg)  # from the next stage's rank
        elif (producer := local_producer(action, schedule)) is not None:
            inp = kept.pop(producer)  # the output of a stage on this rank
        else:  # no producer: stage 0's F reads token ids, the last stage's backward starts from the loss
            inp = tokens if action.kind is Kind.F else None  # (and W needs no input)
        recorder.before(action)
        out = rank.stages[action.stage].run(action, inp, targets)
        recorder.after(action)
        if out is None:
            continue  # W, the loss, or stage 0's input gradient: nothing travels
        msg = message_of(action, schedule)  # where the output goes, or None: a stage on this rank
        if msg is None:
            kept[action] = out
        elif action.kind is Kind.F:
            comm.send_activation(msg, out)  # returns at once: the transfer overlaps the next actions
        else:
            comm.send_grad(msg, out)


class StepRecorder:
    """Around each action: wait for the GPU, record the span (a room paces ops: engines/paced_ops.py)."""

    def __init__(self, now: Callable[[], float], torch_device: torch.device):
        self.now, self.torch_device = now, torch_device
        self.step, self.spans, self._start = 0, [], 0.0

    def begin_step(self, step: int) -> None:
        self.step, self.spans = step, []

    def before(self, action: Action) -> None:
        self._start = self.now()

    def after(self, action: Action) -> None:
        if self.torch_device.type == "cuda":
            torch.cuda.synchronize(self.torch_device)  # the span must cover the GPU's work
        self.spans.append((action, self._start, self.now()))


def common_clock() -> float:
    """Time 0 for this rank's spans: rank 0's on one machine, else this rank's at a barrier (module doc)."""
    dist.barrier()
    here = (socket.gethostname(), time.perf_counter())
    everyone: list = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, here)
    one_machine = all(host == everyone[0][0] for host, _ in everyone)
    return everyone[0][1] if one_machine else here[1]


class PipelineRank:
    """One pipeline rank for a whole run: the stages the schedule places on it, its optimizer, and
    (in ``train``) its sends and receives. `shared`: what rooms set up once per launch, for every spec."""

    comm_type: Callable[..., RankComm] = RankComm  # what carries its messages (a room's: injected links)

    def __init__(self, spec: RunSpec, rank: int, device: torch.device, shared: dict | None = None):
        self.spec, self.global_rank, self.device, self.schedule = spec, rank, device, spec.schedule
        self.shared = {} if shared is None else shared
        self.index = self.place()  # this rank's place in the pipeline: its device in the schedule
        cfg = spec.cfg
        # the same weights on every rank, from the seed
        self.corpus, model = corpus_and_model(replace(cfg, device="cpu"))
        copy_tied_weight(model.layers)  # tied embeddings: the last stage holds its own copy
        layers = self.layers(model.layers)
        modules = stage_modules(layers, spec.partition)
        mine = self.schedule.stages_of(self.index)
        self.stages = {
            s: StageRuntime(
                s, self.schedule.n_stages, modules[s], cfg.microbatches, checkpoint=spec.checkpoint,
                device=device, track_memory=spec.track_memory, split_backward=self.schedule.split_backward,
                precision=cfg.precision,
            )
            for s in mine
        }  # fmt: skip
        owned = {id(p) for s in mine for p in modules[s].parameters()}
        # its stages' weights, named as in the whole model (as the reference names them)
        self.params = {name: p for name, p in layers.named_parameters(prefix="layers") if id(p) in owned}
        # a rank whose stages are all empty (a layout such as "E||t|L") has no weights: nothing to step
        weights = nn.ModuleList([modules[s] for s in mine])
        self.optimizer = make_optimizer(weights, cfg) if owned else NoWeights()

    def loss(self) -> float | None:
        """The batch's loss, on the rank that holds the last stage (None elsewhere)."""
        last = self.stages.get(self.schedule.n_stages - 1)
        return None if last is None else last.loss()

    def train(self, on_loss: Callable[[float], None] | None = None) -> RankRecord:
        """Train `spec.cfg.steps` batches; what this rank measured. On a rank that holds the last stage,
        `on_loss(loss)` follows every optimizer step."""
        threads = torch.get_num_threads()
        torch.set_num_threads(self.spec.threads)  # the ranks share the machine's cores
        self.comm, steps, losses = self.connect(), [], []
        self.recorder = self.recorder_for_steps()
        try:
            for step, (x, y) in enumerate(train_batches(self.corpus, self.spec.cfg)):
                steps.append(self.train_step(step, self.microbatches(x, y)))
                if (loss := self.loss()) is not None:  # this rank holds the last stage
                    losses.append(self.batch_loss(loss))
                    if on_loss is not None and self.reports_loss():
                        on_loss(losses[-1])
        finally:
            self.comm.close()
            for stage in self.stages.values():
                stage.close()
            torch.set_num_threads(threads)
        return self.record(steps, losses)

    def train_step(self, step: int, batch: Batch) -> StepRecord:
        """One batch: every action of this rank, then one optimizer step after the flush; its record."""
        comm, start, cpu_start = self.comm, self.comm.now(), time.thread_time()
        for stage in self.stages.values():
            stage.start_batch()
        self.optimizer.zero_grad(set_to_none=True)
        comm.begin_step(step)  # every receive of the step, posted now
        self.recorder.begin_step(step)
        run_schedule(self, batch, comm, self.recorder)
        comm.finish()  # every send has left
        sync_s = self.sync_gradients()
        sync_s += self.finish_gradients()
        self.optimizer.step()
        peak = sum(stage.peak_saved_bytes for stage in self.stages.values())
        return StepRecord(start=start, end=comm.now(), spans=self.recorder.spans, sends=comm.send_events,
                          recvs=comm.recv_events, peak_saved_bytes=peak, grad_sync_s=sync_s,
                          cpu_s=time.thread_time() - cpu_start)  # fmt: skip

    # ---- doors: a room overrides these where a run asks for it (the module doc) -----------------------
    def place(self) -> int:
        """Door: this rank's pipeline rank (one pipeline: its global rank)."""
        return self.global_rank

    def layers(self, layers: nn.ModuleList) -> nn.ModuleList:
        """Door: the model's layers as this rank holds them (one pipeline: whole)."""
        return layers

    def connect(self, pipelines: list[list[int]] | None = None, mine: int = 0, group: object = None,
                samples: int | None = None) -> RankComm:  # fmt: skip
        """Door: this rank's sends and receives, to pipeline `mine` of `pipelines` (global ranks per
        stage; default one pipeline, rank = stage) over `group`; messages of `samples` samples (default
        a micro-batch's) in the dtype its stages compute in (their weights': float32 for the toy)."""
        spec, cfg = self.spec, self.spec.cfg
        # gloo tells messages apart by tag; NCCL needs one group per direction (see p2p.py)
        directions = direction_groups(self.schedule, pipelines, mine) if spec.direction_groups else None
        samples = samples or cfg.batch_size // cfg.microbatches
        dtype = next(iter(self.params.values()), torch.zeros(0)).dtype  # (no weights: float32)
        peers = None if pipelines is None else pipelines[mine]
        # every pipeline's global ranks, stage by stage, and which is this rank's (for a room's groups)
        self.pipelines, self.pipeline_index = pipelines or [list(range(self.schedule.n_devices))], mine
        return self.comm_type(self.schedule, self.index, (samples, cfg.seq_len, cfg.d_model), self.device,
                              common_clock(), directions, peers, group, dtype)  # fmt: skip

    def counts_once(self, name: str) -> bool:
        """False for the head's copy of a tied embedding: the model's weight is the embedding's."""
        return not (self.spec.cfg.tie_embeddings and name == head_weight(self.spec.cfg.n_layers))

    def counts_in_norm(self, name: str) -> bool:
        """Door: does this rank's weight `name` count in the whole model's gradient norm? (One pipeline:
        yes; TP x PP x DP counts a replicated weight on one rank only.)"""
        return True

    def finish_gradients(self) -> float:
        """Door: the whole model's rules after the flush, before the optimizer (reference.py's last
        section): a tied embedding's two copies summed, one clipping norm over every rank. A run whose
        config asks for them takes the room ``course_lib/engines/whole_model.py``; seconds it took."""
        return 0.0

    def recorder_for_steps(self) -> StepRecorder:
        """Door: what measures each action (a fault's room injects its fault there, a pace's paces it)."""
        return StepRecorder(self.comm.now, self.device)

    def microbatches(self, x: Tensor, y: Tensor) -> Batch:
        """Door: the batch this rank trains on, split into the schedule's micro-batches."""
        return split_microbatches(x, y, self.spec.cfg.microbatches)

    def sync_gradients(self) -> float:
        """Door: sync the gradients after the flush, before the optimizer; seconds it took (none here)."""
        return 0.0

    def batch_loss(self, loss: float) -> float:
        """Door: the batch's loss from this rank's."""
        return loss

    def reports_loss(self) -> bool:
        """Door: does this rank call `on_loss`?"""
        return True

    def record(self, steps: list[StepRecord], losses: list[float]) -> RankRecord:
        """Door: what this rank hands rank 0."""
        n_params = sum(p.numel() for n, p in self.params.items() if self.counts_once(n))
        record = RankRecord(stage=self.index, global_rank=self.global_rank, steps=steps, losses=losses,
                            n_params=n_params)  # fmt: skip
        if self.spec.return_grads:
            record.grads = {
                n: None if p.grad is None else p.grad.detach().cpu().clone() for n, p in self.params.items()
            }
            record.params = {n: p.detach().cpu().clone() for n, p in self.params.items()}
        return record

    @classmethod
    def merge(cls, records: list[RankRecord], spec: RunSpec, result: DistributedResult) -> DistributedResult:
        """Door (on rank 0): the merged result, with what a room adds to it."""
        return result


class NoWeights:
    """The optimizer of a rank that holds only empty stages: nothing to zero, nothing to step."""

    def zero_grad(self, set_to_none: bool = True) -> None:
        pass

    def step(self) -> None:
        pass


def rank_class(spec: RunSpec) -> type[PipelineRank]:
    """PipelineRank, widened by the rooms the run asked for (their classes first, in the spec's order)."""
    return type("Rank", (*spec.rooms, PipelineRank), {}) if spec.rooms else PipelineRank


def run_rank(
    spec: RunSpec, rank: int, torch_device: torch.device, on_loss: Callable[[float], None] | None = None,
    shared: dict | None = None,
) -> RankRecord:  # fmt: skip
    """Train `spec.cfg.steps` batches as rank `rank`; what this rank measured (``PipelineRank.train``)."""
    return rank_class(spec)(spec, rank, torch_device, shared).train(on_loss)


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
    return rank_class(spec).merge(records, spec, build_result(records, spec)) if rank == 0 else None


def run_specs(ctx: RankContext, specs: list[RunSpec]) -> list[DistributedResult] | None:
    """One spawned rank: every spec in turn, in one process group; rank 0 returns the results."""
    shared: dict = {}  # what the rooms set up once (TP x PP x DP: the process groups)
    merged = [
        gather_and_merge(s, ctx.rank, run_rank(s, ctx.rank, ctx.device, ctx.progress, shared)) for s in specs
    ]
    return merged if ctx.rank == 0 else None
