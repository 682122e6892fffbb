"""PyTorch CSV round trip and the ``schedule`` command."""

from __future__ import annotations

import pytest

from course_lib import cli
from course_lib.schedules.torch_csv import from_csv_text, read_csv, to_csv_text, write_csv
from course_lib.shelf.errors import CourseError
from course_lib.shelf.first_schedules import SCHEDULES, build_schedule
from course_lib.shelf.validate import check


def test_csv_text_is_pytorchs_format():
    # csv.writer's default dialect, as torch's _dump_csv: comma separated, "\r\n" line ends
    assert (
        to_csv_text(build_schedule("gpipe", 2, 3)) == "0F0,0F1,0F2,0B0,0B1,0B2\r\n1F0,1F1,1F2,1B0,1B1,1B2\r\n"
    )
    assert to_csv_text(build_schedule("zb-h1", 2, 1)) == "0F0,0I0,0W0\r\n1F0,1I0,1W0\r\n"


@pytest.mark.parametrize("name", list(SCHEDULES))
def test_round_trip_through_a_file(name, tmp_path):
    virtual = SCHEDULES[name].fixed_virtual or (3 if SCHEDULES[name].uses_virtual else 1)
    original = build_schedule(name, 4, 8, virtual)
    path = tmp_path / "schedule.csv"
    write_csv(original, path)
    assert path.read_bytes().count(b"\r\n") == 4
    back = read_csv(path)
    assert back.name == "schedule"
    assert back.orders == original.orders
    assert back.stage_to_device == original.stage_to_device
    assert (back.n_stages, back.n_microbatches, back.split_backward) == (
        original.n_stages,
        original.n_microbatches,
        original.split_backward,
    )
    assert check(back) == []


def test_reads_idle_cells_and_optionally_drops_non_compute_cells():
    text = "0F0,,0B0,0REDUCE_GRAD\r\n,1F0,1B0,1REDUCE_GRAD\r\n"
    with pytest.raises(CourseError, match=r"row 0, column 3: '0REDUCE_GRAD' is not a compute action"):
        from_csv_text(text)
    s = from_csv_text(text, ignore_non_compute=True)
    assert s.to_text() == "device 0: 0F0 0B0\ndevice 1: 1F0 1B0"
    assert check(s) == []


def test_sizes_can_be_given_so_extra_actions_show_up():
    s = from_csv_text("0F0,0F1,0B0,0B1\r\n", n_microbatches=1)
    assert "device 0 runs 0F1, but micro-batch 1 does not exist (m=1, so micro-batches are 0..0)" in check(s)


@pytest.mark.parametrize("text", ["0F0,0B999999999", "0F0,999999999B0", "0F0\n999999999F999999999"])
def test_a_mistyped_huge_index_is_refused_up_front(text):
    with pytest.raises(
        CourseError, match="beyond the 2,000,000 actions the validator checks: is a cell mistyped"
    ):
        from_csv_text(text)


def test_an_index_beyond_given_sizes_is_named_by_the_validator():
    s = from_csv_text("0F0,0B0,0B999999999\r\n", n_microbatches=1)
    problem = (
        "device 0 runs 0B999999999, but micro-batch 999999999 does not exist (m=1, so micro-batches are 0..0)"
    )
    assert problem in check(s)


def test_bad_cell_names_row_and_column():
    with pytest.raises(CourseError, match=r"row 1, column 2: cannot read action '1X0'"):
        from_csv_text("0F0,0B0\n1F0,1B0,1X0\n")
    with pytest.raises(CourseError, match="empty"):
        from_csv_text("")


def run_cli(monkeypatch, capsys, *argv: str) -> tuple[int, str, str]:
    # only this command, so the test does not depend on other commands' modules being present
    monkeypatch.setattr(cli, "COMMANDS", {"schedule": cli.COMMANDS["schedule"]})
    code = cli.main(["schedule", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_prints_text(monkeypatch, capsys):
    code, out, _ = run_cli(monkeypatch, capsys, "--schedule", "1F1B", "--stages", "2", "--microbatches", "3")
    assert code == 0
    assert out == (
        "# 1f1b: p=2 devices, m=3 micro-batches\n"
        "device 0: 0F0 0F1 0B0 0F2 0B1 0B2\n"
        "device 1: 1F0 1B0 1F1 1B1 1F2 1B2\n"
    )


def test_cli_interleaved_defaults_to_two_virtual_stages_and_writes_csv(monkeypatch, capsys):
    argv = ["--schedule", "Interleaved1F1B", "--stages", "2", "--microbatches", "4", "--format", "torch-csv"]
    code, out, _ = run_cli(monkeypatch, capsys, *argv)
    assert code == 0
    assert out == to_csv_text(build_schedule("interleaved-1f1b", 2, 4, virtual=2))


def test_cli_lists_schedules(monkeypatch, capsys):
    code, out, _ = run_cli(monkeypatch, capsys, "--list")
    assert code == 0
    assert "1f1b (PyTorch: Schedule1F1B)" in out and "zb-h1" in out
    for info in SCHEDULES.values():  # each schedule's closed forms and where they hold, from the registry
        assert f"    bubble: {info.bubble.text}, for {info.bubble.where}  [{info.bubble.source}]\n" in out
        assert f"    peak in flight: {info.peak.text}, for {info.peak.where}  [{info.peak.source}]\n" in out
        assert f"    paper: {info.paper}\n" in out
    assert "bubble: (p-1)/(v*m+p-1), for m >= p (or v = 1); equal stage costs, free links" in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (  # --stages 0 is argparse's to refuse (tests/cli/test_cli_values.py); this passes the flag's bound
            ("--schedule", "gpipe", "--stages", "1000000", "--microbatches", "4"),
            "3*p*m*v = 3*1000000*4*1 is 12,000,000, over the limit of 1,000,000 actions",
        ),
        (("--schedule", "nope", "--stages", "2", "--microbatches", "4"), "unknown schedule 'nope'"),
        (("--schedule", "interleaved", "--stages", "3", "--microbatches", "7"), "m=7"),
        (("--stages", "2", "--microbatches", "4"), "--schedule is required"),
    ],
)
def test_cli_errors_exit_2_with_a_message(monkeypatch, capsys, argv, message):
    code, out, err = run_cli(monkeypatch, capsys, *argv)
    assert code == 2 and out == ""
    assert err.startswith("error: ") and message in err
