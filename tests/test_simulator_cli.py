"""``python -m course_lib simulate``: text and JSON output, Gantt PNG, readable errors."""

from __future__ import annotations

import json

import pytest

from course_lib.cli import main


def test_json_has_the_promised_fields(capsys):
    assert main(["simulate", "--schedule", "1f1b", "--stages", "4", "--microbatches", "8", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["source"] == "simulated"
    assert out["makespan"] == pytest.approx(33.0)
    assert out["bubble_fraction"] == pytest.approx(3 / 11)
    assert [d["peak_inflight_microbatches"] for d in out["per_device"]] == [4, 3, 2, 1]
    assert all({"busy", "idle"} <= set(d) for d in out["per_device"])
    assert out["link"]["bandwidth_Bps"] is None  # unlimited
    assert out["costs"]["default_uniform_time_unit"] is True


def test_latency_and_aliases(capsys):
    argv = ["simulate", "--schedule", "GPipe", "--stages", "3", "--microbatches", "2", "--json"]
    assert main(argv + ["--latency", "0.5"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["schedule"] == "gpipe"
    assert out["makespan"] == pytest.approx(4 * 3.0 + 2 * 2 * 0.5)


def test_text_output_says_costs_source_and_formula(capsys):
    argv = ["simulate", "--schedule", "Interleaved1F1B", "--stages", "2", "--microbatches", "4"]
    assert main(argv + ["--virtual", "2"]) == 0
    text = capsys.readouterr().out
    assert "uniform f=b=w=1 time unit" in text and "source: simulated" in text
    assert "bubble: 11.11%" in text and "formula (p-1)/(v*m+p-1) = 11.11%" in text


def test_gantt_file_written(tmp_path, capsys):
    png = tmp_path / "g.png"
    argv = ["simulate", "--schedule", "zb-h1", "--stages", "3", "--microbatches", "6", "--gantt", str(png)]
    assert main(argv) == 0
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert f"Gantt chart: {png}" in capsys.readouterr().out


def test_bad_input_is_a_message_not_a_traceback(capsys):
    argv = ["simulate", "--schedule", "interleaved", "--stages", "4", "--microbatches", "9"]
    assert main(argv) == 2
    assert "m=8 or m=10" in capsys.readouterr().err
    assert main(["simulate", "--schedule", "nope", "--stages", "2", "--microbatches", "2"]) == 2
    assert "unknown schedule 'nope'" in capsys.readouterr().err
    assert (
        main(["simulate", "--schedule", "1f1b", "--stages", "2", "--microbatches", "2", "--latency", "-1"])
        == 2
    )
    assert "latency must be >= 0" in capsys.readouterr().err
