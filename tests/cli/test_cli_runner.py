"""`train --engine distributed --runner torch|torch-csv` (and the torchrun entry point): the same run on
torch.distributed.pipelining from the command line. Flags torch's runners would not read, and what torch
cannot run, are refused as one line before any process starts; the result says which runner ran and
that torch records no per-action timeline; one real run trains like our engine and the reference."""

from __future__ import annotations

import json

import pytest

from course_lib.cli import main, torchrun
from course_lib.shelf import distributed_engine as distributed
from course_lib.shelf.reference import TrainConfig, train
from course_lib.shelf.run_spec import DistributedResult

pytest.importorskip("torch.distributed.pipelining", reason="torch without distributed pipelining")

TINY = ["--layers", "2", "--width", "16", "--heads", "2", "--seq-len", "16", "--batch-size", "4",
        "--microbatches", "2", "--steps", "2"]  # fmt: skip
TORCH = ["train", "--engine", "distributed", "--stages", "2", *TINY, "--runner"]  # the runner follows


def forbidden(*args, **kwargs):
    raise AssertionError("a process started although the command was refused")


@pytest.fixture
def no_processes(monkeypatch):
    """Any spawn of ranks, by the train command or under torchrun, fails the test."""
    monkeypatch.setattr(distributed, "launch", forbidden)
    monkeypatch.setattr(distributed, "spawn", forbidden)
    monkeypatch.setattr(torchrun, "run_this_rank", forbidden)
    for var in ("RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(var, raising=False)


def one_error_line(code: int, capsys) -> str:
    """The command's one `error:` line (exit 2, as every refused flag), nothing on stdout."""
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    return err


@pytest.mark.parametrize(
    "argv, words",
    [
        (["train", "--engine", "local", *TINY, "--runner", "torch"],
         ["--engine local does not use --runner (read by --engine distributed)"]),
        (["train", *TINY, "--runner", "distributed"], ["--engine reference does not use --runner"]),
        ([*TORCH, "torch", "--gantt", "{tmp}/step.png"],
         ["--runner torch (torch.distributed.pipelining) does not use --gantt (torch records no per-action "
          "timeline: no chart, no bubble figure)", "only --runner distributed"]),
        ([*TORCH, "torch-csv", "--latency", "0.01", "--bandwidth", "1e9"],
         ["--runner torch-csv", "--latency (no injected links); --bandwidth (no injected links)"]),
        ([*TORCH, "torch", "--tp", "2", "--dp", "2"], ["--tp (no tensor parallelism); --dp (no data"]),
        ([*TORCH, "torch", "--checkpoint", "always"], ["--checkpoint (no activation checkpointing)"]),
        ([*TORCH, "torch", "--check-reference"], ["--check-reference (it returns no gradients to compare)"]),
        # make_spec's own refusals, as one line
        ([*TORCH, "torch", "--schedule", "zb-h1"],
         ["no class for schedule 'zb-h1'", "gpipe, 1f1b, interleaved-1f1b", "(--runner torch-csv)"]),
        ([*TORCH, "torch", "--stages", "4"], ["Schedule1F1B needs m >= p", "m=2, p=4"]),
        ([*TORCH, "torch-csv", "--schedule", "bogus"], ["unknown schedule 'bogus'"]),
    ],
)  # fmt: skip
def test_what_the_runner_would_not_read_or_run_is_one_line_before_any_process(
    argv, words, tmp_path, no_processes, capsys
):
    err = one_error_line(main([a.format(tmp=tmp_path) for a in argv]), capsys)
    for w in words:
        assert w in err, err
    assert not (tmp_path / "step.png").exists()


def test_torchrun_refuses_the_same_flags_before_joining(tmp_path, no_processes, capsys):
    code = torchrun.torchrun_main([*TINY, "--runner", "torch", "--gantt", str(tmp_path / "s.png")])
    err = one_error_line(code, capsys)
    assert "--runner torch (torch.distributed.pipelining) does not use --gantt (torch records no" in err


def test_an_unknown_runner_is_refused_by_argparse_naming_the_allowed_ones(no_processes, capsys):
    with pytest.raises(SystemExit) as stop:
        main([*TORCH, "jax"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "argument --runner: invalid choice: 'jax'" in err, err
    assert all(name in err.splitlines()[-1] for name in ("distributed", "torch", "torch-csv"))


def torch_result(runner: str = "torch") -> DistributedResult:
    """What torch's Schedule1F1B (or its CSV runtime) hands back for 2 ranks and 2 steps: step times,
    losses, no timelines."""
    return DistributedResult(
        schedule="1f1b", ranks=2, losses=[3.7, 3.6], rank_step_times_s=[[0.5, 0.02], [0.4, 0.03]],
        timelines=[], peak_saved_bytes=[[0, 0], [0, 0]], n_params=8128, runner=runner,
    )  # fmt: skip


def test_the_summary_and_json_say_which_runner_ran_and_that_torch_has_no_timeline(monkeypatch, capsys):
    specs = []
    monkeypatch.setattr(distributed, "launch", lambda s, progress: specs.extend(s) or [torch_result()])
    assert main([*TORCH, "torch", "--schedule", "1f1b"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [(s.runner, s.runner_name) for s in specs] == [("torch", "Schedule1F1B")]  # what would have run
    assert "training loss 3.700 -> 3.600 (first and last batch)" in lines
    assert "median step 30 ms (measured)" in lines  # the second step's slowest rank (the first warms up)
    assert (
        "runner torch: torch.distributed.pipelining's Schedule1F1B ran the schedule; torch records no "
        "per-action timeline, so there is no bubble figure (step times and losses only)"
    ) in lines
    assert not [line for line in lines if "of the step" in line]  # no bubble figure
    assert main([*TORCH, "torch", "--schedule", "1f1b", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["engine"], out["runner"], out["torch_class"]) == ("distributed", "torch", "Schedule1F1B")
    assert (out["bubble_fraction"], out["timeline_source"], out["losses"]) == (None, None, [3.7, 3.6])
    assert out["step_times_s"] == [0.5, 0.03] and out["step_time_s"] == 0.03


def test_torchrun_says_the_same(monkeypatch, capsys):
    monkeypatch.setattr(torchrun, "run_this_rank", lambda spec, rank, world: torch_result(spec.runner))
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert torchrun.torchrun_main([*TINY, "--runner", "torch", "--schedule", "1f1b"]) == 0
    first, runner = capsys.readouterr().out.splitlines()
    assert first.endswith("median step 30.0 ms") and runner.startswith("runner torch: torch.distributed.")
    assert torchrun.torchrun_main([*TINY, "--runner", "torch-csv", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["engine"], out["runner"], out["torch_class"]) == ("distributed", "torch-csv",
                                                                   "_PipelineScheduleRuntime")  # fmt: skip


@pytest.mark.processes
@pytest.mark.timeout(240)
def test_a_torch_run_trains_like_our_engine_and_the_reference(monkeypatch, capsys):
    # our engine's run of the same spec goes into the same spawn of 2 ranks (spawning is the slow part)
    real_launch, ours = distributed.launch, []

    def with_ours(specs, progress=False, stop=None):
        mine = distributed.make_spec(specs[0].cfg, specs[0].schedule, threads=specs[0].threads)
        theirs, result = real_launch([*specs, mine], progress, stop)
        ours.append(result)
        return [theirs]

    monkeypatch.setattr(distributed, "launch", with_ours)
    assert main([*TORCH, "torch", "--schedule", "1f1b", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    (mine,) = ours
    assert (out["runner"], out["torch_class"], mine.runner) == ("torch", "Schedule1F1B", "distributed")
    cfg = TrainConfig(n_layers=2, d_model=16, n_heads=2, seq_len=16, batch_size=4, microbatches=2, steps=2)
    reference = train(cfg, progress=False)  # TINY's run
    assert len(out["losses"]) == 2 and out["losses"][1] < out["losses"][0]  # it trains
    assert out["losses"] == pytest.approx(mine.losses, rel=1e-5)
    assert out["losses"] == pytest.approx(reference.losses, rel=1e-5)
    assert out["n_params"] == reference.n_params and out["bubble_fraction"] is None
    assert len(out["rank_step_times_s"]) == 2 and mine.timelines  # ours measured a timeline; torch none

