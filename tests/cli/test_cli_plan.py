"""``python -m course_lib plan``: the JSON keys, the text table, the Gantt chart, readable errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from course_lib.cli import main
from course_lib.planner import plan

KEYS = {"t", "p", "d", "b", "schedule", "v", "step_s", "tflops_per_gpu", "mfu", "memory_per_gpu_bytes"}
SMALL = [
    "plan",
    "--model",
    "megatron-145b",
    "--cluster",
    "a100-selene",
    "--gpus",
    "64",
    "--global-batch",
    "64",
]


def test_json_has_best_and_the_ranked_layouts(capsys):
    assert main([*SMALL, "--top", "4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert KEYS <= set(out["best"]) and all(KEYS <= set(row) for row in out["layouts"])
    assert out["layouts"][0] == out["best"] and len(out["layouts"]) == 4
    steps = [row["step_s"] for row in out["layouts"]]
    assert steps == sorted(steps)
    library = plan("megatron-145b", "a100-selene", 64, 64).best  # the CLI reports the library's plan
    assert (out["best"]["t"], out["best"]["p"], out["best"]["d"]) == (library.t, library.p, library.d)
    assert out["best"]["step_s"] == pytest.approx(library.step_s)
    best = out["best"]
    assert best["t"] * best["p"] * best["d"] == 64
    assert best["memory_per_gpu_bytes"] <= 0.9 * 80 * 2**30


def test_seq_len_override_changes_the_plan(capsys):
    main([*SMALL, "--json"])
    base = json.loads(capsys.readouterr().out)
    main([*SMALL, "--seq-len", "1024", "--json"])
    short = json.loads(capsys.readouterr().out)
    assert short["seq_len"] == 1024 and base["seq_len"] == 2048
    assert short["best"]["step_s"] < base["best"]["step_s"]


def test_text_table_and_gantt(capsys, tmp_path):
    chart = tmp_path / "best.png"
    assert main([*SMALL, "--top", "3", "--gantt", str(chart)]) == 0
    text = capsys.readouterr().out
    assert "megatron-145b" in text and "TFLOP/s" in text and "simulated" in text
    head, first = text.splitlines()[1:3]  # memory in GiB, as everywhere in the course
    best = plan("megatron-145b", "a100-selene", 64, 64).best
    assert "memory GiB" in head and " GB " not in head and f"{best.memory_per_gpu_bytes / 2**30:.1f}" in first
    assert chart.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize(
    "change, words",
    [
        (("--model", "gpt-9"), "unknown model preset 'gpt-9'; choose one of: megatron-18b"),
        (("--cluster", "tpu-v5"), "unknown cluster preset 'tpu-v5'; choose one of: a100-selene"),
        (("--gpus", "12"), "gpus must be a multiple of 8"),
        (("--global-batch", "0"), "--global-batch: must be a whole number >= 1 and <= 1000000000, got '0'"),
    ],
)
def test_bad_input_exits_2_naming_the_value(change, words, capsys):
    argv = list(SMALL)
    argv[argv.index(change[0]) + 1] = change[1]
    try:
        code = main(argv)
    except SystemExit as stop:  # argparse refuses a bad number before the command runs
        code = stop.code
    assert code == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err


def test_the_module_entry_point_exits_2_without_a_traceback():
    argv = [*SMALL[:2], "gpt-9", *SMALL[3:]]
    done = subprocess.run([sys.executable, "-m", "course_lib", *argv], capture_output=True, text=True)
    assert done.returncode == 2
    assert "unknown model preset 'gpt-9'" in done.stderr and "Traceback" not in done.stderr


def test_a_batch_no_replica_count_divides_exits_2(capsys):
    argv = [
        "plan",
        "--model",
        "llama3-405b",
        "--cluster",
        "h100-llama3",
        "--gpus",
        "16384",
        "--global-batch",
        "3",
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "global batch 3 divides among none of the replica counts d" in err and "d in [2, 4," in err
