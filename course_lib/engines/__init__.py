"""Rooms beside the shelf's engines: the split backward of zero-bubble schedules (imported here, so that
it registers its stage runtime with the shelf), stale weights, torch interop, fault
injection, graph release while a rank idles, and the classic ``Pipe`` API."""

from course_lib.engines import split_backward  # noqa: F401  (registers SplitBackwardStage)
