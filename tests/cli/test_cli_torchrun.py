"""The torchrun entry point: the same flags as `train`, checked before joining, and one rank run for real."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import pytest

from course_lib.cli import flags, torchrun, train_command
from course_lib.shelf import reference

TINY = ["--layers", "6", "--width", "16", "--heads", "2", "--seq-len", "16", "--batch-size", "8",
        "--microbatches", "4", "--steps", "2"]  # fmt: skip


@pytest.fixture
def one_rank(monkeypatch):
    """No torchrun variables: the entry point runs as the only rank, in this process."""
    for var in ("RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(var, raising=False)


def test_every_torchrun_flag_means_what_it_means_for_train():
    train_parser = argparse.ArgumentParser()
    train_command.train_arguments(train_parser)
    flags.state_bounds(train_parser)  # as build_parser does: each number flag's help states its bound
    same = {s: a for a in train_parser._actions for s in a.option_strings}
    for action in torchrun.torchrun_parser()._actions:
        if action.dest == "help":
            continue
        twin = same[action.option_strings[0]]
        assert (action.option_strings, action.dest, action.type, action.default, action.help) == (
            twin.option_strings, twin.dest, twin.type, twin.default, twin.help
        )  # fmt: skip


@pytest.mark.parametrize(
    "flags, words",
    [
        (["--stages", "3"], ["--stages 3 but torchrun started 1 ranks"]),
        (["--schedule", "2f2b"], ["'2f2b'"]),
    ],
)
def test_bad_flags_are_refused_before_joining(flags, words, one_rank, capsys):
    assert torchrun.torchrun_main([*TINY, *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ")
    for w in words:
        assert w in err, err


@pytest.mark.processes
@pytest.mark.timeout(120)
def test_one_rank_trains_like_the_reference(one_rank, capsys, tmp_path):
    gantt = tmp_path / "step.png"
    assert torchrun.torchrun_main([*TINY, "--threads", "1", "--json", "--gantt", str(gantt)]) == 0
    out = json.loads(capsys.readouterr().out)
    same = dict(n_layers=6, d_model=16, n_heads=2, seq_len=16, batch_size=8, microbatches=4, steps=2)
    cfg = reference.TrainConfig(**same)
    assert out["losses"] == pytest.approx(reference.train(cfg, progress=False).losses, rel=1e-5)
    assert out["pipeline_ranks"] == 1 and out["timeline_source"] == "measured"
    assert gantt.stat().st_size > 1000


@pytest.mark.processes
@pytest.mark.parametrize("module", ["course_lib.cli.torchrun", "course_lib.shelf.distributed_engine"])
def test_the_module_torchrun_runs_is_this_entry_point(module):
    # `torchrun ... -m <module>` runs that module as __main__ (the second is the old, still working path)
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")}
    proc = subprocess.run(
        [sys.executable, "-m", module, "--stages", "3"],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: --stages 3 but torchrun started 1 ranks")


def test_a_run_folder_gives_back_the_temp_folder_set_in_code(tmp_path, monkeypatch):
    """The run's own TMPDIR is the run's only: a tempdir set in code before it (the test suite's, in
    tests/conftest.py) is the temp folder again after it. It was reset to TMPDIR's, so a later failed
    run in the same process kept its ranks' log in /tmp."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with torchrun._run_folder() as folder:
        assert tempfile.gettempdir() == folder
    assert tempfile.gettempdir() == str(tmp_path) and not os.path.exists(folder)
