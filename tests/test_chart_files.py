"""Issue 42: a chart is written whole or not at all, and drawing leaves no figure in pyplot's registry.

A full disk (Figure.savefig monkeypatched to write a few bytes, then raise ENOSPC, as a filling disk
does) leaves the old chart byte for byte and no temporary file; the command line says which file was
not saved, in one line. The plotting functions, under the file-only backend the suite (and a script)
runs with, build figures pyplot never holds, so 50 charts keep nothing alive; in a notebook they are
pyplot's, shown inline and closed by the inline backend (the lessons' nbval runs show them).
"""

from __future__ import annotations

import errno

import matplotlib
import matplotlib.pyplot as plt
import pytest
from matplotlib.figure import Figure

from course_lib.charts.bubble_and_memory import plot_bubble_vs_m, plot_memory
from course_lib.charts.gantt import plot_timeline, save_timeline_png
from course_lib.cli import main
from course_lib.shelf.simulator import simulate_named
from course_lib.widgets.pipeline_picture import pipeline_picture

TL = simulate_named("1f1b", 2, 4)


@pytest.fixture
def full_disk(monkeypatch):
    def savefig(self, file, *args, **kwargs):
        file.write(b"\x89PNG half")  # the disk fills up part way through
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", savefig)


def test_a_full_disk_leaves_the_old_chart_and_no_temporary_file(tmp_path, monkeypatch):
    path = tmp_path / "chart.png"
    save_timeline_png(TL, str(path))
    old = path.read_bytes()
    assert old.startswith(b"\x89PNG") and len(old) > 1000
    monkeypatch.setattr(Figure, "savefig", lambda self, file, *a, **k: (file.write(b"x"), _enospc()))
    with pytest.raises(OSError, match="No space left"):
        save_timeline_png(TL, str(path))
    assert path.read_bytes() == old
    assert [p.name for p in tmp_path.iterdir()] == ["chart.png"]


def _enospc():
    raise OSError(errno.ENOSPC, "No space left on device")


def test_the_command_line_names_the_chart_it_could_not_save(tmp_path, capsys, full_disk):
    path = tmp_path / "g.png"
    path.write_bytes(b"the old chart")
    code = main(
        ["simulate", "--schedule", "1f1b", "--stages", "2", "--microbatches", "4", "--gantt", str(path)]
    )
    err = capsys.readouterr().err
    assert code == 2 and f"the chart {str(path)!r} was not saved: No space left on device" in err, err
    assert len(err.strip().splitlines()) == 1 and path.read_bytes() == b"the old chart"
    assert [p.name for p in tmp_path.iterdir()] == ["g.png"]


def test_a_saved_chart_keeps_the_old_files_permissions(tmp_path):
    path = tmp_path / "chart.png"
    path.write_bytes(b"old")
    path.chmod(0o640)
    save_timeline_png(TL, str(path))
    assert path.stat().st_mode & 0o777 == 0o640 and path.read_bytes().startswith(b"\x89PNG")


DRAWINGS = {
    "plot_timeline": lambda: plot_timeline(TL),
    "plot_memory": lambda: plot_memory(TL),
    "plot_bubble_vs_m": lambda: plot_bubble_vs_m(ps=(2, 4), ms=range(1, 9)),
    "pipeline_picture": lambda: pipeline_picture(p=2),
}


@pytest.mark.parametrize("name", list(DRAWINGS))
def test_plotting_leaves_no_figure_in_pyplots_registry(name):
    assert matplotlib.get_backend().lower() == "agg"  # the suite's backend, and a script's without a display
    plt.close("all")
    for _ in range(3):
        drawn = DRAWINGS[name]()
        figure = drawn if isinstance(drawn, Figure) else drawn.figure
        assert figure.axes  # something was drawn, on a figure of its own
    assert plt.get_fignums() == []


def test_a_full_disk_leaves_the_old_csv(tmp_path, monkeypatch):
    """The schedule CSV (``schedule --csv``) is written whole too (course_lib/output_files.py, as the lab's
    files are): a write that fails leaves the old file and no temporary one."""
    from course_lib.schedules.torch_csv import write_csv
    from course_lib.shelf.first_schedules import build_schedule

    path = tmp_path / "order.csv"
    path.write_text("old csv")

    def no_space(*args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("course_lib.output_files.os.replace", no_space)
    with pytest.raises(OSError, match="No space left"):
        write_csv(build_schedule("1f1b", 2, 2), path)
    assert path.read_text() == "old csv" and [p.name for p in tmp_path.iterdir()] == ["order.csv"]
