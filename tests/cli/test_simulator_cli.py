"""``python -m course_lib simulate``: text and JSON output, Gantt PNG, readable errors."""

from __future__ import annotations

import json

import pytest

from course_lib.cli import main
from course_lib.shelf.first_schedules import SCHEDULES


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
    bubble = out["closed_forms"]["bubble"]
    assert (bubble["formula"], bubble["holds_here"], bubble["holds_for"]) == (
        "(p-1)/(m+p-1)",
        True,
        "any m; equal stage costs, free links",
    )
    assert bubble["value"] == pytest.approx(3 / 11)


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
    assert "uniform f=i=w=1 time unit" in text and "source: simulated" in text
    assert "bubble: 11.11%" in text and "formula (p-1)/(v*m+p-1) = 11.11%" in text


def simulate_text(capsys, *argv: str) -> str:
    assert main(["simulate", *argv]) == 0
    return capsys.readouterr().out


def test_the_formula_printed_is_the_schedules_own(capsys):
    """Fails before the CLI read the registry: it printed GPipe's (p-1)/(m+p-1) = 27.27% for naive."""
    text = simulate_text(capsys, "--schedule", "naive", "--stages", "4", "--microbatches", "8")
    assert "bubble: 75.00% of device-time idle (simulated); formula (p-1)/p = 75.00%\n" in text
    assert "peak in flight: 1 micro-batches on the busiest device; formula 1 = 1\n" in text
    text = simulate_text(capsys, "--schedule", "zb-h1", "--stages", "4", "--microbatches", "8")
    zb_h1 = "formula (p-1)(F+I-W) / [m(F+I+W) + (p-1)(F+I-W)] = 11.11%"  # 3 idle, 24 busy per device
    assert f"bubble: 11.11% of device-time idle (simulated); {zb_h1}\n" in text


def test_a_formula_outside_its_range_says_so_and_gives_no_number(capsys):
    """Fails before: interleaved at m < p printed 'formula ... = 42.86%' beside a simulated 55.56%."""
    argv = ["--schedule", "interleaved-1f1b", "--stages", "4", "--microbatches", "2", "--virtual", "2"]
    text = simulate_text(capsys, *argv)
    assert (
        "bubble: 55.56% of device-time idle (simulated); formula (p-1)/(v*m+p-1) does not apply here; "
        "it holds for m >= p (or v = 1); equal stage costs, free links\n"
    ) in text
    assert "42.86%" not in text
    out = json.loads(simulate_text(capsys, *argv, "--json"))
    assert out["bubble_fraction"] == pytest.approx(5 / 9)
    assert out["closed_forms"]["bubble"] == {
        "formula": "(p-1)/(v*m+p-1)",
        "holds_here": False,
        "value": None,
        "holds_for": "m >= p (or v = 1); equal stage costs, free links",
        "source": SCHEDULES["interleaved-1f1b"].bubble.source,
    }
    peak = out["closed_forms"]["peak_inflight"]
    assert peak["holds_here"] and peak["value"] == 4  # p=4, m=2, v=2: both micro-batches on both stages
    assert max(d["peak_inflight_microbatches"] for d in out["per_device"]) == 4
    # a slow link is outside every bubble formula's range too
    argv = ["--schedule", "1f1b", "--stages", "4", "--microbatches", "8", "--latency", "0.1"]
    assert "formula (p-1)/(m+p-1) does not apply here; it holds for any m; equal stage costs, free links" in (
        simulate_text(capsys, *argv)
    )


def test_gantt_file_written(tmp_path, capsys):
    png = tmp_path / "g.png"
    argv = ["simulate", "--schedule", "zb-h1", "--stages", "3", "--microbatches", "6", "--gantt", str(png)]
    assert main(argv) == 0
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert f"Gantt chart saved to {png}" in capsys.readouterr().out


def test_bad_input_is_a_message_not_a_traceback(capsys):
    argv = ["simulate", "--schedule", "interleaved", "--stages", "4", "--microbatches", "9"]
    assert main(argv) == 2
    assert "m=8 or m=10" in capsys.readouterr().err
    assert main(["simulate", "--schedule", "nope", "--stages", "2", "--microbatches", "2"]) == 2
    assert "unknown schedule 'nope'" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="2"):  # argparse refuses it, naming the flag
        main(["simulate", "--schedule", "1f1b", "--stages", "2", "--microbatches", "2", "--latency", "-1"])
    err = capsys.readouterr().err
    assert "argument --latency: must be a finite number >= 0 and <= 1e+12, got '-1'" in err
