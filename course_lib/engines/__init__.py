"""Rooms beside the shelf's engines: the split backward of zero-bubble schedules, the injected links,
paced ops and the whole model's gradient rules of real runs, the memory check of every run and the hints
of a failed one (imported here, so that they register with the shelf), stale weights, torch interop,
fault injection, graph release while a rank idles, and the classic ``Pipe`` API."""

from course_lib.engines import (  # noqa: F401  (they register with the shelf)
    failure_hints,
    injected_links,
    memory_fit,
    paced_ops,
    split_backward,
    whole_model,
)
