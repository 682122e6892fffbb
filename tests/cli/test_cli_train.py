"""`python -m course_lib train`: JSON output, bad input refused before any work, naming the value; no
flag silently ignored; the thread policy; and the dispatcher's handling of pipes and failed ranks."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from course_lib.cli import main, train_command
from course_lib.shelf.distributed_engine import DistributedError
from course_lib.shelf.model import DEFAULT_CORPUS

TINY = ["--layers", "2", "--width", "16", "--heads", "2", "--seq-len", "16", "--batch-size", "4",
        "--microbatches", "2", "--steps", "1"]  # fmt: skip


def test_json_output_has_the_promised_keys(capsys):
    code = main(
        ["train", "--layers", "2", "--width", "16", "--heads", "2", "--steps", "3", "--batch-size", "4",
         "--microbatches", "2", "--seq-len", "16", "--json"]
    )  # fmt: skip
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("losses", "val_loss_start", "val_loss_end", "step_time_s", "n_layers", "n_params"):
        assert key in out
    assert len(out["losses"]) == 3 and out["n_layers"] == 2 and out["step_time_s"] > 0


@pytest.mark.parametrize(
    "flags, words",
    [
        (["--microbatches", "3"], ["3 micro-batches", "16", "[1, 2, 4, 8, 16]"]),
        (["--width", "30", "--heads", "4"], ["30", "n_heads=4"]),
        (["--device", "tpu"], ["'tpu'", "cpu"]),
        (["--data", "/nonexistent/file.txt"], ["/nonexistent/file.txt", "does not exist"]),
    ],
)
def test_bad_input_is_refused_with_a_clear_message(flags, words, capsys):
    assert main(["train", "--steps", "1", *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ")
    for w in words:
        assert w in err


def test_a_latin1_data_file_is_one_line_not_a_traceback(tmp_path, capsys):
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("déjà vu\n".encode("latin-1") * 200)
    assert main(["train", *TINY, "--data", str(latin1)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: data file {str(latin1)!r} is not UTF-8 text (byte 1 is 0xe9); expected a UTF-8 text file "
        f"such as {str(DEFAULT_CORPUS)!r} (made by data/make_corpus.py)"
    ]


def test_empty_data_file_is_refused(tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert main(["train", "--data", str(empty)]) == 2
    assert "holds 0 characters" in capsys.readouterr().err


@pytest.mark.processes
def test_module_entry_point_runs():
    proc = subprocess.run(
        [sys.executable, "-m", "course_lib", "train", "--layers", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "argument --layers: must be a whole number >= 1" in proc.stderr


@pytest.mark.parametrize(
    "engine, flags, words",
    [
        ("reference", ["--stages", "2"], ["--engine reference does not use --stages", "local or"]),
        ("reference", ["--schedule", "nonsense"], ["--schedule (read by --engine local or distributed)"]),
        ("reference", ["--latency", "0.1", "--virtual", "2"], ["--virtual", "--latency"]),
        ("reference", ["--check-reference"], ["--check-reference"]),
        ("reference", ["--gantt", "step.png"], ["--gantt"]),
        ("local", ["--timeout", "5"], ["--engine local does not use --timeout", "--engine distributed"]),
    ],
)
def test_a_flag_the_engine_would_ignore_is_refused(engine, flags, words, capsys):
    assert main(["train", "--engine", engine, *TINY, *flags]) == 2
    err = capsys.readouterr().err
    for w in words:
        assert w in err, err


def test_every_engine_specific_flag_is_known_to_the_parser():
    # USED_BY names real flags: a typo there would let a flag through unchecked
    parser = argparse.ArgumentParser()
    train_command.train_arguments(parser)
    options = {s for action in parser._actions for s in action.option_strings}
    assert set(train_command.USED_BY) <= options


@pytest.fixture
def restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_training_runs_on_one_thread_unless_told(restore_threads, monkeypatch, capsys):
    threads_while_training = []

    def reference_trainer(cfg, progress):  # stands in for the real one: only the thread count matters
        threads_while_training.append(torch.get_num_threads())
        return SimpleNamespace(to_json=lambda: {"losses": []})

    monkeypatch.setattr(train_command, "train", reference_trainer)
    torch.set_num_threads(2)
    assert main(["train", *TINY, "--json"]) == 0
    assert main(["train", *TINY, "--threads", "3", "--json"]) == 0
    assert threads_while_training == [1, 3]  # the lessons' policy, whatever the process had before


@pytest.mark.parametrize("value", ["0", "-3"])
def test_threads_must_be_a_whole_number_of_at_least_one(value, capsys):
    with pytest.raises(SystemExit, match="2"):
        main(["train", *TINY, "--threads", value])
    assert f"argument --threads: must be a whole number >= 1, got '{value}'" in capsys.readouterr().err


def test_a_failed_rank_is_one_line_not_a_traceback(monkeypatch, capsys):
    def failing_run(*args):
        raise DistributedError("rank 1 failed: RuntimeError: boom", 1, "RuntimeError: boom", {})

    monkeypatch.setattr(train_command, "_run_distributed", failing_run)
    assert main(["train", "--engine", "distributed", "--stages", "2", *TINY]) == 1
    assert capsys.readouterr().err.strip().splitlines() == ["error: rank 1 failed: RuntimeError: boom"]


def test_other_exceptions_still_raise(monkeypatch):
    monkeypatch.setattr(train_command, "_run_local", lambda *args: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        main(["train", "--engine", "local", "--stages", "2", *TINY])


@pytest.mark.processes
def test_output_piped_into_head_ends_quietly():
    # about 200 kB of orders: more than the pipe holds, so the command is still writing when head exits
    head = subprocess.Popen(["head", "-1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    command = [sys.executable, "-m", "course_lib", "schedule", "--schedule", "gpipe", "--stages", "64",
               "--microbatches", "256"]  # fmt: skip
    cli = subprocess.Popen(command, stdout=head.stdin, stderr=subprocess.PIPE, text=True)
    head.stdin.close()  # the command now holds the pipe's only write end
    first_line = head.stdout.read()  # until head exits
    _, err = cli.communicate(timeout=120)
    head.wait(timeout=10)
    assert first_line == "# gpipe: p=64 devices, m=256 micro-batches\n"
    assert cli.returncode == 1
    assert err == ""  # no BrokenPipeError traceback, no "Exception ignored" at exit
