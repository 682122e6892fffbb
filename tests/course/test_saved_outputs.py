"""What a saved notebook holds where its widgets were (course_lib/widgets/stand_in.py): the committed
lessons hold no widget view, no widget state and no progress bar, only the dashboards' one-line
stand-ins; a notebook saved through the Jupyter server of this .venv is saved the same way.

The browser test (tests/browser/test_jupyterlab.py) reopens a saved lesson in JupyterLab itself."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from course_lib.widgets.stand_in import (
    SERVER_CONFIG,
    STAND_IN,
    WIDGET_VIEW,
    save_hook,
    stand_in_outputs,
    stand_in_text,
)

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))
# tqdm's text, notebook or terminal: "local gpipe:   0%|          | 0/3 [00:00<?, ?it/s]"
PROGRESS_BAR = re.compile(r"\d+%\|.*\|\s*\d+/\d+")


def outputs(nb: dict):
    for k, cell in enumerate(nb["cells"]):
        for output in cell.get("outputs", []):
            yield k, output


def text_of(output: dict) -> str:
    parts = [output.get("text", "")] + list(output.get("data", {}).values())
    return "".join("".join(p) if isinstance(p, list) else p for p in parts if isinstance(p, (str, list)))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_a_committed_lesson_holds_no_widget_view_no_widget_state_and_no_progress_bar(path):
    nb = json.loads(path.read_text())
    assert "widgets" not in nb["metadata"], f"{path.name} saves widget state"
    for k, output in outputs(nb):
        assert WIDGET_VIEW not in output.get("data", {}), f"{path.name}, cell {k}: a widget view"
        assert not PROGRESS_BAR.search(text_of(output)), f"{path.name}, cell {k}: a progress bar"


def test_the_lessons_dashboards_are_saved_as_their_stand_ins():
    found = [
        (path.stem, "".join(output["data"]["text/plain"]))
        for path in NOTEBOOKS
        for _, output in outputs(json.loads(path.read_text()))
        if STAND_IN.fullmatch("".join(output.get("data", {}).get("text/plain", "")))
    ]
    assert ("04_1f1b", stand_in_text("the pipeline dashboard")) in found
    assert len({stem for stem, _ in found}) >= 8  # 02-09 each show one


def widget_output(plain: str, kind: str = "display_data") -> dict:
    view = {"model_id": "0123abcd", "version_major": 2, "version_minor": 0}
    output = {"output_type": kind, "metadata": {}, "data": {WIDGET_VIEW: view, "text/plain": plain}}
    if kind == "execute_result":
        output["execution_count"] = 3
    return output


def notebook_with_widgets() -> dict:
    printed = {"output_type": "stream", "name": "stdout", "text": "bubble 27.3%\n"}
    cells = [
        {"cell_type": "code", "id": "c0", "source": "run()", "metadata": {}, "execution_count": 2,
         "outputs": [widget_output("local gpipe:   0%|          | 0/3 [00:00<?, ?it/s]"), printed]},
        {"cell_type": "code", "id": "c1", "source": "dash", "metadata": {}, "execution_count": 3,
         "outputs": [widget_output(stand_in_text("the pipeline dashboard"), "execute_result")]},
        {"cell_type": "markdown", "id": "c2", "source": "text", "metadata": {}},
    ]  # fmt: skip
    state = {"application/vnd.jupyter.widget-state+json": {"state": {}, "version_major": 2}}
    return {"cells": cells, "metadata": {"widgets": state}, "nbformat": 4, "nbformat_minor": 5}


def test_stand_in_outputs_keeps_the_dashboards_line_drops_the_progress_bar_and_the_state():
    nb = notebook_with_widgets()
    assert stand_in_outputs(nb) == 3
    first, second = nb["cells"][0]["outputs"], nb["cells"][1]["outputs"]
    assert first == [{"output_type": "stream", "name": "stdout", "text": "bubble 27.3%\n"}]
    assert second[0]["data"] == {"text/plain": "[the pipeline dashboard: run this cell to use it]"}
    assert second[0]["execution_count"] == 3 and "widgets" not in nb["metadata"]
    assert stand_in_outputs(nb) == 0  # nothing left to change


def test_this_venvs_jupyter_server_saves_a_notebook_with_stand_ins(tmp_path):
    """The contents manager JupyterLab saves through, configured as `make setup` configures it."""
    from jupyter_server.services.contents.filemanager import FileContentsManager
    from traitlets.config import Config

    manager = FileContentsManager(root_dir=str(tmp_path), config=Config(SERVER_CONFIG))
    assert manager.pre_save_hook is save_hook
    manager.save({"type": "notebook", "format": "json", "content": notebook_with_widgets()}, "lesson.ipynb")
    saved = (tmp_path / "lesson.ipynb").read_text()
    assert WIDGET_VIEW not in saved and "0/3" not in saved and "widget-state" not in saved
    assert stand_in_text("the pipeline dashboard") in saved and "bubble 27.3%" in saved
    config = ROOT / ".venv" / "etc" / "jupyter" / "jupyter_server_config.json"
    if config.exists():  # written by `make setup`
        assert json.loads(config.read_text()) == SERVER_CONFIG
