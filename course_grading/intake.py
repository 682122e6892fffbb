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

A notebook nbgrader cannot read at all (not JSON) is handled one step earlier, by the pre-convert hook
``stand_in_for_unreadable`` at the end of this file: it scores 0 with a reason, and the run goes on.
"""

from __future__ import annotations

from pathlib import Path

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


# A notebook nbgrader cannot read (not JSON, not a notebook, cut off by a failed upload) raises inside its
# converter: that student gets no score at all, and the run ends in an error. Before nbgrader reads it
# (``Autograde.pre_convert_hook``), such a file is kept beside itself and replaced by the release, with a
# first cell that says why: the student scores 0 with a reason, and the class's run goes on.
READ_LIMIT = 50 * 1024 * 1024  # bytes; a larger "notebook" is refused unread
KEPT = ".unreadable"  # the student's file, kept as <notebook>.ipynb.unreadable (nbgrader ignores it)


def unreadable_reason(path: Path) -> str | None:
    """Why nbgrader could not read the notebook at `path`, in one line; None when it can."""
    import nbformat

    try:
        if not path.is_file():  # a FIFO would block the read, and the whole class's run with it
            return "it is not a regular file"
        size = path.stat().st_size
        if size > READ_LIMIT:
            return f"it is {size:,} bytes, over the grader's limit of {READ_LIMIT:,}"
        nbformat.read(str(path), as_version=4)
    except Exception as err:  # any failure to read is the reason: JSON, encoding, nbformat's own
        return f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else 'unreadable'}"
    return None


def stand_in_for_unreadable(assignment: str, student: str, notebooks: list[str]) -> None:
    """nbgrader's pre-convert hook: each submitted notebook that cannot be read is moved to
    ``<name>.ipynb.unreadable`` and replaced by the release's version (or, without a release, an empty
    notebook: nbgrader puts the test cells back), whose first cell says what could not be read and why.
    The arguments are nbgrader's patterns (``class-*``); the paths are the submission's own."""
    import nbformat

    for name in notebooks:
        path = Path(name)
        reason = unreadable_reason(path)
        if reason is None:
            continue
        path.replace(path.with_name(path.name + KEPT))
        assignment_dir = path.parent  # <course>/submitted/<student>/<assignment>/<notebook>.ipynb
        release = assignment_dir.parents[1].parent / "release" / assignment_dir.name / path.name
        nb = nbformat.read(str(release), as_version=4) if release.is_file() else nbformat.v4.new_notebook()
        note = (
            f"**(grader) Your notebook `{path.name}` could not be read, so none of your work in it was"
            f" graded** ({reason}). The untouched assignment was graded in its place: it scores 0. Your file"
            f" is kept for your instructor as `{path.name}{KEPT}`; check it opens in JupyterLab, and hand it"
            " in again."
        )
        nb.cells.insert(0, nbformat.v4.new_markdown_cell(note))
        nbformat.write(nb, str(path))
