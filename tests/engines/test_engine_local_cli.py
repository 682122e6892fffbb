"""`python -m course_lib train --engine local|distributed ...`: pipeline keys in --json, bad input named."""

from __future__ import annotations

import json

import pytest

from course_lib.cli import main

SMALL = ["--layers", "2", "--width", "16", "--heads", "2", "--seq-len", "8", "--batch-size", "4"]


def test_local_engine_json_has_pipeline_keys_and_matches_the_reference(capsys, tmp_path):
    gantt = tmp_path / "g.png"
    flags = [*SMALL, "--steps", "2", "--microbatches", "2", "--json"]
    assert main(["train", *flags]) == 0
    reference = json.loads(capsys.readouterr().out)
    code = main(
        ["train", "--engine", "local", "--schedule", "zb-h1", "--stages", "2", "--check-reference",
         "--latency", "0.001", "--gantt", str(gantt), *flags]
    )  # fmt: skip
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["engine"] == "local" and out["schedule"] == "zb-h1"
    assert out["timeline_source"] == "measured compute + simulated links"
    assert 0 < out["bubble_fraction"] < 1
    assert out["max_grad_diff_vs_reference"] < 1e-6
    assert out["losses"] == pytest.approx(reference["losses"], rel=1e-5)
    assert gantt.stat().st_size > 1000


@pytest.mark.parametrize(
    "flags, words",
    [
        (["--engine", "local", "--stages", "5"], ["5 stages", "4 layers"]),
        (["--engine", "local", "--microbatches", "3"], ["3 micro-batches", "batch of 4"]),
        (["--engine", "local", "--schedule", "2f2b"], ["'2f2b'", "1f1b"]),
        (["--engine", "pipedream"], ["'pipedream'", "reference, local, distributed"]),
        (["--engine", "local", "--checkpoint", "maybe"], ["'maybe'", "except_last"]),
        (["--engine", "distributed", "--stages", "5"], ["5", "4 layers"]),
        (["--check-reference"], ["--check-reference", "--engine local"]),
    ],
)
def test_bad_pipeline_input_is_refused_naming_the_value(flags, words, capsys):
    assert main(["train", *SMALL, "--steps", "1", *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ")
    for w in words:
        assert w in err, err


@pytest.mark.processes
def test_distributed_check_reference_probes_in_the_same_launch(capsys):
    code = main(
        ["train", "--engine", "distributed", "--stages", "2", "--layers", "2", "--width", "16",
         "--heads", "2", "--seq-len", "16", "--batch-size", "4", "--microbatches", "2", "--steps", "2",
         "--check-reference", "--json"]
    )  # fmt: skip
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["timeline_source"] == "measured" and len(out["losses"]) == 2
    assert out["max_grad_diff_vs_reference"] < 1e-6
