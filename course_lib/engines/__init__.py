"""Rooms beside the shelf's engines: the split backward of zero-bubble schedules and the injected links
of real runs (both imported here, so that they register with the shelf), stale weights, torch interop,
fault injection, graph release while a rank idles, and the classic ``Pipe`` API."""

from course_lib.engines import injected_links, split_backward  # noqa: F401  (they register with the shelf)
