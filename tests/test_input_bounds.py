"""Issue 28: every input is answered before work starts, as one clear sentence, or handled.

One table per class of case: types at the library's door, bounds that follow from memory and time,
values a rank will use, outputs. Each row calls the library (or the command line, in-process) and says
which words the refusal must hold; ``accepted`` rows say what a numpy number or a size at the bound
gives back instead. The memory the machine has is fixed at 8 GiB here, so the bounds do not depend on
the machine the suite runs on. No test here starts a process: SIGTERM to the distributed launcher
(one line, exit 143, no rank and no rank log left) is tests/cli/test_cli_signals.py's.
"""

from __future__ import annotations

import math
import os
import signal
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from course_lib import cli, reference
from course_lib.cli import main, report_errors
from course_lib.costs import StageCosts
from course_lib.data import check_microbatches
from course_lib.engines.distributed import make_spec, naming_a_missing_guard, naming_slow_links
from course_lib.engines.plan import make_plan
from course_lib.errors import CourseError
from course_lib.launch import DistributedError, spawn
from course_lib.lessons.runs import train_pipeline
from course_lib.links import Link
from course_lib.partition import Partition, uniform
from course_lib.planner import cluster, plan
from course_lib.planner.enumerate import check_request
from course_lib.reference import TrainConfig
from course_lib.schedules.builders import build_schedule
from course_lib.schedules.torch_csv import from_csv_text, read_csv
from course_lib.schedules.validate import validate
from course_lib.simulator import simulate, simulate_named

GiB = 2**30
TINY = dict(n_layers=2, d_model=16, n_heads=2, seq_len=16, batch_size=4, microbatches=2, steps=1)
TINY_FLAGS = ["--layers", "2", "--width", "16", "--heads", "2", "--seq-len", "16", "--batch-size", "4",
              "--microbatches", "2", "--steps", "1"]  # fmt: skip
S = build_schedule("1f1b", 2, 2)


@pytest.fixture(autouse=True)
def _machine_of_8_gib(monkeypatch):
    monkeypatch.setattr(reference, "memory_bytes", lambda: 8 * GiB)


def refused(call, words: list[str]) -> None:
    with pytest.raises(CourseError) as err:
        call()
    for w in words:
        assert w in str(err.value), str(err.value)


TYPES = {
    "build_schedule: text": (
        lambda: build_schedule("1f1b", "4", 8),
        ["n_devices must be a whole number", "'4' (str)"],
    ),
    "build_schedule: 10**5000 (too long to print)": (
        lambda: build_schedule("1f1b", 10**5000, 1),
        ["n_devices is an int of 16,610 bits, alone over the limit of 1,000,000 actions"],
    ),
    "build_schedule: bool": (lambda: build_schedule("1f1b", True, 8), ["n_devices", "True (bool)"]),
    "build_schedule: 2.5": (lambda: build_schedule("1f1b", 2, 2.5), ["n_microbatches", "got 2.5"]),
    "simulate: a name": (lambda: simulate("1f1b"), ["schedule must be a Schedule", "'1f1b' (str)"]),
    "simulate: costs a number": (
        lambda: simulate(S, 1.0),
        ["costs must be StageCosts(f=..., i=..., w=...) or None, got 1.0"],
    ),
    "simulate: cost text": (lambda: simulate(S, StageCosts(f="x")), ["StageCosts.f must be a finite number"]),
    "simulate: bytes text": (
        lambda: simulate(S, boundary_bytes="x"),
        ["boundary_bytes must be a finite number"],
    ),
    "simulate: links dict": (lambda: simulate(S, links={"a": 1}), ["links must be a Link", "(dict)"]),
    "simulate_named: costs": (lambda: simulate_named("1f1b", 2, 2, costs="x"), ["costs must be StageCosts"]),
    "Partition 1.5": (lambda: Partition.from_sizes([1.5, 2.5]), ["sizes (layers per stage)[0]", "got 1.5"]),
    "Partition text": (lambda: Partition.from_sizes("ab"), ["must be a list of whole numbers", "'ab' (str)"]),
    "uniform text": (lambda: uniform(10, "3"), ["number of stages must be a whole number", "'3' (str)"]),
    "TrainConfig text": (
        lambda: TrainConfig(n_layers="4").check(),
        ["n_layers must be a whole number, got '4'"],
    ),
    "TrainConfig lr": (lambda: TrainConfig(lr="x").check(), ["lr must be a number, got 'x' (str)"]),
    "train_pipeline stages": (
        lambda: train_pipeline("1f1b", "2", 2, steps=1, n_layers=2),
        ["stages must be a whole number"],
    ),
    "plan gpus text": (lambda: plan("megatron-1t", "a100-selene", "8", 8), ["gpus must be a whole number"]),
    "plan shape": (
        lambda: plan(42, "a100-selene", 8, 8),
        ["shape must be a model preset's name or a ModelShape"],
    ),
    "Link inf": (lambda: Link(latency_s=math.inf), ["link latency_s must be a finite number >= 0", "inf"]),
    "Link text": (lambda: Link(latency_s="1"), ["link latency_s", "'1' (str)"]),
}


@pytest.mark.parametrize("case", list(TYPES))
def test_types_at_the_librarys_door(case):
    call, words = TYPES[case]
    refused(call, words)


def test_the_dashboards_constructors_check_types_before_any_widget():
    from course_lib.widgets.dashboard import PipelineDashboard
    from course_lib.widgets.planner import PlannerWidget
    from course_lib.widgets.train_dashboard import TrainSettings

    refused(lambda: PipelineDashboard(p="4"), ["p must be a whole number >= 1, got '4' (str)"])
    refused(lambda: PipelineDashboard(costs=[1, 2]), ["costs must be StageCosts"])
    refused(lambda: PlannerWidget("megatron-1t", "a100-selene", gpus="8", global_batch=8), ["gpus must be"])
    refused(lambda: TrainSettings(steps="3").check(), ["steps must be a whole number, got '3' (str)"])


def test_numpy_numbers_are_the_same_numbers():
    assert build_schedule("1f1b", np.int64(4), np.int32(8)).orders == build_schedule("1f1b", 4, 8).orders
    assert simulate_named("1f1b", np.int64(2), np.int64(2)).makespan == simulate_named("1f1b", 2, 2).makespan
    assert Partition.from_sizes(np.array([2, 3])).sizes == (2, 3)
    assert uniform(np.int64(10), np.int64(3)).sizes == (4, 3, 3)
    cfg = TrainConfig(**TINY | dict(n_layers=np.int64(2), lr=np.float32(0.5)))
    assert type(cfg.n_layers) is int and type(cfg.lr) is float
    cfg.check()
    assert make_plan(cfg, "1f1b", np.int64(2), np.int64(1)).schedule.n_devices == 2
    assert Link(latency_s=np.float64(0.25)).latency_s == 0.25
    assert check_request(cluster("a100-selene"), np.int64(3072), np.int64(3072), ("1f1b",)) == (3072, 3072)


BOUNDS = {
    "seq-len 1e8 (position table and activations)": (
        lambda: TrainConfig(seq_len=10**8).check(),
        ["needs about", "8.0 GiB", "the largest that fits:", "seq_len"],
    ),
    "batch 1e9": (
        lambda: TrainConfig(batch_size=10**9, microbatches=1).check(),
        ["the largest that fits: batch_size 813, no seq_len"],
    ),
    "width 9000 (972 M parameters, 16 GB)": (
        lambda: TrainConfig(d_model=9000, n_heads=4, n_layers=1).check(),
        ["needs about 14.", "d_model"],
    ),
    "layers 50,000 (the CLI's limit)": (
        lambda: TrainConfig(n_layers=50_000).check(),
        ["over the limit of 1,000"],
    ),
    "GPipe m=1024 holds every micro-batch": (
        lambda: make_plan(TrainConfig(d_model=64, batch_size=4096, microbatches=1024), "gpipe", 4),
        ["gpipe holds up to 1024 micro-batches", "GiB"],
    ),
    "m not dividing a batch of 1e9": (
        lambda: check_microbatches(10**9, 3),
        ["choose m from [1, 2, 4, 5, 8,"],
    ),
    "plan 1e9 GPUs": (lambda: plan("megatron-1t", "a100-selene", 10**9, 3072), ["divides among none"]),
    "costs 1e308": (
        lambda: simulate(S, StageCosts(f=1e308)),
        ["StageCosts.f must be", "<= 1e+12, got 1e+308"],
    ),
    "latency 1e308": (lambda: simulate(S, links=Link(1e308)), ["link latency_s", "<= 1e+12"]),
    "3*p*m*v over the action limit": (
        lambda: build_schedule("1f1b", 333_334, 1),
        ["over the limit of 1,000,000"],
    ),
}


@pytest.mark.parametrize("case", list(BOUNDS))
def test_bounds_from_memory_and_time(case):
    call, words = BOUNDS[case]
    refused(call, words)


def test_what_the_bounds_accept_runs():
    TrainConfig(n_layers=1_000).check()  # the layer limit itself passes at the toy's width
    make_plan(TrainConfig(d_model=64, batch_size=4096, microbatches=1024), "1f1b", 4)  # 1F1B holds p, not m
    tl = simulate(S, StageCosts(f=1e12), links=Link(1e12))  # the largest seconds: numbers, not nan
    assert math.isfinite(tl.makespan) and 0 <= tl.bubble_fraction < 1
    validate(build_schedule("1f1b", 10_000, 1))  # quadratic in p, this took 115 s; O(A log p) now


RANK_VALUES = {
    "timeout 1e15": (lambda: make_spec(TrainConfig(**TINY), timeout_s=1e15), ["timeout_s", "<= 604800"]),
    "timeout inf": (lambda: make_spec(TrainConfig(**TINY), timeout_s=math.inf), ["timeout_s", "got inf"]),
    "spawn timeout inf": (lambda: spawn(print, 1, timeout_s=math.inf), ["timeout_s must be a finite number"]),
    "threads 1e9": (lambda: make_spec(TrainConfig(**TINY), threads=10**9), ["threads", "cores here"]),
    "latency over the timeout": (
        lambda: make_spec(TrainConfig(**TINY), links=Link(1e9), timeout_s=10),
        ["link latency 1e+09 s is not below the timeout of 10 s", "raise --timeout"],
    ),
}


@pytest.mark.parametrize("case", list(RANK_VALUES))
def test_values_a_rank_will_use_are_checked_in_the_parent(case):
    call, words = RANK_VALUES[case]
    refused(call, words)


@pytest.mark.parametrize(
    "argv, words",
    [
        (["train", *TINY_FLAGS, "--threads", "1000000000"], ["error: --threads", "cores here"]),
        (["train", "--engine", "distributed", *TINY_FLAGS, "--latency", "1e9", "--timeout", "10"],
         ["error: link latency 1e+09 s is not below the timeout of 10 s"]),
        (["train", "--engine", "distributed", *TINY_FLAGS, "--latency", "1e9"],
         ["is not below the timeout of 604800 s"]),  # the default timeout grows with latency, up to a week
    ],
)  # fmt: skip
def test_the_command_line_answers_rank_values_in_one_line(argv, words, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and all(w in err for w in words), err


class _FullDisk:
    def write(self, text: str) -> int:
        raise OSError(28, "No space left on device")

    def flush(self) -> None:
        raise OSError(28, "No space left on device")

    def fileno(self) -> int:
        raise ValueError("no file")


def test_outputs_a_full_disk_and_a_closed_stdout_are_one_line(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdout", _FullDisk())
    assert report_errors(lambda: print("result")) == 1
    monkeypatch.setattr(sys, "stdout", None)
    ran = []
    assert report_errors(lambda: ran.append(1)) == 2 and not ran  # refused before any work
    err = capsys.readouterr().err.splitlines()
    assert err == ["error: No space left on device while writing the output",
                   "error: standard output is closed; redirect it (> file, > /dev/null) instead"]  # fmt: skip


def test_outputs_sigterm_is_one_line_and_the_handler_is_given_back(capsys):
    before = signal.getsignal(signal.SIGTERM)

    def work() -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler interrupts this at once

    assert report_errors(work) == 143
    assert capsys.readouterr().err.strip() == "terminated (SIGTERM)"
    assert signal.getsignal(signal.SIGTERM) is before


def test_outputs_the_chart_path_is_tried_before_the_work(tmp_path, capsys):
    folder = tmp_path / "chart.png"
    folder.mkdir()
    sim = ["simulate", "--schedule", "1f1b", "--stages", "2", "--microbatches", "2"]
    with pytest.raises(SystemExit):
        main([*sim, "--gantt", str(folder)])
    assert f"cannot write {str(folder)!r}: it is a folder" in capsys.readouterr().err
    locked = tmp_path / "locked"  # a folder this user may not write into
    locked.mkdir(mode=0o500)
    if os.geteuid() == 0:  # root writes anywhere but into sysfs, which refuses new files to root too
        locked = Path("/sys")
    if not _writable(locked / "a.png"):
        with pytest.raises(SystemExit):
            main([*sim, "--gantt", str(locked / "a.png")])
        assert "Permission denied" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["chart.png", "locked"]  # nothing new


def _writable(path: Path) -> bool:
    try:
        path.open("xb").close()
    except PermissionError:
        return False
    path.unlink()
    return True


CSV = {
    "binary": (os.urandom(64) + b"\xff\x00", ["is not UTF-8 text"]),
    "UTF-16": ("0F0,0B0\r\n".encode("utf-16"), ["is UTF-16 text; save it as UTF-8"]),
    "NUL": (b"0F0,\x000B0\r\n", ["holds a NUL character"]),
    "a long cell": (b"0F0," + b"7" * 5000 + b"\r\n", ["a cell of 5,000 characters"]),
    "a huge cell": (b"0F0," + b"7" * 200_000 + b"\r\n", ["cannot be read as CSV"]),
}


@pytest.mark.parametrize("case", list(CSV))
def test_the_csv_reader_answers_what_is_no_schedule(case, tmp_path):
    data, words = CSV[case]
    path = tmp_path / "s.csv"
    path.write_bytes(data)
    refused(lambda: read_csv(path), words)
    refused(lambda: from_csv_text(data), words)


def test_the_csv_reader_takes_bytes_and_a_bom_and_refuses_other_types(tmp_path):
    assert from_csv_text(b"\xef\xbb\xbf0F0,0B0\r\n").orders == from_csv_text("0F0,0B0").orders
    refused(lambda: from_csv_text(42), ["must be a str (or UTF-8 bytes), got int"])
    refused(lambda: read_csv(tmp_path / "none.csv"), ["cannot read", "No such file"])
    refused(lambda: read_csv(tmp_path), ["cannot read"])


def test_schedule_from_csv_reads_validates_and_prints(tmp_path, capsys):
    good, bad = tmp_path / "good.csv", tmp_path / "dead.csv"
    good.write_text("0F0,0F1,0B0,0B1\r\n1F0,1F1,1B0,1B1\r\n")
    bad.write_text("0F0,0B0\r\n1B0,1F0\r\n")
    assert main(["schedule", "--from-csv", str(good)]) == 0
    assert "device 1: 1F0 1F1 1B0 1B1" in capsys.readouterr().out
    assert main(["schedule", "--from-csv", str(bad)]) == 2
    assert "deadlock: device 1 is stuck at 1B0" in capsys.readouterr().err
    assert main(["schedule", "--from-csv", str(good), "--stages", "2"]) == 2
    assert "--from-csv reads the sizes from the file; drop --stages" in capsys.readouterr().err


def test_a_timed_out_run_names_the_latency_that_made_it_slow():
    spec = make_spec(TrainConfig(**TINY), "1f1b", 3, links=Link(20.0), timeout_s=30)
    hung = DistributedError("rank 1 failed: it stopped answering", 1, "it stopped answering", {})
    named = naming_slow_links(hung, [spec], 30.0)
    assert str(named).startswith("rank 1 failed: it stopped answering; the links' latency of 20 s, paid by 4")
    assert "(80 s for one micro-batch), against the timeout of 30 s" in str(named)
    crashed = DistributedError("rank 0 failed: ValueError: x", 0, "ValueError: x", {})
    assert naming_slow_links(crashed, [spec], 30.0) is crashed  # not a timeout: nothing to add
    free = make_spec(TrainConfig(**TINY), "1f1b", 3, timeout_s=30)
    assert naming_slow_links(hung, [free], 30.0) is hung  # no latency: nothing to blame on it


def test_simulate_prints_at_most_64_device_rows(capsys):
    assert main(["simulate", "--schedule", "1f1b", "--stages", "70", "--microbatches", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    rows = [line for line in out if line.split() and line.split()[0].isdigit()]
    assert len(rows) == 64 and rows[-1].split()[0] == "69"  # the first 32 and the last 32
    assert "   ... 6 devices more: --json lists every one" in out


def test_ctrl_c_while_the_parser_imports_the_commands_is_one_line(monkeypatch, capsys):
    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_parser", interrupted)  # torch's import: the first second of a run
    assert main(["train"]) == 130
    assert capsys.readouterr().err.strip() == "interrupted"


def test_a_rank_that_died_unreported_under_a_script_names_the_missing_guard(monkeypatch):
    died = DistributedError("rank 0 failed: x", 0, "the process ended with exit code 1 without reporting", {})
    script = type(sys)("__main__")
    script.__file__, script.__spec__ = "/home/me/run.py", None  # `python /home/me/run.py`
    monkeypatch.setitem(sys.modules, "__main__", script)
    assert str(naming_a_missing_guard(died)).endswith(
        'if /home/me/run.py starts the run when imported, put its code under `if __name__ == "__main__":`, '
        "as every rank imports the script again"
    )
    script.__spec__ = "course_lib.__main__"  # `python -m ...`: multiprocessing does not re-run it
    assert naming_a_missing_guard(died) is died
