"""nbgrader configuration for the course's assignments (see README.md in this folder).

nbgrader reads this file from the folder it runs in: run its commands here (this folder is the course
directory: source/, release/, submitted/, autograded/, feedback/ and gradebook.db live here; everything
except source/ is git-ignored).
"""

import os
import warnings

c = get_config()  # noqa: F821  (nbgrader provides get_config when it reads this file)

HERE = os.path.dirname(os.path.abspath(__file__))
c.CourseDirectory.course_id = "pipeline-parallelism"  # students pass it too: --course pipeline-parallelism
c.CourseDirectory.root = HERE
# nbgrader's exchange (release, fetch, submit, collect, feedback) inside the course directory, git-ignored:
# not the world-writable /usr/local/share/nbgrader/exchange it uses by default
c.Exchange.root = os.path.join(HERE, "exchange")
# zip_collect: files downloaded from an LMS go in downloaded/<assignment>/archive/ named
# <student id>__<notebook>.ipynb (the id: letters, digits, '-'; or zips of such files); nbgrader puts each in submitted/<student>/<assignment>/
c.FileNameCollectorPlugin.named_regexp = r".*/(?P<student_id>[A-Za-z0-9-]+)__(?P<file_id>[^/]+\.ipynb)$"
# Where the assignments are: source/<assignment>/<notebook>.ipynb
c.CourseDirectory.source_directory = "source"
# Training the 80-layer model in assignment 2 takes seconds; give slow laptops plenty of room per cell.
c.Execute.timeout = 600
# Same kernel the lessons use; a student's notebook says "python3".
c.Execute.kernel_name = "python3"

# A submission's nbgrader metadata is rebuilt from the gradebook before nbgrader reads it: a pasted copy of
# a test cell ("nbgrader": {}) or an edited schema no longer stops the whole class's run
# (course_grading/intake.py); a deleted test cell is put back, and scores what it scores.
c.Autograde.sanitize_preprocessors = [
    "course_grading.intake.Intake",
    "nbgrader.preprocessors.ClearOutput",
    "nbgrader.preprocessors.DeduplicateIds",
    "nbgrader.preprocessors.OverwriteKernelspec",
    "nbgrader.preprocessors.OverwriteCells",
    "nbgrader.preprocessors.CheckCellMetadata",
]
c.OverwriteCells.add_missing_cells = True
# A notebook nbgrader cannot read (not JSON) is kept as <name>.ipynb.unreadable and replaced by the release
# with a first cell saying why: it scores 0 with that reason, and the class's run goes on
c.Autograde.pre_convert_hook = "course_grading.intake.stand_in_for_unreadable"

# The student's code runs in a sandbox (bubblewrap: no network, no course directory or gradebook, bounded
# time, memory and processes); the test cells run in nbgrader's own process, where student code never
# runs, and receive only plain data from it (course_grading/execute.py; README.md, "What the sandbox
# protects"). Everything else is nbgrader's own autograde.
c.Autograde.autograde_preprocessors = [
    "course_grading.execute.SandboxedExecute",
    "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor",
    "nbgrader.preprocessors.LimitOutput",
    "nbgrader.preprocessors.SaveAutoGrades",
    "nbgrader.preprocessors.AssignLatePenalties",
    "nbgrader.preprocessors.CheckCellMetadata",
]
c.SandboxedExecute.timeout = 600  # seconds per cell or graded call: A2 and A7 train the 80-layer model
# wall-clock seconds for all of one submission's code (its cells and graded calls, in every sandbox): a
# `sleep` is not bounded by the CPU limit; past this the rest is not run and its feedback says why
c.SandboxedExecute.submission_s = 1800

# The feedback students get shows each failed test's teaching message, wrapped to the page, but not the
# hidden tests' code, their tracebacks or their expected values (course_grading/feedback.py).
c.GenerateFeedback.preprocessors = [
    "nbgrader.preprocessors.GetGrades",
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
    "course_grading.feedback.StudentFeedback",
]

# nbgrader 0.9's gradebook trips SQLAlchemy 2's "Object of type ... not in session" warning on every
# autograde; it is harmless (the rows are saved), so it is not printed.
warnings.filterwarnings("ignore", message="Object of type .* not in session")
