"""pytest (nbval) collects only the instructor's source notebooks here.

nbgrader writes student versions, submissions and graded copies next to source/ when an instructor
runs it in this folder; those are not lessons and must not run as tests (a student version fails by
design until it is answered).
"""

collect_ignore_glob = [
    "release/*", "submitted/*", "autograded/*", "feedback/*", "exchange/*", "downloaded/*", "nbgrader_config.py",
]
