"""course_grading: the instructor's side of the course, installed for instructors and CI, not for students.

It grades the assignments in notebooks/assignments with nbgrader (`make instructor`, the guide in
notebooks/assignments/README.md). What runs where:

- nbgrader's own process (the grader) reads the release's cells from the gradebook, runs the test cells
  and the hidden tests, and writes scores and feedback (``execute``, ``intake``, ``feedback``);
- each submission's code runs in sandboxes (``sandbox``: bubblewrap, no network, no course directory,
  bounded memory, processes and wall clock), started as ``worker``: one runs its cells; each graded
  function is called in one whose course_lib is a grading edition (``edition``: the answers that
  function may not use, named in ``switched_off``, are cut out), the cells replayed there first. Of this
  package a sandbox holds only ``worker``, ``plain`` (the only data that crosses back), ``names``,
  ``peer_ranks`` and what seals its reports and closes its run (``sealed_ranks``, ``rank_guard``,
  ``closed_server``).

A rank function the student writes (assignment a04c, after lesson 04c) is graded by ``rank_grading``: it
runs on real processes (``course_lib/lessons/own_rank.py``) on a hidden matrix of sizes, beside the
instructor's ranks (``peer_ranks``), which compare what arrives from it with 1F1B's messages. In nbgrader,
its source is cut from the student's cells and run in a fresh sandbox with its grading edition
(``execute.Editions.ranks``, the worker's "ranks" operation); the runs come back as plain data and the
checks (``course_assignments.rank_checks``) judge them here.

The student's side is elsewhere: the library (``course_lib``), and the checks released assignments import
with the kit that builds lab/ (``course_assignments``). Neither imports this package. A sandbox mounts
both, each as the assignment's grading edition (``edition``: an answer may be defined in either).
"""
