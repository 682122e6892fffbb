"""``python -m course_lib simulate``: simulate a schedule and print its time, bubble and memory.

Costs default to one time unit for each of F (forward), I (input-grad backward) and W (weight-grad
backward) per device's share of the model, read as seconds so that --latency (seconds) and
--bandwidth (bytes/s) share the unit. A full backward B costs I + W. With --virtual V each of a
device's V stages costs 1/V.

Try::

    python -m course_lib simulate --schedule 1f1b --stages 4 --microbatches 8
    python -m course_lib simulate --schedule gpipe --stages 4 --microbatches 8 --latency 0.25 --json
    python -m course_lib simulate --schedule Interleaved1F1B --stages 4 --microbatches 8 --virtual 2 \\
        --gantt interleaved.png
"""

from __future__ import annotations

import argparse
import math

import course_lib.fast_simulator  # noqa: F401  (past lesson sizes simulate takes the fast path once imported)
from course_lib.cli.flags import (
    ACTIONS,
    BANDWIDTH,
    SECONDS,
    figure_path,
    number_type,
    print_json,
    save_chart,
)
from course_lib.schedules.closed_forms import Case, ClosedForm
from course_lib.shelf.costs import Link
from course_lib.shelf.first_schedules import SCHEDULES, ScheduleInfo, resolve_name
from course_lib.shelf.simulator import StageCosts, simulate_named
from course_lib.shelf.timeline import Timeline


def simulate_arguments(parser: argparse.ArgumentParser) -> None:
    names = ", ".join(SCHEDULES)
    parser.add_argument("--schedule", required=True, help=f"{names} (or PyTorch's class names)")
    parser.add_argument("--stages", type=ACTIONS, required=True, help="P: pipeline devices")
    parser.add_argument("--microbatches", type=ACTIONS, required=True, help="M: micro-batches per step")
    parser.add_argument("--virtual", type=ACTIONS, help="V: stages per device (interleaved only)")
    parser.add_argument("--latency", type=SECONDS, default=0.0, help="link latency, seconds (default 0)")
    parser.add_argument("--bandwidth", type=BANDWIDTH, help="link bandwidth, bytes/s (default unlimited)")
    parser.add_argument(
        "--boundary-bytes", type=number_type(low=0, high=2**50), default=0,  # a PiB: past any one message
        help="bytes one micro-batch sends across a stage boundary (gradients back: the same)",
    )  # fmt: skip
    for kind, what in (("f", "forward"), ("i", "input-grad backward"), ("w", "weight-grad backward")):
        parser.add_argument(
            f"--time-{kind}", type=SECONDS, default=1.0,
            help=f"{what} time of one device's share of the model, seconds (default 1)",
        )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print a JSON summary instead of text")
    parser.add_argument("--gantt", metavar="FILE.png", type=figure_path, help="also save the Gantt chart")
    parser.add_argument("--transfers", action="store_true", help="draw transfers on the Gantt chart")


def _simulate(args: argparse.Namespace) -> tuple[Timeline, dict[str, object], ScheduleInfo, Case]:
    info = SCHEDULES[resolve_name(args.schedule)]
    virtual = args.virtual if args.virtual is not None else info.default_virtual
    share = StageCosts(args.time_f, args.time_i, args.time_w)  # a device's share: each of v stages 1/v
    link = Link(latency_s=args.latency, bandwidth_Bps=args.bandwidth or math.inf)  # None: unlimited
    tl = simulate_named(info.name, args.stages, args.microbatches, virtual, share, args.boundary_bytes, link)
    default_costs = (args.time_f, args.time_i, args.time_w) == (1.0, 1.0, 1.0)
    p, m = tl.n_devices, args.microbatches
    case = Case.of(p, m, virtual, share.per_virtual_stage(virtual), link, args.boundary_bytes)
    setup = {
        "p": p, "m": m, "virtual": virtual,
        "costs": {
            "f": args.time_f, "i": args.time_i, "w": args.time_w,
            "per_stage_divisor_v": virtual, "default_uniform_time_unit": default_costs,
        },
        "link": {"latency_s": args.latency, "bandwidth_Bps": args.bandwidth},
        "boundary_bytes": args.boundary_bytes,
        "closed_forms": {
            "bubble": _closed_form(info.bubble, case), "peak_inflight": _closed_form(info.peak, case),
        },
    }  # fmt: skip
    return tl, setup, info, case


def _closed_form(form: ClosedForm, case: Case) -> dict[str, object]:
    """The registry's formula at this run: its value where it holds here (else null), and its range."""
    return {
        "formula": form.text, "holds_here": form.holds(case), "value": form.at(case),
        "holds_for": form.where, "source": form.source,
    }  # fmt: skip


def timeline_summary(tl: Timeline) -> dict[str, object]:
    """A Timeline as plain data, the shape ``--json`` prints: its totals, and each device's."""
    return {
        "source": tl.source, "schedule": tl.schedule_name, "makespan": tl.makespan,
        "bubble_fraction": tl.bubble_fraction,
        "per_device": [
            {"device": d, "busy": tl.busy(d), "idle": tl.idle(d),
             "idle_fraction": tl.idle_fraction(d), "peak_inflight_microbatches": tl.peak_inflight(d),
             "peak_stash_bytes": tl.peak_stash_bytes(d)}
            for d in range(tl.n_devices)
        ],
    }  # fmt: skip


def simulate_command(args: argparse.Namespace) -> int:
    tl, setup, info, case = _simulate(args)
    summary = timeline_summary(tl)  # once: its per-device peaks take a pass over every span
    if args.json:
        print_json(summary | setup, indent=2)  # an unlimited bandwidth is null
    else:
        _print_setup(tl, setup, args)
        peak = max(d["peak_inflight_microbatches"] for d in summary["per_device"])
        print(f"bubble: {tl.bubble_fraction:.2%} of device-time idle (simulated);", info.bubble.explain(case))
        print(f"peak in flight: {peak} micro-batches on the busiest device; {info.peak.explain(case, 'd')}")
        _print_devices(summary["per_device"])
    save_chart(tl, args, show_transfers=args.transfers)
    return 0


def _print_setup(tl: Timeline, setup: dict, args: argparse.Namespace) -> None:
    p, m, v = setup["p"], setup["m"], setup["virtual"]
    where = f", v={v} stages per device" if v > 1 else ""
    print(f"# {tl.schedule_name}: p={p} devices, m={m} micro-batches{where}")
    if setup["costs"]["default_uniform_time_unit"]:
        print("costs: uniform f=i=w=1 time unit per device's share of the model (the default; read as")
        print("       seconds, the unit of --latency); a full backward B costs i+w")
    else:
        print(f"costs: f={args.time_f} s, i={args.time_i} s, w={args.time_w} s per device's share; B = i+w")
    if v > 1:
        print(f"       each of the {v} stages on a device costs 1/{v} of that")
    bw = f"{args.bandwidth:g} B/s" if args.bandwidth else "unlimited"
    print(f"links: latency {args.latency:g} s, bandwidth {bw}; {args.boundary_bytes} bytes per message")
    print(f"source: {tl.source}")
    print(f"makespan: {tl.makespan:g} s")


SHOWN_DEVICES = 64  # rows of the per-device table; --json has every device


def _print_devices(per_device: list[dict]) -> None:
    print(f"{'device':>6} {'busy':>10} {'idle':>10} {'idle %':>7} {'peak in-flight':>15} {'peak bytes':>12}")
    half, hidden = SHOWN_DEVICES // 2, len(per_device) - SHOWN_DEVICES
    if hidden > 0:  # the first and the last devices: the pipe's two ends
        per_device = [*per_device[:half], None, *per_device[-half:]]
    for d in per_device:
        if d is None:
            print(f"{'...':>6} {hidden:,} devices more: --json lists every one")
            continue
        print(
            f"{d['device']:>6} {d['busy']:>10.4g} {d['idle']:>10.4g} {d['idle_fraction']:>7.1%} "
            f"{d['peak_inflight_microbatches']:>15} {d['peak_stash_bytes'] or '-':>12}"
        )
