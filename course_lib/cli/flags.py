"""Flags shared by the commands (``train`` and the torchrun entry point share whole groups): one meaning each.

Pipeline and link flags default to None, so that a command can tell a flag given from one left out
(``train`` refuses a flag its engine would not read); the defaults of those left out are
:class:`PipelineFlags`'s. Numbers are read by :func:`number_type`, JSON printed by :func:`print_json`.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

from course_lib.shelf.costs import Link
from course_lib.shelf.errors import LIMITS, CourseError, require
from course_lib.shelf.model import PRECISIONS
from course_lib.shelf.reference import TrainConfig
from course_lib.shelf.run_spec import RUNNERS, torch_class
from course_lib.shelf.stage import CHECKPOINT_MODES
from course_lib.shelf.timeline import Timeline


def number_type(
    kind: type = int, low: float = 1, high: float = math.inf, above: bool = False, hint: str = ""
):
    """An argparse `type`: a finite number (kind int: a whole one) >= low (> with `above`) and <= high;
    argparse refuses anything else before any work, naming the flag, the value and the range."""
    top = "" if high == math.inf else f" and <= {high:g}" if kind is float else f" and <= {high}"
    allowed = f"a {'whole' if kind is int else 'finite'} number {'>' if above else '>='} {low:g}{top}"

    def convert(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = math.nan  # fails every comparison below
        if low <= value <= high and not (above and value == low) and (kind is int or math.isfinite(value)):
            return value
        raise argparse.ArgumentTypeError(f"must be {allowed}, got {text!r}{hint}")

    convert.allowed = allowed  # state_bounds puts it in --help
    return convert


def state_bounds(parser: argparse.ArgumentParser) -> None:
    """Append to the help of every flag read by :func:`number_type` (in `parser` and its sub-commands)
    what it accepts, so that --help states each bound the flag enforces."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                state_bounds(sub)
        allowed = getattr(action.type, "allowed", None)
        if allowed and action.help != argparse.SUPPRESS and allowed not in (action.help or ""):
            action.help = f"{action.help}; {allowed}" if action.help else allowed


COUNT, WHOLE, LAYERS = number_type(), number_type(low=0), number_type(high=LIMITS["layers"])
WIDTH, SEQ_LEN, BATCH = (
    number_type(high=LIMITS["width"]),
    number_type(high=LIMITS["seq_len"]),
    number_type(high=LIMITS["batch"]),
)
STEPS, STAGES = number_type(low=0, high=LIMITS["steps"]), number_type(high=LIMITS["stages"])
# schedule and simulate: 3*p*m*v actions at most LIMITS["actions"], so no one of them may pass it alone
ACTIONS = number_type(high=LIMITS["actions"])
SECONDS = number_type(float, 0, LIMITS["seconds"])
TIMEOUT = number_type(float, 0, LIMITS["timeout_s"], above=True)
LR, SEED = number_type(float, 0, LIMITS["lr"], above=True), number_type(low=0, high=LIMITS["seed"])
BANDWIDTH = number_type(float, 0, above=True, hint="; omit --bandwidth for unlimited")
MAX_NORM = number_type(float, 0, above=True, hint="; omit --clip-grad-norm for no clipping")


def figure_path(text: str) -> str:
    """An argparse `type` for --gantt: a file matplotlib can write, in a folder that exists, tried for
    writing now (permissions, a folder of that name, a read-only disk) rather than after the work."""
    from matplotlib.backend_bases import FigureCanvasBase  # loads only when a chart is asked for

    kinds = sorted(FigureCanvasBase.get_supported_filetypes())
    if Path(text).suffix[1:].lower() not in kinds or not Path(text).parent.is_dir():
        endings = ", *.".join(kinds)
        wanted = f"want an existing folder and a name *.{endings}"
        raise argparse.ArgumentTypeError(f"cannot write {text!r}: {wanted}")
    if problem := _unwritable(Path(text)):
        raise argparse.ArgumentTypeError(f"cannot write {text!r}: {problem}")
    return text


def _unwritable(path: Path) -> str | None:
    """Why `path` cannot be written (None: it can), found without leaving anything behind: an existing
    file is opened for appending (nothing appended), a new one is created and removed at once."""
    if path.is_dir():
        return "it is a folder"
    existed = path.exists()
    try:
        with open(path, "ab"):
            pass
    except OSError as err:
        return err.strerror or str(err)
    if not existed:
        path.unlink()
    return None


def save_chart(timeline: Timeline, args: argparse.Namespace, **options) -> None:
    """Save --gantt's chart once the result is out, so that a failed save cannot lose it; a save that
    fails all the same (the disk filled up meanwhile) is one line naming the file."""
    if args.gantt:
        from course_lib.charts.gantt import save_timeline_png

        try:
            save_timeline_png(timeline, args.gantt, **options)
        except OSError as err:
            raise CourseError(f"the result above stands, but the chart {args.gantt!r} was not saved: "
                              f"{err.strerror or err}") from None  # fmt: skip
        if not args.json:  # the JSON output stays one object
            print(f"Gantt chart saved to {args.gantt}")


def print_json(data: object, indent: int | None = None) -> None:
    """Print strict JSON: a NaN or infinite number (a diverged loss) becomes null, as JSON has neither."""
    text = json.dumps(data)  # writes them as NaN / Infinity / -Infinity, which parse_constant reads back
    print(json.dumps(json.loads(text, parse_constant=lambda _: None), indent=indent, allow_nan=False))


def add_model_flags(parser: argparse.ArgumentParser) -> None:
    d = TrainConfig()
    group = parser.add_argument_group("model and training")
    group.add_argument("--layers", type=LAYERS, default=d.n_layers, help=f"blocks (default {d.n_layers})")
    group.add_argument("--width", type=WIDTH, default=d.d_model, help="d_model, divisible by --heads")
    group.add_argument("--heads", type=WIDTH, default=d.n_heads)
    group.add_argument("--seq-len", type=SEQ_LEN, default=d.seq_len)
    group.add_argument("--steps", type=STEPS, default=d.steps, help="optimizer steps (batches)")
    group.add_argument("--batch-size", type=BATCH, default=d.batch_size, help="samples per batch")
    group.add_argument("--microbatches", "-m", type=BATCH, default=d.microbatches, help="divides the batch")
    group.add_argument("--lr", type=LR, default=d.lr)
    group.add_argument("--seed", type=SEED, default=d.seed)
    group.add_argument("--device", default=d.device,
                       help="cpu, cuda, cuda:N or auto (distributed: cpu = gloo, cuda = NCCL)")  # fmt: skip
    group.add_argument("--data", default=None, help="UTF-8 text file (default: data/corpus.txt)")
    group.add_argument("--precision", choices=list(PRECISIONS), default=d.precision,
                       help="the forward's compute: float32, or autocast on a CUDA GPU")  # fmt: skip
    group.add_argument(
        "--threads", type=COUNT, help="torch CPU threads per process (default 1, as in the lessons; "
        "distributed: the cores shared among the ranks)",
    )  # fmt: skip


def config_from_flags(args: argparse.Namespace) -> TrainConfig:
    """The model and training flags as a TrainConfig. Not checked here: every engine checks its config
    first thing, before any work (``TrainConfig.check``), so the parent checks it once."""
    return TrainConfig(
        n_layers=args.layers, d_model=args.width, n_heads=args.heads, seq_len=args.seq_len,
        batch_size=args.batch_size, microbatches=args.microbatches, steps=args.steps, lr=args.lr,
        seed=args.seed, data_path=args.data, device=args.device, precision=args.precision,
    )  # fmt: skip


def add_pipeline_flags(parser: argparse.ArgumentParser) -> argparse._ArgumentGroup:
    group = parser.add_argument_group("pipeline (engines local and distributed)")
    group.add_argument(
        "--schedule",
        help="naive, gpipe, 1f1b, interleaved-1f1b, zb-h1, zb-v, dualpipe-v, "
        "... or a torch class name (default 1f1b; `schedule --list` lists them)",
    )
    group.add_argument("--stages", "-p", type=STAGES,
                       help="pipeline devices = ranks (default 4; under torchrun: its ranks)")  # fmt: skip
    # torchrun reads a bare --virtual as its own --virtual-local-rank: there, spell it --virtual-stages
    group.add_argument(
        "--virtual", "--virtual-stages", "-v", dest="virtual", type=STAGES,
        help="stages per device: interleaved-1f1b (default 1), zb-v and dualpipe-v (2, the only v they take)",
    )  # fmt: skip
    modes = ", ".join(CHECKPOINT_MODES)
    group.add_argument("--checkpoint", help=f"activation checkpointing: {modes} (default never)")
    group.add_argument(
        "--timeout", type=TIMEOUT,
        help="distributed engine: seconds a rank waits for a peer that is alive but silent (a crashed or "
        "stopped rank is named within seconds anyway); default: 10 x a pessimistic step, at least 60",
    )  # fmt: skip
    group.add_argument(
        "--tp", type=STAGES, help="distributed engine: ranks each stage is split across, Megatron-style "
        "(divides --heads; default 1); t x p x d ranks in all",
    )  # fmt: skip
    group.add_argument(
        "--dp", type=BATCH, help="distributed engine: data-parallel replicas, each on its share of every "
        "micro-batch (divides batch / micro-batches; default 1)",
    )  # fmt: skip
    group.add_argument(
        "--runner", choices=RUNNERS, help="distributed engine: what executes the schedule: distributed (the "
        "course's engine, default), torch (torch.distributed.pipelining's class for it: gpipe, 1f1b, "
        "interleaved-1f1b) or torch-csv (torch's runtime fed our order as CSV: any schedule); torch "
        "records step times and losses, no per-action timeline",
    )  # fmt: skip
    return group


# flag -> why torch's runners do not read it (only the course's engine implements it); refused with them
TORCH_IGNORES: dict[str, str] = {
    "--latency": "no injected links", "--bandwidth": "no injected links",
    "--checkpoint": "no activation checkpointing", "--tp": "no tensor parallelism",
    "--dp": "no data parallelism", "--check-reference": "it returns no gradients to compare",
    "--gantt": "torch records no per-action timeline: no chart, no bubble figure",
}  # fmt: skip


def refuse_what_torch_ignores(args: argparse.Namespace) -> None:
    """With --runner torch or torch-csv, a flag only the course's engine reads is an error, named in
    the flag's own words before any process starts (make_spec would name its Python option instead)."""
    runner = args.runner or "distributed"
    given = [
        f"{flag} ({why})" for flag, why in TORCH_IGNORES.items()
        if getattr(args, flag[2:].replace("-", "_"), None) is not None
    ]  # fmt: skip
    require(
        runner == "distributed" or not given,
        f"--runner {runner} (torch.distributed.pipelining) does not use {'; '.join(given)}; only "
        "--runner distributed (the course's engine) reads them: drop those flags or choose that runner",
    )


def runner_line(runner: str, schedule: str) -> str:
    """The summary's line saying which runner ran the schedule, and what torch's do not record."""
    cls = torch_class(runner, schedule)
    if cls is None:
        return "runner distributed: the course's engine ran the schedule"
    how = "our order, fed as CSV" if runner == "torch-csv" else "the schedule"
    return (
        f"runner {runner}: torch.distributed.pipelining's {cls} ran {how}; torch records no per-action "
        "timeline, so there is no bubble figure (step times and losses only)"
    )


def add_link_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("links between stages (engines local and distributed)")
    group.add_argument("--latency", type=SECONDS, help="latency of every stage boundary, seconds (default 0)")
    group.add_argument("--bandwidth", type=BANDWIDTH, help="bandwidth, bytes per second (default unlimited)")


def add_output_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("output")
    group.add_argument("--json", action="store_true", help="print one JSON object instead of a summary")
    group.add_argument(
        "--gantt", metavar="FILE.png", type=figure_path,
        help="save the last step's Gantt chart (engines local and distributed)",
    )  # fmt: skip


@dataclass(frozen=True)
class PipelineFlags:
    """The pipeline and link flags, with the defaults of those left out."""

    schedule: str = "1f1b"
    stages: int = 4
    virtual: int | None = None  # None: 1, or the only v a schedule takes (2 for zb-v, dualpipe-v)
    checkpoint: str = "never"
    links: Link | None = None  # None: free links
    timeout: float = 60.0  # seconds (distributed engine); from_args: default_timeout's
    tp: int = 1  # tensor-parallel ranks per stage (distributed engine)
    dp: int = 1  # data-parallel replicas (distributed engine)
    runner: str = "distributed"  # what executes the schedule (distributed engine; dist_result.RUNNERS)

    @classmethod
    def from_args(cls, args: argparse.Namespace, **defaults) -> PipelineFlags:
        """`defaults` override the class defaults (torchrun: stages = its number of ranks)."""
        names = ("schedule", "stages", "virtual", "checkpoint", "timeout", "tp", "dp", "runner")
        given = {name: getattr(args, name) for name in names if getattr(args, name) is not None}
        if args.latency is not None or args.bandwidth is not None:  # one Link for every stage boundary
            given["links"] = Link(args.latency or 0.0, args.bandwidth or math.inf)  # BANDWIDTH refused 0
        return cls(**({"timeout": default_timeout(args)} | defaults | given))


def default_timeout(args: argparse.Namespace) -> float:
    """--timeout's default: 10 pessimistic steps, at least 60 s (start-up). Pessimistic: 5 ms a block per
    micro-batch of the CPU toy (measured: 1.4 ms at width 32, 256 tokens), scaled by tokens x width^2,
    and a --latency paid on every one of a step's 2 x m messages on each of its (default 4) boundaries."""
    block_s = 5e-3 * max(1.0, args.batch_size // args.microbatches * args.seq_len * args.width**2 / 2**18)
    boundaries = getattr(args, "stages", None) or PipelineFlags.stages
    waits_s = (getattr(args, "latency", None) or 0.0) * 2 * args.microbatches * boundaries
    return min(LIMITS["timeout_s"], max(60.0, 10 * (args.layers * args.microbatches * block_s + waits_s)))


# ---- where the pieces sit, and the whole model's gradients (train and torchrun) -------------------
def add_layout_flag(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--layout", help="Megatron-core's layout of the stages, e.g. 'Et|tt|t,L' (E embedding, t block, L "
        "head and loss, | between stages, t*3 and (tt|)*2 repeat); more stages than ranks: virtual "
        "stages, stage s on rank s %% p. Default: layers spread evenly",
    )  # fmt: skip


def add_whole_model_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("the whole model's gradients (every engine)")
    group.add_argument(
        "--clip-grad-norm", type=MAX_NORM, metavar="X",
        help="clip the gradient norm of the whole model to X, one norm over every stage and rank (as "
        "torch.nn.utils.clip_grad_norm_ on one device); default: no clipping",
    )  # fmt: skip
    group.add_argument(
        "--tie-embeddings", action="store_true", default=False,
        help="the head reuses the embedding's weight; pipelines keep a copy on the last stage, summing "
        "the two copies' gradients after the flush",
    )  # fmt: skip


def with_whole_model_flags(cfg: TrainConfig, args: argparse.Namespace) -> TrainConfig:
    """`cfg` with --clip-grad-norm and --tie-embeddings (checked with the rest by ``TrainConfig.check``)."""
    return replace(cfg, clip_grad_norm=args.clip_grad_norm, tie_embeddings=args.tie_embeddings)

