"""The stand-in a saved notebook shows where a live widget was: one line, never a widget error.

JupyterLab draws an output that holds ``application/vnd.jupyter.widget-view+json`` with the widget
manager, whatever else the output holds. Once the kernel that made the widget is gone (the notebook
saved and reopened; JupyterLab saves no widget state by default) the manager cannot find the widget's
model and draws "Error displaying widget: model not found" instead. So a saved notebook holds no widget
view (``stand_in_outputs``):

- an output whose plain text is a lesson widget's stand-in, "[the pipeline dashboard: run this cell to
  use it]" (``stand_in_text``, what ``controls.Shown`` widgets say), keeps only that text;
- any other widget output goes: tqdm's progress bars, whose plain text is the bar as it started ("0/3"
  under a finished run), and a student's own widgets, which could only show the error;
- the notebook's saved widget state goes too (it would draw stale, dead copies of the widgets).

It applies in two places:

- the student's JupyterLab saves every notebook through ``save_hook``, the Jupyter server's
  ``pre_save_hook``; `make setup` configures it for this .venv (``SERVER_CONFIG``), so `make lab`,
  `make instructor` and the browser tests' JupyterLab use it. The live page keeps its widgets; only
  the file holds stand-ins;
- the committed lessons, after an author re-runs one:
      python -m course_lib.widgets.stand_in notebooks/04_1f1b.ipynb
  (tests/course/test_saved_outputs.py checks that no committed notebook holds a widget view, widget
  state or a progress bar).

This module imports no widget library: the Jupyter server imports it to save.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from course_lib.output_files import write_whole

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "widgets"  # notebook metadata key ipywidgets saves its state under
STAND_IN = re.compile(r"\[[^\[\]\n]+: run this cell to use it\]")
# what `make setup` writes as .venv/etc/jupyter/jupyter_server_config.json (the Makefile's SAVE_HOOK; the
# server reads traitlets settings from that file, not from jupyter_server_config.d/)
SERVER_CONFIG = {"ContentsManager": {"pre_save_hook": "course_lib.widgets.stand_in.save_hook"}}


def stand_in_text(what: str) -> str:
    """The line a saved notebook shows for the widget `what` ("the pipeline dashboard")."""
    return f"[{what}: run this cell to use it]"


def _plain(output: dict) -> str:
    text = output.get("data", {}).get("text/plain", "")
    return "".join(text) if isinstance(text, list) else text


def stand_in_outputs(notebook: dict) -> int:
    """Replace, in place, every widget view in `notebook` (an nbformat 4 dict) by its stand-in, or drop
    it (above); drop the saved widget state. Returns how many outputs changed or went."""
    changed = 0
    for cell in notebook.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        kept = []
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if WIDGET_VIEW not in data:
                kept.append(output)
                continue
            changed += 1
            if STAND_IN.fullmatch(_plain(output).strip()):
                output["data"] = {"text/plain": _plain(output).strip()}
                kept.append(output)
        cell["outputs"] = kept
    metadata = notebook.get("metadata", {})
    if WIDGET_STATE in metadata:
        del metadata[WIDGET_STATE]
        changed += 1
    return changed


def save_hook(model: dict, **_: object) -> None:
    """The Jupyter server's pre_save_hook: a notebook is saved with stand-ins (``stand_in_outputs``)."""
    if model.get("type") == "notebook" and isinstance(model.get("content"), dict):
        stand_in_outputs(model["content"])


def _main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    args = parser.parse_args(argv)
    for path in args.notebooks:
        notebook = json.loads(path.read_text())
        if n := stand_in_outputs(notebook):
            # nbformat's own layout (indent 1, keys sorted), so the diff is only what changed
            text = json.dumps(notebook, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
            write_whole(path, lambda file, text=text: file.write(text.encode()))
        print(f"{path}: {n} widget output(s) replaced or dropped")
    return 0


if __name__ == "__main__":
    sys.exit(_main())
