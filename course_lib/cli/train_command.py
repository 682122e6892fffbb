"""Train the toy transformer: ``python -m course_lib train [--engine E] [--json] [flags]``.

Each example takes seconds (8 layers, a few steps); leave out ``--layers`` and ``--steps`` for the
full size, 80 layers and 80 steps (a minute or two)::

    python -m course_lib train --layers 8 --steps 5                  # reference trainer, progress bar
    python -m course_lib train --layers 8 --steps 20 --json
    python -m course_lib train --engine local --schedule 1f1b --stages 4 --microbatches 8 --layers 8 \\
        --steps 5 --gantt 1f1b.png
    python -m course_lib train --engine distributed --schedule gpipe --stages 2 --latency 0.01 \\
        --layers 8 --steps 5 --json
    python -m course_lib train --engine local --schedule zb-h1 --stages 4 --layers 8 --steps 2 \\
        --check-reference --json
    python -m course_lib train --engine distributed --tp 2 --stages 2 --dp 2 --layers 4 --batch-size 8 \\
        --microbatches 2 --steps 2 --check-reference --json           # TP x PP x DP: 8 ranks
    python -m course_lib train --engine distributed --runner torch --schedule 1f1b --stages 2 \\
        --microbatches 4 --layers 8 --steps 5            # the same run on torch.distributed.pipelining

Engines: ``reference`` (one device, gradient accumulation: the ground truth), ``local`` (one process
runs every stage in the schedule's order; its timeline is *measured compute + simulated links*) and
``distributed`` (one process per stage, real sends and receives; its timeline is *measured*; with
``--tp T`` and ``--dp D``, t x p x d processes: each stage split across T ranks, D replicas whose
gradients are averaged once per step; the timeline is rank 0's pipeline). ``--runner`` says who
executes the distributed engine's run: ``distributed`` (the course's engine, default), ``torch``
(torch.distributed.pipelining's own class for the schedule: gpipe, 1f1b, interleaved-1f1b) or
``torch-csv`` (torch's generic runtime fed our order as CSV: any schedule). Both give the same result,
but torch records no per-action timeline: step times and losses, no bubble figure, no ``--gantt``;
the flags only our engine reads (links, ``--checkpoint``, ``--tp``, ``--dp``, ``--check-reference``)
are refused with torch's runners, naming why.

Every flag is checked before any work starts; a bad value is refused with a message that names it
and says what is allowed. So is a flag the engine would not read: pipeline and link flags with the
reference engine, ``--timeout``, ``--tp``, ``--dp`` and ``--runner`` with any engine but the
distributed one. Each process uses one CPU thread, as the lessons do (``--threads N`` for more;
distributed ranks share the cores by default). ``--json`` prints one JSON object on stdout (the
progress bar goes to stderr), so the output can be piped into other tools; it says ``tp`` and ``dp``
(1 but for the distributed engine). For the pipeline engines it adds ``bubble_fraction`` and
``timeline_source``, ``link`` (the ``--latency`` and ``--bandwidth`` every boundary had; bandwidth
null: unlimited), and for the distributed engine ``pipeline_ranks`` (p) beside ``world`` (t x p x d
processes), ``runner`` and ``torch_class`` (torch's class that ran it; null for the course's engine;
with it, ``bubble_fraction`` and ``timeline_source`` are null); and ``max_grad_diff_vs_reference``
with ``--check-reference`` (largest gradient difference against the reference trainer on the first
batch).
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import replace

import torch

import course_lib.engines  # noqa: F401  (registers the split backward of zero-bubble schedules)
import course_lib.stage_layout  # noqa: F401  (a room: --layout reads a Megatron layout string)
from course_lib.cli import flags
from course_lib.cli.flags import PipelineFlags
from course_lib.shelf.errors import check_threads, require
from course_lib.shelf.reference import TrainConfig, max_grad_diff, reference_gradients, train

ENGINES = ("reference", "local", "distributed")
PIPELINE_ENGINES = ("local", "distributed")
# flag -> the engines that read it (every other flag is read by all); any other engine refuses it
USED_BY: dict[str, tuple[str, ...]] = dict.fromkeys(
    ("--schedule", "--stages", "--virtual", "--checkpoint", "--latency", "--bandwidth", "--gantt",
     "--check-reference"), PIPELINE_ENGINES,
) | dict.fromkeys(("--timeout", "--tp", "--dp", "--runner"), ("distributed",))  # fmt: skip
USED_BY["--layout"] = PIPELINE_ENGINES  # a Megatron layout string: where each piece of the model sits


def train_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--engine", default="reference", help=f"{', '.join(ENGINES)} (default reference)")
    flags.add_model_flags(parser)
    pipeline = flags.add_pipeline_flags(parser)
    pipeline.add_argument(
        "--check-reference", action="store_true", default=None,
        help="compare the first step's gradients with the reference trainer's",
    )  # fmt: skip
    flags.add_layout_flag(pipeline)
    flags.add_whole_model_flags(parser)
    flags.add_link_flags(parser)
    flags.add_output_flags(parser)


def refuse_flags_the_engine_ignores(args: argparse.Namespace) -> None:
    """A flag the chosen engine would not read is an error, not silently ignored."""
    ignored = [
        f"{flag} (read by --engine {' or '.join(engines)})"
        for flag, engines in USED_BY.items()
        if getattr(args, flag[2:].replace("-", "_")) is not None and args.engine not in engines
    ]
    require(
        not ignored,
        f"--engine {args.engine} does not use {', '.join(ignored)}; drop those flags or choose an engine "
        "that uses them",
    )


def _run_local(cfg: TrainConfig, pipe: PipelineFlags, args: argparse.Namespace, progress: bool):
    from course_lib.shelf.local_engine import LocalPipelineTrainer

    options = dict(virtual=pipe.virtual, checkpoint=pipe.checkpoint, links=pipe.links, partition=args.layout)
    trainer = LocalPipelineTrainer(cfg, pipe.schedule, _stages(pipe, args), **options)  # checks all first
    diff = trainer.max_grad_diff_vs_reference() if args.check_reference else None
    return trainer.train(progress=progress), diff


def _run_distributed(cfg: TrainConfig, pipe: PipelineFlags, args: argparse.Namespace, progress: bool):
    # one process per rank (course_lib/shelf/distributed_engine.py); specs are checked before any spawn
    from course_lib.engines import faults, idle_release, torch_pipelining  # noqa: F401 (rooms: add their make_spec options)
    from course_lib.shelf import distributed_engine as distributed
    from course_lib.tp import mesh  # noqa: F401 (a room: adds tp= and dp= to make_spec)

    options = dict(
        virtual=pipe.virtual, checkpoint=pipe.checkpoint, links=pipe.links, timeout_s=pipe.timeout,
        threads=args.threads,  # None: the engine shares the cores among the ranks
        tp=pipe.tp, dp=pipe.dp,  # t x p x d ranks (course_lib/tp/mesh.py)
        runner=pipe.runner,  # our engine, or torch.distributed.pipelining (torch_pipelining.py)
    )  # fmt: skip
    if args.layout is not None:  # the layout string is the partition (layers per stage)
        options["partition"] = args.layout
    spec = distributed.make_spec(cfg, pipe.schedule, _stages(pipe, args), **options)
    if not args.check_reference:
        return distributed.launch([spec], progress)[0], None
    # the gradient check is one more step from the same weights: run it in the same spawn of ranks
    # (the spec already checked: one step fewer or more changes nothing make_spec checks)
    probe = replace(spec, cfg=replace(spec.cfg, steps=1), return_grads=True)
    probe_result, result = distributed.launch([probe, spec], progress)
    return result, max_grad_diff(probe_result.grads, reference_gradients(cfg)[1])


def _stages(pipe: PipelineFlags, args: argparse.Namespace) -> int | None:
    """The ranks: --stages, or with --layout and no --stages, None (the layout's stages, one rank each)."""
    return None if args.layout is not None and args.stages is None else pipe.stages


def train_command(args: argparse.Namespace) -> int:
    require(args.engine in ENGINES, f"unknown engine {args.engine!r}; expected one of {', '.join(ENGINES)}")
    refuse_flags_the_engine_ignores(args)
    flags.refuse_what_torch_ignores(args)
    cfg = flags.with_whole_model_flags(flags.config_from_flags(args), args)
    # the lessons' thread policy (course_lib/lesson.py): on a busy machine extra threads make a step of
    # this small model many times slower; distributed ranks get their own count (--threads or a share)
    torch.set_num_threads(check_threads(args.threads, "--threads") or 1)  # before libgomp allocates them
    progress = sys.stderr.isatty() or not args.json
    if args.engine == "reference":
        result, diff, timeline = train(cfg, progress=progress), None, None
    else:
        runner = _run_local if args.engine == "local" else _run_distributed
        pipe = PipelineFlags.from_args(args)
        result, diff = runner(cfg, pipe, args, progress)
        timeline = result.timeline if pipe.runner == "distributed" else None  # torch records none
    # what to_json leaves out: the engine, and no TP or DP in one process or one pipeline
    out = {"engine": args.engine, "tp": 1, "dp": 1} | result.to_json()
    if diff is not None:
        out["max_grad_diff_vs_reference"] = diff
    if args.engine != "reference" and pipe.links is not None:  # echo the link (bandwidth null: unlimited)
        out["link"] = {"latency_s": pipe.links.latency_s, "bandwidth_Bps": pipe.links.bandwidth_Bps}
    if args.json:
        flags.print_json(out)  # a diverged loss is null
    else:
        _print_summary(cfg, args, out, timeline, diff)
    flags.save_chart(timeline, args)
    return 0


def _print_summary(cfg: TrainConfig, args, out: dict, timeline, diff: float | None) -> None:
    print(
        f"trained {cfg.n_layers} layers ({out.get('n_params', 0):,} parameters) for {cfg.steps} steps, "
        f"{cfg.microbatches} micro-batches per batch, engine {args.engine}"
    )
    if out["losses"]:  # every engine: the mean loss of each step's batch
        print(f"training loss {out['losses'][0]:.3f} -> {out['losses'][-1]:.3f} (first and last batch)")
    if "val_loss_start" in out and out.get("val_loss_end") is not None:
        drop = 1 - out["val_loss_end"] / out["val_loss_start"]
        print(f"held-out loss {out['val_loss_start']:.3f} -> {out['val_loss_end']:.3f} ({drop:.0%} lower)")
    elif out["losses"]:
        print("held-out loss: not evaluated by this engine (engines reference and local evaluate it)")
    print(f"median step {out['step_time_s'] * 1000:.0f} ms (measured)")
    if "runner" in out:
        print(flags.runner_line(out["runner"], out["schedule"]))
    if "link" in out:
        link, how = out["link"], "simulated" if args.engine == "local" else "injected: each message waits"
        rate = "unlimited" if link["bandwidth_Bps"] == math.inf else f"{link['bandwidth_Bps']:.3g} bytes/s"
        print(f"link at every stage boundary: {link['latency_s'] * 1000:g} ms latency, {rate} ({how})")
    if timeline is not None:
        print(
            f"schedule {timeline.schedule_name}, {timeline.n_devices} devices: "
            f"bubble {timeline.bubble_fraction:.1%} of the step ({timeline.source})"
        )
    if out["tp"] * out["dp"] > 1:
        print(
            f"t x p x d = {out['tp']} x {out['pipeline_ranks']} x {out['dp']} = {out['world']} ranks; the "
            "timeline is rank 0's pipeline (replica 0, TP rank 0 of every stage)"
        )
    if diff is not None:
        print(f"largest gradient difference against the reference trainer: {diff:.2e}")
