"""More schedules than the shelf's three, their closed forms, and PyTorch interop (lessons 07-10).

Importing this package registers every schedule it holds in the shelf's registry (``catalog.py``), so
``build_schedule("zb-v", 4, 8)`` knows the name once ``course_lib.schedules`` (or any module in it) is
imported; the CLI, the lesson glue and the notebooks do.
"""

from course_lib.schedules import catalog  # noqa: F401  (registers the schedules: the import is the point)
