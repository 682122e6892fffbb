"""The feedback students get: what failed and why, not the hidden tests or their answers.

nbgrader's ``generate_feedback`` turns each autograded notebook into HTML as it is: the test cells
with their hidden tests restored, and tracebacks that quote the failing line (often a hidden test's
line, with its expected value in it). One year's feedback would be next year's answer key. This
preprocessor runs last in ``GenerateFeedback.preprocessors`` (see notebooks/assignments/nbgrader_config.py):

- hidden-test regions are cut from every cell, as in the student version;
- an error in a graded test cell is shown as its teaching message only (``AssertionError: ...``),
  without the traceback and so without the code that raised it;
- an error elsewhere keeps its traceback (the student's own code), with the terminal colours removed;
- every line of text is wrapped at ``width`` characters, so nothing runs off the page.
"""

from __future__ import annotations

import re
import textwrap

from nbconvert.preprocessors import Preprocessor
from nbformat import from_dict
from traitlets import Bool, Int

HIDDEN = re.compile(r"^[ \t]*### BEGIN HIDDEN TESTS.*?^[ \t]*### END HIDDEN TESTS[^\n]*\n?", re.S | re.M)
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def without_hidden_tests(source: str) -> str:
    """`source` with every ``### BEGIN HIDDEN TESTS`` ... ``### END HIDDEN TESTS`` region removed."""
    return HIDDEN.sub("", source).rstrip("\n")


def wrapped(text: str, width: int = 100) -> str:
    """Every line of `text` no longer than `width` characters (continuations indented two spaces)."""
    lines = []
    for line in ANSI.sub("", text).splitlines():
        lines += textwrap.wrap(line, width, subsequent_indent="  ", break_long_words=True) or [""]
    return "\n".join(lines) + "\n"


def _is_test_cell(cell) -> bool:
    info = cell.get("metadata", {}).get("nbgrader", {})
    return bool(info.get("grade")) and not info.get("solution")


class StudentFeedback(Preprocessor):
    """Cut hidden tests and their tracebacks from the feedback; wrap long lines."""

    width = Int(100, help="wrap every output line at this many characters").tag(config=True)
    # nbconvert runs a preprocessor only when it is enabled; listing it in GenerateFeedback.preprocessors
    # is the instructor's choice to use it
    enabled = Bool(True).tag(config=True)

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "code":
            return cell, resources
        cell.source = without_hidden_tests(cell.source)
        outputs = []
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                text = f"{out['ename']}: {out['evalue']}"
                if not _is_test_cell(cell):
                    text = "\n".join(out.get("traceback", [])) or text
                out = {"output_type": "stream", "name": "stderr", "text": wrapped(text, self.width)}
            elif out.get("output_type") == "stream":
                out["text"] = wrapped(out["text"], self.width)
            elif out.get("output_type") == "display_data" and "text/plain" in out.get("data", {}):
                text = out["data"]["text/plain"]  # a partial credit's verdict line (course_grading.execute)
                text = "".join(text) if isinstance(text, list) else text
                out["data"]["text/plain"] = wrapped(text, self.width)
            outputs.append(out)
        cell.outputs = [from_dict(o) for o in outputs]
        return cell, resources
