"""The committed outputs of a lesson's cells, for tests that check what the notebook shows.

A sentence in a lesson that rests on an output must agree with it; these helpers read the output as it
is committed (no kernel, no re-execution), by cell id::

    from support.committed import output_text
    text = output_text("06_pipelines_across_wans", "x7cross1")   # stdout, plain text and Markdown
"""

from __future__ import annotations

import json

from support.paths import REPO_ROOT

NOTEBOOKS = REPO_ROOT / "notebooks"


def cell(notebook: str, cell_id: str) -> dict:
    """The cell with `cell_id` in notebooks/<notebook>.ipynb (a clear error if there is none)."""
    cells = json.loads((NOTEBOOKS / f"{notebook}.ipynb").read_text())["cells"]
    found = [c for c in cells if c.get("id") == cell_id]
    assert len(found) == 1, f"{notebook}: expected one cell with id {cell_id!r}, found {len(found)}"
    return found[0]


def source(notebook: str, cell_id: str) -> str:
    return "".join(cell(notebook, cell_id)["source"])


def output_text(notebook: str, cell_id: str) -> str:
    """Everything the committed cell printed or displayed as text, joined in order."""
    parts = []
    for out in cell(notebook, cell_id).get("outputs", []):
        if "text" in out:
            parts.append("".join(out["text"]))
        data = out.get("data", {})
        for kind in ("text/markdown", "text/plain"):
            if kind in data:
                parts.append("".join(data[kind]))
                break
    return "".join(parts)
