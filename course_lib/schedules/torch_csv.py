"""Read and write torch.distributed.pipelining's schedule CSV: one row per rank, one action per cell.

PyTorch's ``_dump_csv`` / ``_load_csv`` (compute-only format) write each rank's ``pipeline_order`` as
a CSV row with Python's default ``csv`` dialect: cells like ``0F0``, ``1B3``, ``2I1``, ``2W1``; an idle
step (``None`` in PyTorch) is an empty cell; lines end in ``\\r\\n``. We write the same, so a schedule
built here loads in PyTorch (``schedule._load_csv(path)``) and a schedule dumped there loads here.

Try it::

    from course_lib.shelf.first_schedules import build_schedule
    from course_lib.schedules.torch_csv import to_csv_text, from_csv_text
    text = to_csv_text(build_schedule("gpipe", 2, 3))
    print(text)                       # 0F0,0F1,0F2,0B0,0B1,0B2  /  1F0,...
    print(from_csv_text(text))
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

from course_lib.input_files import read_input
from course_lib.output_files import write_whole
from course_lib.schedules.v_shape import split_full_backwards
from course_lib.shelf.errors import CourseError, require
from course_lib.shelf.schedule import Action, Kind, Schedule
from course_lib.shelf.validate import MAX_ACTIONS

# PyTorch cells that are not compute: FSDP (UNSHARD/RESHARD), gradient reduction, communication.
_OTHER_RE = re.compile(r"^\d+(UNSHARD|RESHARD|REDUCE_GRAD|SEND_F|RECV_F|SEND_B|RECV_B)\d*$")
# a forward overlapped with a backward (DualPipeV): "(0F3;3B1)OVERLAP_F_B", read as its sub-actions
_OVERLAP_RE = re.compile(r"^\((.*)\)OVERLAP_F_B$")


def to_csv_text(schedule: Schedule) -> str:
    """The schedule as PyTorch's compute-only CSV text (one row per device)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)  # default dialect, exactly as torch's _dump_csv
    for order in schedule.orders:
        writer.writerow([str(action) for action in order])
    return buffer.getvalue()


def write_csv(schedule: Schedule, path: str | Path) -> None:
    """Write `schedule` to `path` in PyTorch's compute-only CSV format."""
    data = to_csv_text(schedule).encode()  # csv's \r\n kept as written
    write_whole(path, lambda file: file.write(data))  # a full disk leaves the old file, never half of one


def from_csv_text(
    text: str, name: str = "from-csv", n_microbatches: int | None = None, n_stages: int | None = None,
    ignore_non_compute: bool = False,
) -> Schedule:
    """Parse PyTorch's CSV text into a Schedule.

    Empty cells (PyTorch's idle steps) are skipped; an overlapped pair ``(0F3;3B1)OVERLAP_F_B``
    (DualPipeV) is its sub-actions, and in an order that mixes full backwards B with split ones each B
    becomes I then W (schedules/v_shape.py says why). Stage placement is read off the rows: a stage
    lives on the device whose row holds its actions (a stage no row mentions is put on device
    ``stage % p``). `n_microbatches` and `n_stages` default to what the actions mention; pass them to
    check a schedule against the sizes it should have. Non-compute cells such as ``0REDUCE_GRAD`` or
    ``1SEND_F0`` are an error unless `ignore_non_compute` is True, which drops them. `text` may be
    bytes holding UTF-8; anything that is not such text (binary, UTF-16, a NUL, a cell longer than any
    action) is one CourseError saying so."""
    rows = _rows(_as_text(text, "the CSV text"))
    if not rows:
        raise CourseError("the CSV text is empty; expected one row of actions per device, e.g. '0F0,0B0'")
    orders: list[list[Action]] = []
    for device, row in enumerate(rows):
        order = []
        for column, cell in enumerate(row):
            cell = cell.strip()
            if not cell:
                continue  # an idle step
            if _OTHER_RE.match(cell):
                if ignore_non_compute:
                    continue
                raise CourseError(
                    f"row {device}, column {column}: {cell!r} is not a compute action; this reader "
                    "takes compute-only CSVs (F, B, I, W), pass ignore_non_compute=True to drop such cells"
                )
            overlap = _OVERLAP_RE.match(cell)
            try:
                order += [Action.parse(sub) for sub in (overlap.group(1).split(";") if overlap else [cell])]
            except ValueError as err:
                raise CourseError(f"row {device}, column {column}: {err}") from None
        orders.append(order)

    kinds = {a.kind for order in orders for a in order}
    if Kind.B in kinds and kinds & {Kind.I, Kind.W}:  # DualPipeV's mix: each B as I then W (v_shape.py)
        orders = split_full_backwards(orders)
    actions = [a for order in orders for a in order]
    n_devices = len(orders)
    if n_stages is None:
        n_stages = max((a.stage + 1 for a in actions), default=n_devices)
    if n_microbatches is None:
        n_microbatches = max((a.microbatch + 1 for a in actions), default=1)
    sizes = f"{n_stages:,} stages x {n_microbatches:,} micro-batches"  # checked before anything that size
    fits = 3 * n_stages * n_microbatches <= MAX_ACTIONS  # is built: a mistyped cell must not take minutes
    require(fits, f"{sizes} is beyond the {MAX_ACTIONS:,} actions the validator checks: is a cell mistyped?")
    first_row: dict[int, int] = {}  # stage -> the first device whose row mentions it
    for device, order in enumerate(orders):
        for action in order:
            first_row.setdefault(action.stage, device)
    placement = [first_row.get(stage, stage % n_devices) for stage in range(n_stages)]
    split = any(a.kind in (Kind.I, Kind.W) for a in actions)
    return Schedule(name, n_stages, n_microbatches, orders, placement, split_backward=split)


def read_csv(path: str | Path, **kwargs) -> Schedule:
    """Read a PyTorch schedule CSV file; keyword arguments as for :func:`from_csv_text`. A missing,
    unreadable or oversized file, or one that is not UTF-8 text, is one CourseError naming it."""
    path = Path(path)
    kwargs.setdefault("name", path.stem)
    data = read_input(path, "schedule CSV", MAX_BYTES)  # a FIFO, /dev/zero, a folder: refused, not read
    return from_csv_text(_as_text(data, repr(str(path))), **kwargs)


MAX_CELL = 200  # characters: the longest action, an overlapped pair "(123F45;678B90)OVERLAP_F_B", takes ~30
MAX_BYTES = MAX_ACTIONS * 16  # a CSV of MAX_ACTIONS actions, each with its comma: at most ~12 bytes


def _as_text(data: object, what: str) -> str:
    """`data` as text: a str, or bytes that decode as UTF-8 (a byte-order mark is dropped)."""
    if isinstance(data, str):
        text = data
    elif isinstance(data, (bytes, bytearray)):
        if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
            raise CourseError(f"{what} is UTF-16 text; save it as UTF-8 (PyTorch's _dump_csv writes UTF-8)")
        try:
            text = bytes(data).decode("utf-8-sig")
        except UnicodeDecodeError as err:
            byte = f"byte {err.start} is {data[err.start]:#04x}"
            raise CourseError(f"{what} is not UTF-8 text ({byte}); a schedule CSV holds rows of actions "
                              "such as 0F0,0B0") from None  # fmt: skip
    else:
        raise CourseError(f"{what} must be a str (or UTF-8 bytes), got {type(data).__name__}")
    require("\0" not in text, f"{what} holds a NUL character: it is binary, not a schedule CSV")
    return text


def _rows(text: str) -> list[list[str]]:
    """The CSV's rows, each cell at most MAX_CELL characters (csv's own limit is 131,072)."""
    try:
        rows = list(csv.reader(io.StringIO(text)))
    except csv.Error as err:
        raise CourseError(f"the CSV text cannot be read as CSV ({err}): is it a schedule CSV?") from None
    for device, row in enumerate(rows):
        for column, cell in enumerate(row):
            require(
                len(cell) <= MAX_CELL,
                f"row {device}, column {column}: a cell of {len(cell):,} characters (an action such as 0F0 "
                f"takes a few; at most {MAX_CELL} are read): is this a schedule CSV?",
            )
    return rows
