"""Issue 28, continued from tests/test_input_bounds.py: outputs (a full disk, a closed stdout,
SIGTERM, a chart path that cannot be written), CSV files that hold no schedule, and what a failed or
slow run names. Each case calls the library or the command line in-process; no test here starts a
process. The memory the machine has is fixed at 8 GiB, as in tests/test_input_bounds.py.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest
from support.inputs import TINY, machine_of_8_gib, refused

from course_lib import cli
from course_lib.cli import main, report_errors
from course_lib.engines.failure_hints import naming_a_missing_guard, naming_slow_links
from course_lib.schedules.torch_csv import from_csv_text, read_csv
from course_lib.shelf.costs import Link
from course_lib.shelf.distributed_engine import make_spec
from course_lib.shelf.launcher import DistributedError
from course_lib.shelf.reference import TrainConfig

_machine_of_8_gib = pytest.fixture(autouse=True)(machine_of_8_gib)


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
    refused(lambda: read_csv(tmp_path), ["is a folder, not a regular file"])


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


@pytest.mark.parametrize(
    "argv, where",
    [
        (["train", "--layers", "2", "--steps", "1"], "course_lib.cli.train_command.train"),
        (["train", "--engine", "local", "--layers", "2", "--steps", "1"],
         "course_lib.shelf.local_engine.LocalPipelineTrainer.train"),
        (["train", "--engine", "distributed", "--layers", "2", "--steps", "1"],
         "course_lib.shelf.distributed_engine.launch"),
        (["simulate", "--schedule", "1f1b", "--stages", "2", "--microbatches", "4"],
         "course_lib.cli.simulate_command.simulate_named"),
        (["plan", "--model", "megatron-39b", "--cluster", "a100-selene", "--gpus", "8",
          "--global-batch", "8"],
         "course_lib.cli.plan_command.plan"),
        (["schedule", "--schedule", "1f1b", "--stages", "2", "--microbatches", "4"],
         "course_lib.cli.schedule_command.build_schedule"),
        (["tp", "counts"], "course_lib.cli.tp_command._counts"),
    ],
)  # fmt: skip
def test_ctrl_c_in_each_command_is_one_line(argv, where, monkeypatch, capsys):
    """Issue 42: Ctrl-C while any command works is exit 130 and one line (the process tests send the
    real signal to the local and distributed engines: tests/cli/test_cli_signals.py)."""

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(where, interrupted)
    assert main(argv) == 130
    err = capsys.readouterr().err
    assert err.strip().splitlines() == ["interrupted"], err
