"""A submission's nbgrader metadata, rebuilt from the gradebook before nbgrader reads it.

nbgrader's own sanitising raises on a cell whose metadata it cannot read (a test cell copied and pasted
in JupyterLab keeps ``"nbgrader": {}``; an edited ``schema_version``), and that one exception ends the
whole ``autograde`` run: every student after that one stays ungraded. This preprocessor runs first in
``Autograde.sanitize_preprocessors`` (notebooks/assignments/nbgrader_config.py) and decides from the
gradebook alone:

- a cell whose ``grade_id`` is one of the release's, the first time it appears, gets the release's
  metadata back (grade, solution, locked, points, checksum), whatever the submission says;
- any other cell's nbgrader metadata (unknown id, a second copy, not even a dict) is removed: the cell
  is the student's own code, and a comment line at its top says so in the feedback.

Which cells are the instructor's, and their sources, is decided again from the gradebook when the
notebook runs (``course_grading.execute``); this step only keeps nbgrader from refusing the notebook.
"""

from __future__ import annotations

from nbformat import NotebookNode

try:
    from nbgrader.preprocessors import NbGraderPreprocessor
except ImportError:  # nbgrader is in the dev extra; without it nothing here is used
    NbGraderPreprocessor = object  # type: ignore[misc,assignment]

NOTE = "# (grader) this cell's nbgrader metadata was not the release's: it is graded as your own code\n"


def release_metadata(db_url: str, notebook: str, assignment: str) -> dict[str, dict]:
    """{grade_id: the nbgrader metadata the release gave that cell}, read from the gradebook."""
    from nbgrader.api import Gradebook

    with Gradebook(db_url) as gb:
        found = gb.find_notebook(notebook, assignment)
        points = {cell.name: cell.max_score for cell in found.grade_cells}
        answers = {cell.name for cell in found.solution_cells}
        tasks = {cell.name for cell in found.task_cells}
        metadata = {}
        for cell in found.source_cells:
            meta = {
                "grade": cell.name in points, "grade_id": cell.name, "locked": bool(cell.locked),
                "schema_version": 3, "solution": cell.name in answers, "task": cell.name in tasks,
            }  # fmt: skip
            if cell.name in points:
                meta["points"] = points[cell.name]
            if cell.checksum:
                meta["checksum"] = cell.checksum
            metadata[cell.name] = meta
        return metadata


class Intake(NbGraderPreprocessor):
    """Give known cells the release's nbgrader metadata and strip it from every other cell (see above)."""

    def preprocess(self, nb: NotebookNode, resources: dict) -> tuple[NotebookNode, dict]:
        info = resources["nbgrader"]
        release = release_metadata(info["db_url"], info["notebook"], info["assignment"])
        seen: set[str] = set()
        for cell in nb.cells:
            if "nbgrader" not in cell.get("metadata", {}):
                continue
            meta = cell.metadata["nbgrader"]
            grade_id = meta.get("grade_id") if isinstance(meta, dict) else None
            if isinstance(grade_id, str) and grade_id in release and grade_id not in seen:
                seen.add(grade_id)
                cell.metadata["nbgrader"] = NotebookNode(release[grade_id])
                continue
            del cell.metadata["nbgrader"]
            if cell.cell_type == "code" and not cell.source.startswith(NOTE):
                cell.source = NOTE + cell.source
        return nb, resources
