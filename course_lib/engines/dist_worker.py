"""What one pipeline rank does: build its stages, run its order from the schedule, measure it.

Every rank builds the *same* model from the seed (so no weights need to travel), keeps only the
stages the schedule places on it (several with interleaving: stage s on rank s % p), and for every
batch runs its list of actions in order:

    F: input = token ids (stage 0), a local tensor (previous stage on this rank) or a received one
    B / I: output gradient = local or received (none on the last stage, which starts from the loss)
    W: weight gradients from what I kept

Outputs go to the neighbouring stage: a Python dict when it lives on this rank, an ``isend`` (or an
injected link) when it does not. After the last action the rank waits for its sends and steps its
optimizer: one step per batch, after the flush, exactly as the reference trainer does.

Clocks: the spans every rank records (perf_counter, seconds) must line up in one Timeline. On one
machine all processes read the same monotonic clock, so every rank takes rank 0's time 0 and the
spans are exact. Across machines there is no shared clock: each rank takes the moment it left a
common barrier as its time 0, which is right to within that barrier's skew (about one network
latency), and the Timeline's notes say so. This module runs inside a process that
already joined the process group; ``distributed.py`` starts those processes.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from dataclasses import dataclass, replace

import torch
import torch.distributed as dist
from torch import nn

from course_lib.engines.comm import StepComm, direction_groups
from course_lib.engines.links_injected import InjectedLinks
from course_lib.engines.runtime import StageRuntime
from course_lib.links import Link
from course_lib.partition import Partition, stage_modules, uniform
from course_lib.reference import TrainConfig, make_optimizer, setup
from course_lib.schedules.builders import build_schedule
from course_lib.schedules.ir import Action, Kind, Schedule
from course_lib.schedules.messages import input_message, local_producer, message_of

FAULT_KINDS = ("raise", "exit", "kill", "hang")


@dataclass(frozen=True)
class Fault:
    """Make rank `rank` fail on purpose, before its action number `after_actions` of step `step`:
    ``raise`` an exception, ``exit`` (os._exit), ``kill`` (SIGKILL itself) or ``hang`` (sleep)."""

    rank: int
    how: str = "raise"
    step: int = 0
    after_actions: int = 1


@dataclass(frozen=True)
class RunSpec:
    """Everything a rank needs, checked by the launcher before any process starts."""

    cfg: TrainConfig
    schedule: str | Schedule  # a name for build_schedule, or a built Schedule (plain data: pickles)
    ranks: int  # p: pipeline ranks (processes)
    virtual: int = 1  # stages per rank
    partition_sizes: tuple[int, ...] | None = None  # layers per stage; None: uniform
    links: tuple[Link, ...] | None = None  # one per stage boundary; None: no injected delay
    checkpoint: str = "never"
    timeout_s: float = 60.0
    backend: str = "gloo"
    fault: Fault | None = None
    return_grads: bool = False
    threads: int = 1  # torch threads per rank
    direction_groups: bool = False  # one process group per direction of a pair (NCCL needs it)
    track_memory: bool = True  # measure bytes saved for backward (costs ~10% CPU on the toy model)

    @property
    def n_stages(self) -> int:
        return self.ranks * self.virtual

    def build_schedule(self) -> Schedule:
        if isinstance(self.schedule, Schedule):
            return self.schedule  # checked by make_spec before any process started
        return build_schedule(self.schedule, self.ranks, self.cfg.microbatches, self.virtual)

    def partition(self, n_layers: int) -> Partition:
        if self.partition_sizes is None:
            return uniform(n_layers, self.n_stages)
        return Partition.from_sizes(self.partition_sizes)


def _inject(fault: Fault, rank: int) -> None:
    if fault.how == "raise":
        raise RuntimeError(f"injected fault: rank {rank} raised on purpose")
    if fault.how == "exit":
        os._exit(3)
    if fault.how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(10**6)  # "hang": a rank that stops answering


def _global_names(module: nn.Module, first_layer: int) -> dict[str, nn.Parameter]:
    """Parameter names as the whole model calls them (``layers.<i>.…``), to compare with the reference."""
    out = {}
    for name, p in module.named_parameters():
        index, rest = name.split(".", 1)
        out[f"layers.{first_layer + int(index)}.{rest}"] = p
    return out


def _common_clock(rank: int) -> tuple[float, str]:
    """Time 0 for this rank's spans, and how it was aligned with the other ranks."""
    dist.barrier()
    here = (socket.gethostname(), time.perf_counter())
    everyone: list = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, here)
    if all(host == everyone[0][0] for host, _ in everyone):
        return everyone[0][1], "one machine: shared monotonic clock"
    return here[1], "several machines: aligned at a barrier (error about one network latency)"


def run_rank(spec: RunSpec, rank: int, torch_device: torch.device, on_step=None) -> dict:
    """Train `spec.cfg.steps` batches as pipeline rank `rank`; return what this rank measured.
    `on_step(step, loss)` is called after every optimizer step (loss: None unless this rank holds
    the last stage)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(spec.threads)  # p ranks share the machine's cores
    try:
        return _run_rank(spec, rank, torch_device, on_step)
    finally:
        torch.set_num_threads(threads)


def _run_rank(spec: RunSpec, rank: int, torch_device: torch.device, on_step) -> dict:
    cfg = spec.cfg
    corpus, model = setup(replace(cfg, device="cpu"))  # same weights on every rank, from the seed
    schedule = spec.build_schedule()
    partition = spec.partition(len(model.layers))
    modules = stage_modules(model.layers, partition)
    mine = schedule.stages_of(rank)
    n_st, m = schedule.n_stages, cfg.microbatches
    runtimes = {
        s: StageRuntime(
            s,
            n_st,
            modules[s],
            m,
            checkpoint=spec.checkpoint,
            device=torch_device,
            track_memory=spec.track_memory,
            split_backward=schedule.split_backward,
        )
        for s in mine
    }
    optimizer = make_optimizer(nn.ModuleList([modules[s] for s in mine]), cfg)
    del model  # the other ranks' layers are not needed here
    order = schedule.orders[rank]
    last = n_st - 1
    shape = (cfg.batch_size // m, cfg.seq_len, cfg.d_model)
    sender = InjectedLinks() if spec.links is not None else None
    # gloo tells messages apart by tag; NCCL needs one group per direction (see comm.py)
    groups = direction_groups(schedule) if spec.direction_groups else None
    on_gpu = torch_device.type == "cuda"
    gen = torch.Generator().manual_seed(cfg.seed)  # the reference trainer's batches, in its order

    t0, clock = _common_clock(rank)
    n_params = sum(p.numel() for s in mine for p in modules[s].parameters())
    record: dict = {"rank": rank, "stages": mine, "steps": [], "clock": clock, "n_params": n_params}
    losses: list[float] = []
    try:
        for step in range(cfg.steps):
            x, y = corpus.batch("train", cfg.batch_size, cfg.seq_len, gen)
            xs, ys = x.chunk(m), y.chunk(m)
            step_start = time.perf_counter() - t0
            for rt in runtimes.values():
                rt.start_batch()
            optimizer.zero_grad(set_to_none=True)
            comm = StepComm(schedule, rank, step, lambda msg: shape, torch_device, t0, groups, sender)
            local: dict[Action, torch.Tensor] = {}
            spans, samples = [], []
            for i, a in enumerate(order):
                fault = spec.fault
                if fault is not None and (fault.rank, fault.step, fault.after_actions) == (rank, step, i):
                    _inject(fault, rank)
                rt, mb = runtimes[a.stage], a.microbatch
                msg_in = input_message(a, schedule)
                if msg_in is not None:
                    inp = comm.receive(msg_in)
                else:
                    producer = local_producer(a, schedule)
                    inp = local.pop(producer) if producer is not None else None
                start = comm.now()
                if a.kind is Kind.F:
                    feed = xs[mb] if a.stage == 0 else inp
                    out = rt.forward(mb, feed, ys[mb] if a.stage == last else None)
                elif a.kind is Kind.B:
                    out = rt.backward(mb, inp)
                elif a.kind is Kind.I:
                    out = rt.backward_input(mb, inp)
                else:
                    rt.backward_weight(mb)
                    out = None
                if on_gpu:
                    torch.cuda.synchronize(torch_device)  # the span must cover the GPU's work
                end = comm.now()
                spans.append((a, start, end))
                samples.append((end, sum(r.saved_bytes() for r in runtimes.values())))
                if out is not None:
                    msg_out = message_of(a, schedule)
                    if msg_out is not None:
                        link = spec.links[msg_out.boundary] if spec.links is not None else None
                        comm.send(msg_out, out, link)
                    else:
                        local[a] = out
            comm.finish()
            optimizer.step()
            step_end = comm.now()
            if last in runtimes:
                losses.append(runtimes[last].loss())
            if on_step is not None:
                on_step(step, losses[-1] if last in runtimes else None)
            record["steps"].append(
                {
                    "start": step_start,
                    "end": step_end,
                    "spans": spans,
                    "sends": comm.send_events,
                    "recvs": comm.recv_events,
                    "saved_bytes": samples,
                    "peak_saved_bytes": sum(r.peak_saved_bytes for r in runtimes.values()),
                }
            )
    finally:
        if sender is not None:
            sender.close()
    record["losses"] = losses
    if spec.return_grads:
        grads = {}
        for s in mine:
            for name, p in _global_names(modules[s], partition.bounds[s][0]).items():
                grads[name] = None if p.grad is None else p.grad.detach().cpu().clone()
        record["grads"] = grads
        record["params"] = {
            name: p.detach().cpu().clone()
            for s in mine
            for name, p in _global_names(modules[s], partition.bounds[s][0]).items()
        }
    for rt in runtimes.values():
        rt.close()
    return record
