"""Assignment a04c graded by the real ``nbgrader autograde``: a score and the verdict lines per submission.

Through nbgrader's API, the course's own nbgrader_config.py and a temp copy of the course directory (as
tests/support/autograde.py does), it generates a04c_write_the_pipeline, hands in the instructor's
solution, the untouched release, the hard-coded copy and one submission per common mistake
(tests/support/rank_submissions.py), autogrades each in the sandbox, and prints per submission: the score
out of 10, the autograde wall time and each failed test's verdict line as the feedback shows it.

Run (from the repository root)::

    PYTHONPATH=$PWD .venv/bin/python bench/bench_rank_assignment.py [--stall-s 10]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from support.assignments import grade_info, hard_coded_notebook  # noqa: E402
from support.course_copy import course_copy  # noqa: E402
from support.rank_submissions import MISTAKES, NAME, mistaken, submit  # noqa: E402


def verdicts(course: Path, student: str) -> list[str]:
    (notebook,) = (course / "autograded" / student / NAME).glob("*.ipynb")
    found = []
    for cell in json.loads(notebook.read_text())["cells"]:
        if grade_info(cell).get("grade"):
            for out in cell.get("outputs", []):
                text = out.get("evalue") or out.get("data", {}).get("text/plain") or ""
                text = "".join(text) if isinstance(text, list) else text
                if text and not text.replace(".", "").isdigit():
                    found.append(f"{grade_info(cell)['grade_id']}: {text}")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stall-s", type=float, default=10.0, help="SandboxedExecute.rank_stall_s")
    parser.add_argument("--cases", type=int, default=0, help="SandboxedExecute.rank_cases (0: all)")
    args = parser.parse_args()
    from nbgrader.api import Gradebook

    with tempfile.TemporaryDirectory() as tmp, course_copy(Path(tmp)) as (course, config, api):
        config.SandboxedExecute.rank_stall_s = args.stall_s
        config.SandboxedExecute.rank_cases = args.cases
        from nbgrader.apps import NbGraderAPI

        api = NbGraderAPI(config=config)
        assert api.generate_assignment(NAME, force=True)["success"]
        students = ["solution", "untouched", "hardcoded", *[k.replace(" ", "-") for k in MISTAKES]]
        import shutil

        shutil.copytree(course / "source" / NAME, course / "submitted" / "solution" / NAME)
        shutil.copytree(course / "release" / NAME, course / "submitted" / "untouched" / NAME)
        hard_coded_notebook(course / "release" / NAME, course / "submitted" / "hardcoded" / NAME)
        for kind in MISTAKES:
            submit(course, kind.replace(" ", "-"), mistaken(kind))
        rows = []
        for student in students:
            start = time.perf_counter()
            result = api.autograde(NAME, student, force=True, create=True)
            seconds = time.perf_counter() - start
            assert result["success"], result["log"]
            with Gradebook(config.CourseDirectory.db_url) as gb:
                score = gb.find_submission(NAME, student).score
            rows.append((student, score, seconds, verdicts(course, student)))
            print(f"{student}: {score:.2f} in {seconds:.1f} s", flush=True)
        print(f"stall limit {args.stall_s:g} s; hidden cases run: {args.cases or 'all'}")
        print("| submission | score /10 | autograde s | verdicts (first line of each failed test) |")
        print("|---|---|---|---|")
        for student, score, seconds, lines in rows:
            shown = "<br>".join(dict.fromkeys(line.splitlines()[0][:160] for line in lines)) or "-"
            print(f"| {student} | {score:.2f} | {seconds:.1f} | {shown} |")


if __name__ == "__main__":
    main()
