"""`python -m course_lib train`: JSON output, and bad input refused before any work, naming the value."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from course_lib.cli import main


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
        (["--layers", "0"], ["layers", "0", ">= 1"]),
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


def test_empty_data_file_is_refused(tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert main(["train", "--data", str(empty)]) == 2
    assert "holds 0 characters" in capsys.readouterr().err


def test_module_entry_point_runs():
    proc = subprocess.run(
        [sys.executable, "-m", "course_lib", "train", "--layers", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "layers must be >= 1" in proc.stderr
