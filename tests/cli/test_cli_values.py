"""Issue 18, values, outputs and bounds: every command reads its numbers through one converter
(flags.number_type), checks an output path before any work, prints its result before the chart and as strict
JSON, and refuses sizes that could not finish, naming the limit (builders.LIMITS)."""

from __future__ import annotations

import argparse
import json
import math

import pytest
import torch

from course_lib import cli
from course_lib.charts import gantt
from course_lib.cli import flags, main, simulate_command, torchrun, train_command
from course_lib.shelf.errors import CourseError
from course_lib.shelf.first_schedules import LIMITS, check_sizes

SIM = ["simulate", "--schedule", "1f1b", "--stages", "2", "--microbatches", "2"]
TINY = ["--layers", "2", "--width", "16", "--heads", "2", "--seq-len", "16", "--batch-size", "4",
        "--microbatches", "2", "--steps", "1"]  # fmt: skip


def refused(argv: list[str], capsys) -> str:
    """argparse's refusal (exit 2, before any work); returns what it printed on stderr."""
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    return capsys.readouterr().err


def forbidden(*args, **kwargs):
    raise AssertionError("work started although a flag was bad")


@pytest.mark.parametrize(
    "argv, words",
    [
        (["train", "--lr", "inf"], ["argument --lr: must be a finite number > 0 and <= 1000, got 'inf'"]),
        (["train", "--lr", "nan"], ["argument --lr", "got 'nan'"]),
        (["train", "--engine", "local", "--latency", "inf"], ["argument --latency", "<= 1e+12, got 'inf'"]),
        ([*SIM, "--latency", "inf"], ["argument --latency: must be a finite number >= 0 and <= 1e+12"]),
        ([*SIM, "--time-f", "nan"], ["argument --time-f", "got 'nan'"]),
        ([*SIM, "--boundary-bytes", "-1"], ["argument --boundary-bytes: must be a whole number >= 0"]),
        (["train", "--seed", str(2**70)], ["argument --seed", "<= 9223372036854775807", str(2**70)]),
        (["train", "--seed", "-1"], ["argument --seed: must be a whole number >= 0"]),
        (["train", "--steps", "1.5"], ["argument --steps: must be a whole number >= 0", "got '1.5'"]),
        (["tp", "sweep", "--microbatches", "0"], ["argument --microbatches: must be a whole number >= 1"]),
        (["train", "--layers", "100000000"], ["argument --layers", "<= 1000, got '100000000'"]),
        (["tp", "counts", "--layers", "100000000"], ["argument --layers", "<= 1000, got '100000000'"]),
        (["train", "--engine", "distributed", "--timeout", "inf"], ["argument --timeout", "got 'inf'"]),
    ],
)
def test_a_bad_number_is_refused_naming_the_flag_the_value_and_the_range(argv, words, capsys, monkeypatch):
    monkeypatch.setattr(train_command, "train", forbidden)
    err = refused(argv, capsys)
    for w in words:
        assert w in err, err


@pytest.mark.parametrize(
    "argv",
    [
        [*SIM, "--bandwidth", "0"],
        [*SIM, "--bandwidth", "inf"],
        ["train", "--engine", "local", "--bandwidth", "0"],
        ["train", "--engine", "distributed", "--bandwidth", "0"],
    ],
)
def test_bandwidth_zero_means_the_same_everywhere(argv, capsys):
    assert "must be a finite number > 0, got" in (err := refused(argv, capsys))
    assert "omit --bandwidth for unlimited" in err


def test_every_number_flag_of_every_command_reads_through_the_converter():
    # the class at its root: a plain int or float parser would let inf, nan or a negative through.
    # `schedule` leaves its sizes to check_sizes (tests/cli/test_schedules_csv_cli.py pins that message)
    commands = cli.build_parser()._subparsers._group_actions[0].choices
    parsers = [sub for name, sub in commands.items() if name != "schedule"] + [torchrun.torchrun_parser()]
    plain = [a.option_strings for parser in parsers for a in parser._actions if a.type in (int, float)]
    assert plain == []
    numbers = [a for parser in parsers for a in parser._actions if a.type is not None]
    assert {a.type.__qualname__ for a in numbers} == {"number_type.<locals>.convert", "figure_path"}


def test_the_converter_accepts_its_bounds_and_refuses_beyond_them():
    seed = flags.SEED
    assert seed("0") == 0 and seed(str(2**63 - 1)) == 2**63 - 1
    assert flags.SECONDS("0") == 0.0 and flags.BANDWIDTH("1e9") == 1e9
    bad = ((seed, str(2**63)), (flags.COUNT, "1e3"), (flags.SECONDS, "-inf"), (flags.COUNT, ""))
    for convert, text in bad:
        with pytest.raises(argparse.ArgumentTypeError, match=f"got {text!r}"):
            convert(text)


@pytest.mark.parametrize("path", ["/nonexistent/x.png", "{tmp}", "{tmp}/chart.foo", "{tmp}/chart"])
def test_an_output_path_is_checked_before_any_work(path, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(train_command, "_run_local", forbidden)
    monkeypatch.setattr(simulate_command, "_simulate", forbidden)
    path = path.format(tmp=tmp_path)
    for argv in (["train", "--engine", "local", *TINY], SIM):
        err = refused([*argv, "--gantt", path], capsys)
        assert f"argument --gantt: cannot write {path!r}: want an existing folder and a name" in err, err
        assert "*.png" in err and "*.pdf" in err


@pytest.mark.parametrize("argv", [[*SIM, "--json"], SIM, ["train", "--engine", "local", *TINY, "--json"]])
def test_the_result_comes_before_the_chart_so_a_failed_save_loses_none(argv, tmp_path, monkeypatch, capsys):
    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(gantt, "save_timeline_png", disk_full)  # flags.save_chart imports it when called
    assert main([*argv, "--gantt", str(tmp_path / "chart.png")]) == 2
    out, err = capsys.readouterr()
    assert json.loads(out) if "--json" in argv else "makespan: " in out  # the whole result came out
    assert err.splitlines()[-1].endswith("was not saved: No space left on device"), err  # and one line


def test_json_is_strict_nan_and_infinity_become_null(capsys):
    flags.print_json({"loss": math.nan, "times": [math.inf, -math.inf, 1.5], "nested": {"x": (math.nan,)}})
    assert capsys.readouterr().out == '{"loss": null, "times": [null, null, 1.5], "nested": {"x": [null]}}\n'


def test_a_diverging_run_prints_valid_json(capsys, monkeypatch):
    # a run whose weights become NaN after its first step: its loss becomes NaN, which JSON cannot hold.
    # (A huge learning rate is not enough everywhere: lr 1000 reaches NaN within four steps on some CPUs'
    # kernels and only grows the loss to ~1e6 on others.)
    real_step = torch.optim.AdamW.step

    def step_then_poison(self, *args, **kwargs):
        out = real_step(self, *args, **kwargs)
        with torch.no_grad():
            self.param_groups[0]["params"][0].fill_(math.nan)
        return out

    monkeypatch.setattr(torch.optim.AdamW, "step", step_then_poison)
    assert main(["train", *TINY[:-2], "--steps", "4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out, parse_constant=lambda word: pytest.fail(f"{word} in the JSON"))
    assert out["losses"][0] > 0 and out["losses"][-1] is None and out["val_loss_end"] is None


@pytest.mark.parametrize(
    "sizes, product",
    [(["--stages", "1000000", "--microbatches", "1"], "3*1000000*1*1 is 3,000,000"),
     (["--stages", "4", "--microbatches", "1000000"], "3*4*1000000*1 is 12,000,000"),
     (["--stages", "4", "--microbatches", "8", "--virtual", "1000000"], "3*4*8*1000000")],
)  # fmt: skip
def test_a_schedule_too_large_to_simulate_is_refused_naming_the_limit(sizes, product, capsys):
    schedule = "interleaved-1f1b" if "--virtual" in sizes else "1f1b"
    assert main(["simulate", "--schedule", schedule, *sizes]) == 2
    err = capsys.readouterr().err
    assert f"3*p*m*v = {product}" in err and "over the limit of 1,000,000 actions" in err


def test_check_sizes_takes_up_to_the_limit_and_no_more():
    most = LIMITS["actions"] // 3
    check_sizes(1, most)  # exactly at the limit: accepted (nothing is built here)
    with pytest.raises(CourseError, match="course_lib.shelf.errors.LIMITS"):
        check_sizes(1, most + 1)


def test_the_timeout_default_suits_the_runs_size():
    parser = argparse.ArgumentParser()
    train_command.train_arguments(parser)
    timeout = lambda *argv: flags.PipelineFlags.from_args(parser.parse_args(argv)).timeout  # noqa: E731
    assert timeout() == 60.0  # the default run: a pessimistic step is far below the start-up floor
    assert timeout("--layers", "1000") == pytest.approx(10 * 1000 * 4 * 5e-3)  # 10 pessimistic steps
    assert timeout("--layers", "1000", "--width", "64") == pytest.approx(4 * 200)  # 4x the work a block
    assert timeout("--layers", "1000", "--timeout", "5") == 5.0  # the flag wins
    assert "default: 10 x a pessimistic step" in " ".join(parser.format_help().split())
