"""``python -m course_lib schedule``: print a schedule's per-device orders (text or PyTorch CSV).

Try::

    python -m course_lib schedule --schedule 1f1b --stages 4 --microbatches 8
    python -m course_lib schedule --schedule Interleaved1F1B --stages 2 --microbatches 4 --virtual 2
    python -m course_lib schedule --schedule gpipe --stages 2 --microbatches 3 --format torch-csv
    python -m course_lib schedule --list
    python -m course_lib schedule --from-csv my_schedule.csv   # PyTorch's CSV (_dump_csv): checked, printed
"""

from __future__ import annotations

import argparse
import sys

from course_lib.cli.flags import ACTIONS
from course_lib.schedules.torch_csv import read_csv, to_csv_text
from course_lib.shelf.errors import require
from course_lib.shelf.first_schedules import SCHEDULES, build_schedule, resolve_name
from course_lib.shelf.validate import validate


def schedule_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--schedule", help=f"{', '.join(SCHEDULES)} (or PyTorch's class names)")
    parser.add_argument("--stages", type=ACTIONS,
                        help="P: pipeline devices (ranks); with --virtual V, P*V stages")  # fmt: skip
    parser.add_argument("--microbatches", type=ACTIONS, help="M: micro-batches per step")
    parser.add_argument("--virtual", type=ACTIONS,
                        help="V: stages per device (interleaved only; default 2 there, else 1)")  # fmt: skip
    parser.add_argument("--format", choices=("text", "torch-csv"), default="text", help="output format")
    parser.add_argument("--from-csv", metavar="FILE.csv",
                        help="read PyTorch's compute-only CSV, validate it and print it")  # fmt: skip
    parser.add_argument("--list", action="store_true",
                        help="list the schedules, their closed forms and where those hold")  # fmt: skip


def schedule_command(args: argparse.Namespace) -> int:
    if args.list:  # what each schedule is, the sizes it takes, its closed forms and where they hold
        for info in SCHEDULES.values():
            alias = f" (PyTorch: {info.torch_class})" if info.torch_class else ""
            print(f"{info.name}{alias}: {info.description}")
            print(f"    paper: {info.paper}")
            print(f"    constraints: {info.constraints}")
            print(f"    bubble: {info.bubble.text}, for {info.bubble.where}  [{info.bubble.source}]")
            print(f"    peak in flight: {info.peak.text}, for {info.peak.where}  [{info.peak.source}]")
        return 0
    if args.from_csv:
        return _print_csv_file(args)
    for flag, example in (("schedule", "1f1b"), ("stages", "4"), ("microbatches", "8")):
        require(getattr(args, flag) is not None, f"--{flag} is required, e.g. --{flag} {example} (or --list)")
    info = SCHEDULES[resolve_name(args.schedule)]
    virtual = args.virtual if args.virtual is not None else info.default_virtual
    schedule = build_schedule(info.name, args.stages, args.microbatches, virtual)
    validate(schedule)  # builders are tested, but say so loudly if one ever produces a broken order
    if args.format == "torch-csv":
        sys.stdout.write(to_csv_text(schedule))
        return 0
    placement = f", v={virtual} stages per device ({schedule.n_stages} stages)" if info.uses_virtual else ""
    sizes = f"p={schedule.n_devices} devices, m={schedule.n_microbatches} micro-batches"
    print(f"# {schedule.name}: {sizes}{placement}")
    print(schedule.to_text())
    return 0


def _print_csv_file(args: argparse.Namespace) -> int:
    """``--from-csv``: the file's schedule, validated (every problem named), in the chosen format."""
    given = [f"--{flag}" for flag in ("schedule", "stages", "microbatches", "virtual") if getattr(args, flag)]
    require(not given, f"--from-csv reads the sizes from the file; drop {', '.join(given)}")
    schedule = read_csv(args.from_csv)
    validate(schedule)
    if args.format == "torch-csv":
        sys.stdout.write(to_csv_text(schedule))
        return 0
    sizes = f"p={schedule.n_devices} devices, m={schedule.n_microbatches} micro-batches"
    print(f"# {schedule.name} (read from {args.from_csv}): {sizes}, {schedule.n_stages} stages; valid")
    print(schedule.to_text())
    return 0
