"""The distributed engine's torchrun entry point: this process is one rank; rank 0 prints the result.

    torchrun --nproc-per-node 2 -m course_lib.cli.torchrun --schedule 1f1b --layers 8 --steps 5

(More examples, and several machines: course_lib/shelf/distributed_engine.py.) The flags are ``train``'s
(course_lib/cli/flags.py), so each means the same in both. The ranks torchrun starts are the stages
(with ``--tp T --dp D``: T x stages x D of them): ``--stages`` may be left out, and must agree if
given. Spell flags out under torchrun: it reads ``-m`` and abbreviations such as ``--virtual`` as
its own (``--virtual-stages`` is the same flag). TP x PP x DP, 2 x 2 x 2::

    torchrun --nproc-per-node 8 -m course_lib.cli.torchrun --tp 2 --dp 2 --layers 8 --steps 5

Given torchrun's own arguments (with ``-m``), this module is torchrun's launch itself, for several
machines (README.md, "Several machines"): a node whose rendezvous fails ends with one line::

    python -m course_lib.cli.torchrun --nnodes 2 --nproc-per-node 1 --node-rank 1 --master-addr HOST0 \
        --master-port 29500 --rdzv-conf timeout=60 -m course_lib.cli.torchrun --schedule gpipe
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import tempfile
from collections.abc import Iterator

_QUIET_CPP = __name__ == "__main__" and "-m" in sys.argv[1:] and "TORCH_CPP_LOG_LEVEL" not in os.environ
if _QUIET_CPP:  # as torchrun's launcher: before torch loads, which reads it once (launch_nodes says why)
    os.environ["TORCH_CPP_LOG_LEVEL"] = "FATAL"
_IMPORTING_RANK = __name__ == "__main__" and "TORCHELASTIC_RUN_ID" in os.environ
RUN_FOLDER_PREFIX = "course_lib-torchrun-"  # the launcher's TMPDIR for one run (``_run_folder``)
_AGENT_LOGGERS = ("torch.distributed.run", "torch.distributed.elastic", "torch.distributed.launcher")


def _end_with_launcher() -> None:
    """A rank of torchrun's ends once the process that started it is gone. A kill -9 of the launcher
    reaches no handler, and its ranks, re-parented to init, would train on for ever: a thread checks
    twice a second, removes the run's folder (nobody else will) and exits."""
    import shutil
    import threading
    import time

    launcher = os.getppid()

    def watch() -> None:
        while os.getppid() == launcher:
            time.sleep(0.5)
        folder = os.environ.get("TMPDIR", "")
        if os.path.basename(folder).startswith(RUN_FOLDER_PREFIX):
            shutil.rmtree(folder, ignore_errors=True)
        os._exit(1)

    threading.Thread(target=watch, name="launcher-watch", daemon=True).start()


if _IMPORTING_RANK:  # Ctrl-C reaches a rank and its launcher both: the rank leaves quietly, at any point,
    # and the launcher (launch_nodes) says it in its one line (each rank saying it too made three)
    signal.signal(signal.SIGINT, lambda *_: os._exit(128 + signal.SIGINT))
    _end_with_launcher()

import torch.distributed as dist  # noqa: E402

import course_lib.stage_layout  # noqa: E402, F401 (a room: --layout reads a Megatron layout string)
from course_lib.cli import (  # noqa: E402
    across_nodes,  # noqa: E402  (multi-node: the interface towards the peers, threads, each node's line)
    as_help,
    flags,
    report_errors,
)
from course_lib.cli.stall_watch import StallWatch  # noqa: E402
from course_lib.engines import faults, idle_release, torch_pipelining  # noqa: E402, F401 (rooms: their make_spec options)
from course_lib.shelf.distributed_engine import make_spec  # noqa: E402
from course_lib.shelf.errors import require  # noqa: E402
from course_lib.shelf.launcher import free_port  # noqa: E402
from course_lib.shelf.rank_loop import RunSpec, gather_and_merge, init_rank, run_rank  # noqa: E402
from course_lib.shelf.run_spec import DistributedResult  # noqa: E402
from course_lib.tp import mesh  # noqa: E402, F401 (a room: adds tp= and dp= to make_spec)


def torchrun_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="torchrun --nproc-per-node P -m course_lib.cli.torchrun", description=as_help(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    flags.add_model_flags(parser)
    flags.add_layout_flag(flags.add_pipeline_flags(parser))
    flags.add_whole_model_flags(parser)
    flags.add_link_flags(parser)
    flags.add_output_flags(parser)
    flags.state_bounds(parser)
    return parser


def spec_from_flags(args: argparse.Namespace, world: int) -> RunSpec:
    """Every flag checked, before this rank joins the others."""
    flags.refuse_what_torch_ignores(args)
    tp, dp = args.tp or 1, args.dp or 1
    require(
        world % (tp * dp) == 0,
        f"torchrun started {world} ranks (--nproc-per-node x --nnodes), which --tp {tp} x --dp {dp} = "
        f"{tp * dp} does not divide; start t x p x d ranks",
    )
    stages = world // (tp * dp)
    require(
        args.stages in (None, stages),
        f"--stages {args.stages} but torchrun started {world} ranks (--nproc-per-node x --nnodes)"
        + (f" = --tp {tp} x --dp {dp} x {stages} stages" if tp * dp > 1 else "")
        + "; leave --stages out: under torchrun the ranks (divided by --tp x --dp) are the stages",
    )
    pipe = flags.PipelineFlags.from_args(args, stages=stages)
    return make_spec(
        flags.with_whole_model_flags(flags.config_from_flags(args), args), pipe.schedule, stages,
        virtual=pipe.virtual, partition=args.layout,
        checkpoint=pipe.checkpoint, links=pipe.links, timeout_s=pipe.timeout,
        threads=args.threads or across_nodes.default_threads(),  # across nodes: 1 per rank (see why there)
        local_ranks=int(os.environ.get("LOCAL_WORLD_SIZE", world)), tp=tp, dp=dp, runner=pipe.runner,
    )  # fmt: skip


def run_this_rank(spec: RunSpec, rank: int, world: int) -> DistributedResult | None:
    """Join the process group, run the schedule's actions for this rank; rank 0 gets the result."""
    if "MASTER_ADDR" not in os.environ:  # plain `python -m ...` with one rank
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    across_nodes.use_interface_towards(os.environ["MASTER_ADDR"])  # across nodes: not the loopback
    try:
        device = init_rank(spec, rank, world)
        # under torchrun no parent watches the ranks: each says when a peer falls silent (stall_watch.py)
        watch = StallWatch(rank, world) if world > 1 and "TORCHELASTIC_RUN_ID" in os.environ else None
        record = run_rank(spec, rank, device)
        result = gather_and_merge(spec, rank, record)
        if watch is not None:
            watch.done()
        dist.barrier()  # no rank ends while another still has work: a rank that fails before fails all
        # across nodes, every rank says it finished
        across_nodes.print_node_finished(rank, [st.time_s for st in record.steps])
    except Exception as err:
        print(f"[rank {rank}] failed: {type(err).__name__}: {err}", file=sys.stderr)
        if world == 1 and dist.is_initialized():  # in-process run: leave no process group behind
            dist.destroy_process_group()
        raise
    dist.destroy_process_group()
    return result


def _main(argv: list[str] | None) -> int:
    args = torchrun_parser().parse_args(argv)
    world, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    result = run_this_rank(spec_from_flags(args, world), rank, world)
    if result is None:  # ranks other than 0
        return 0
    if args.json:
        flags.print_json(result.to_json())
    else:
        mesh = f" x tp {result.tp} x dp {result.dp}" if result.tp * result.dp > 1 else ""
        # torch's runners record no spans: no bubble (runner_line says so)
        bubble = f", bubble {result.bubble_fraction:.1%} (measured)" if result.timelines else ""
        print(
            f"{result.schedule}: {result.ranks} pipeline ranks{mesh}, {len(result.losses)} steps, "
            f"training loss {result.losses[0]:.3f} -> {result.losses[-1]:.3f}; "
            f"median step {result.step_time_s * 1000:.1f} ms{bubble}"
        )
        print(flags.runner_line(result.runner, result.schedule))
    if result.timelines:  # (--gantt was refused where there are none)
        flags.save_chart(result.timeline, args)  # after the result: a failed save cannot lose it
    return 0


def torchrun_main(argv: list[str] | None = None) -> int:
    """Run as one rank under torchrun (RANK, WORLD_SIZE, MASTER_ADDR... come from torchrun)."""
    return report_errors(lambda: _main(argv))


def rendezvous_timeout(rdzv_conf: str) -> str:
    """The seconds of ``--rdzv-conf timeout=S`` as torchrun was given them, for the message."""
    pairs = dict(kv.split("=", 1) for kv in rdzv_conf.split(",") if "=" in kv)
    return f"{pairs['timeout']} s" if "timeout" in pairs else "torchrun's rendezvous timeout"


def missing_peer_line(args: argparse.Namespace, err: Exception) -> str:
    """One line for a node whose rendezvous failed: which endpoint, after how long, what to check."""
    addr, port, nodes, node = args.master_addr, args.master_port, args.nnodes, args.node_rank
    said = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    waited = rendezvous_timeout(args.rdzv_conf)
    head = f"node {node} of {nodes}: no rendezvous at {addr}:{port} after {waited} ({said})."
    if node == 0:
        return head + (
            f" Check that every other node runs this command with --nnodes {nodes}, its own --node-rank "
            f"and --master-addr {addr}, and reaches port {port} of this node."
        )
    return head + (
        f" Check that node 0 runs this command with --node-rank 0, that {addr} is its address as this "
        f"node reaches it, and that port {port} is open there."
    )


class _EarlyStoreClose(logging.Filter):
    """torchrun's exit barrier on a node other than 0 can lose its connection when node 0, which holds
    the rendezvous store, leaves the barrier first and exits; the run had finished (rc 0), yet the
    agent logs a traceback. This says so in one line instead."""

    def __init__(self, node: int, nodes: str) -> None:
        super().__init__()
        self.node, self.nodes = node, nodes

    def filter(self, record: logging.LogRecord) -> bool:
        from torch.distributed import DistNetworkError

        err = record.exc_info[1] if record.exc_info else None
        at_barrier = str(record.msg).startswith("Error waiting on exit barrier")
        if not (at_barrier and isinstance(err, DistNetworkError)):
            return True
        print(
            f"node {self.node} of {self.nodes}: this node's ranks finished; node 0 ended first and closed "
            "the rendezvous, so torchrun's exit barrier here ended without its answer", file=sys.stderr,
        )  # fmt: skip
        return False


def launch_nodes(argv: list[str]) -> int:
    """torchrun itself, with torchrun's flags as written; a node whose rendezvous fails (its peers
    never came, the endpoint is unreachable) ends with one line instead of the agent's traceback."""
    from torch.distributed import DistError
    from torch.distributed import run as torch_run
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    if _QUIET_CPP:  # torch has read it: the ranks get the user's environment (their C++ errors show)
        del os.environ["TORCH_CPP_LOG_LEVEL"]
    from torch.distributed.elastic.multiprocessing.api import SignalException

    args = torch_run.parse_args(argv)
    # the agent's warnings (a banner at the start, three lines on Ctrl-C) go; its errors still show.
    # torch sets a level on each module's logger, so each is set, not a parent
    for name in [n for n in logging.root.manager.loggerDict if n.startswith(_AGENT_LOGGERS)]:
        logging.getLogger(name).setLevel(logging.ERROR)
    barrier_log = logging.getLogger("torch.distributed.elastic.agent.server.api")
    barrier_log.addFilter(_EarlyStoreClose(args.node_rank, args.nnodes))
    try:
        with _run_folder():
            torch_run.run(args)
    except (KeyboardInterrupt, SignalException) as err:  # Ctrl-C, kill: the agent has stopped the ranks
        number = getattr(err, "sigval", signal.SIGINT)  # the agent turns Ctrl-C into SignalException
        said = "interrupted" if number == signal.SIGINT else f"terminated ({signal.Signals(number).name})"
        print(f"\n{said}", file=sys.stderr)
        return 128 + number
    except DistError as err:  # raised by the rendezvous, before any rank started
        print(f"error: {missing_peer_line(args, err)}", file=sys.stderr)
        return 1
    except ChildFailedError as err:  # each failed rank has printed its own line
        failed = ", ".join(f"rank {r} (exit code {f.exitcode})" for r, f in sorted(err.failures.items()))
        print(f"error: node {args.node_rank} of {args.nnodes}: {failed} failed", file=sys.stderr)
        return 1
    return 0


@contextlib.contextmanager
def _run_folder() -> Iterator[str]:
    """A TMPDIR for this run alone, removed when it ends however it ends: torchrun's agent writes its
    logs to a new torchelastic_* folder there, and the ranks (which inherit TMPDIR) their pymp-* ones;
    without it, both piled up in the user's temp folder, one per run."""
    before, tempdir_before = os.environ.get("TMPDIR"), tempfile.tempdir  # a caller's own tempdir, kept
    with tempfile.TemporaryDirectory(prefix=RUN_FOLDER_PREFIX) as folder:
        os.environ["TMPDIR"], tempfile.tempdir = folder, None  # None: gettempdir reads TMPDIR again
        try:
            yield folder
        finally:
            if before is None:
                os.environ.pop("TMPDIR", None)
            else:
                os.environ["TMPDIR"] = before
            tempfile.tempdir = tempdir_before  # not None: that lost a tempdir set in code (the suite's)


def end_rank(code: int) -> None:
    """Exit a rank that torchrun started without the interpreter's teardown. destroy_process_group
    does not join gloo's worker threads; one that drops the last reference to a tensor while the
    interpreter is being torn down needs the GIL, and the process aborts ("terminate called without
    an active exception", SIGABRT: pytorch/pytorch#179291 describes it). Under load that came after
    the rank had finished: its node failed, and the other node's torchrun agent waited at its exit
    barrier for 300 s. Everything is written by now; flush it and leave."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":  # torchrun -m course_lib.cli.torchrun (the old path runs this too)
    if "-m" in sys.argv[1:]:  # torchrun's syntax (no flag of ours is -m): launch, as torchrun does
        sys.exit(launch_nodes(sys.argv[1:]))
    code = torchrun_main()
    if "TORCHELASTIC_RUN_ID" in os.environ:  # a rank of torchrun's (a plain python run exits as usual)
        end_rank(code)
    sys.exit(code)
