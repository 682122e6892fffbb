"""``python -m course_lib plan``: the fastest layouts (t, p, d, b, schedule, v) for a model on a cluster.

Every layout that divides the GPUs and the global batch and fits memory is ranked by its predicted
step time (closed forms; the simulator replays the leaders' pipelines). Presets: the models of
Megatron-LM's Table 1 and Llama 3 405B; the clusters a100-selene and h100-llama3.

Try::

    python -m course_lib plan --model megatron-1t --cluster a100-selene --gpus 3072 --global-batch 3072
    python -m course_lib plan --model llama3-405b --cluster h100-llama3 --gpus 8192 --global-batch 2048 \\
        --zero1 --top 5 --json
"""

from __future__ import annotations

import argparse

from course_lib.cli.flags import SEQ_LEN, figure_path, number_type, print_json
from course_lib.planner import CLUSTERS, MODELS, cluster, model, plan
from course_lib.planner.enumerate import Plan, Planned
from course_lib.planner.step_time import MEGATRON_OVERLAP, PIPELINE_SENDS, Overlap
from course_lib.shelf.errors import LIMITS

COLUMNS = (
    "  t   p     d   b  schedule          v  recompute  step s  TFLOP/s  MFU  memory GiB  bubble  comm s"
)


def plan_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help=f"model preset: {', '.join(MODELS)}")
    parser.add_argument("--cluster", required=True, help=f"cluster preset: {', '.join(CLUSTERS)}")
    parser.add_argument(
        "--gpus", type=number_type(high=LIMITS["gpus"]), required=True, help="GPUs in all (whole nodes)"
    )
    parser.add_argument(
        "--global-batch",
        type=number_type(high=LIMITS["global_batch"]),
        required=True,
        help="sequences per optimizer step",
    )
    parser.add_argument("--seq-len", type=SEQ_LEN, help="override the preset's sequence length")
    top = number_type(high=10**6)
    parser.add_argument("--top", type=top, default=10, help="layouts to list (default 10)")
    parser.add_argument("--zero1", action="store_true", help="shard optimizer states over the replicas")
    parser.add_argument("--no-recompute", action="store_true", help="never recompute activations")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.add_argument(
        "--sends", choices=PIPELINE_SENDS, default=MEGATRON_OVERLAP.pipeline_sends,
        help="pipeline messages: 'blocking' (Megatron-LM 2021: on every micro-batch's path, the default) "
        "or 'overlapped' (hidden behind compute but in the fill and drain)",
    )  # fmt: skip
    parser.add_argument(
        "--dp-overlap", action="store_true",
        help="let the last micro-batch's backward hide the DP all-reduce (default: after the flush)",
    )  # fmt: skip
    parser.add_argument(
        "--gantt", metavar="FILE.png", type=figure_path,
        help="save the best layout's simulated Gantt chart (one replica, at most 2p micro-batches)",
    )  # fmt: skip
    parser.add_argument(
        "--layout", help="a Megatron-core layout string fixing the stages' blocks, e.g. 'E(t*5|)*15t*5L': "
        "only layouts with p x v = its stages, costed by the busiest stage and GPU",
    )  # fmt: skip


def plan_command(args: argparse.Namespace) -> int:
    shape = model(args.model)  # CourseError (exit 2) naming an unknown preset and the choices
    if args.seq_len:
        shape = shape.with_seq_len(args.seq_len)
    recompute = (False,) if args.no_recompute else (True, False)
    overlap = Overlap(args.sends, dp_overlapped=args.dp_overlap)
    result = plan(
        shape, cluster(args.cluster), args.gpus, args.global_batch, recompute=recompute, zero1=args.zero1,
        overlap=overlap, layout=args.layout,
    )  # fmt: skip
    best = result.best  # CourseError when nothing fits
    shown = result.layouts[: args.top]
    if args.json:
        print_json({"best": best.as_dict(), "layouts": [x.as_dict() for x in shown], **_request(result)})
    else:
        print(_summary(result))
        print(COLUMNS)
        print("\n".join(_row(x) for x in shown))
    if args.gantt:
        _save_gantt(result, args)
    return 0


def _request(result: Plan) -> dict:
    return {
        "model": result.shape.name, "cluster": result.cluster.name, "gpus": result.gpus,
        "global_batch": result.global_batch, "seq_len": result.shape.seq_len,
        "efficiency": result.cluster.efficiency, "candidates": result.candidates,
        "fitting": len(result.layouts), "pipeline_sends": result.overlap.pipeline_sends,
        "dp_overlapped": result.overlap.dp_overlapped,
    }  # fmt: skip


def _summary(result: Plan) -> str:
    return (
        f"{result.shape.name} ({result.shape.parameters() / 1e9:,.1f}B parameters, sequence "
        f"{result.shape.seq_len}) on {result.gpus:,} x {result.cluster.gpu} ({result.cluster.name}), "
        f"global batch {result.global_batch:,}: {len(result.layouts)} of {result.candidates} layouts fit "
        f"memory; compute efficiency {result.cluster.efficiency} (calibrated, see planner/published.py)"
        f"; pipeline sends {result.overlap.pipeline_sends}, DP all-reduce "
        f"{'overlapped with the last backward' if result.overlap.dp_overlapped else 'after the flush'}"
    )


def _row(x: Planned) -> str:
    comm = x.parts.tp_s + x.parts.boundary_s + x.parts.dp_s
    sim = "*" if x.parts.simulated else " "
    return (
        f"{x.t:3d} {x.p:3d} {x.d:5d} {x.b:3d}  {x.schedule:16s} {x.v:2d}  {str(x.recompute):9s} "
        f"{x.step_s:7.2f}{sim} {x.tflops_per_gpu:7.1f}  {x.mfu:4.0%}  {x.memory_per_gpu_bytes / 2**30:9.1f}  "
        f"{x.bubble_share:6.1%}  {comm:6.2f}"
    )


def _save_gantt(result: Plan, args: argparse.Namespace) -> None:
    from course_lib.charts.gantt import save_timeline_png
    from course_lib.planner.step_time import pipeline_timeline

    best = result.best
    m = min(best.layout.microbatches(result.global_batch), 2 * best.p)
    save_timeline_png(pipeline_timeline(result.shape, result.cluster, best.layout, m), args.gantt)
    if not args.json:
        print(f"Gantt chart of the best layout ({m} micro-batches, simulated) saved to {args.gantt}")
