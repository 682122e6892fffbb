"""The simulator's inputs, checked at its door: the types a lesson may pass, one sentence for any other.

``simulate`` calls :func:`check_inputs` first thing, so a string for a schedule, a list of strings for
the message sizes or a dict for the links is named there, never met as a TypeError in the event loop.
Numbers may be Python's or numpy's; the costs' and latencies' ranges are StageCosts' and Link's own.
"""

from __future__ import annotations

from collections.abc import Sequence

from course_lib.shelf.checks import real, shown
from course_lib.shelf.costs import StageCosts
from course_lib.shelf.errors import CourseError, require
from course_lib.shelf.links import Link
from course_lib.shelf.schedule import Schedule

# What a device does after handing a message over. "overlapped": it moves on at once (isend; the
# default, and every lesson's figure unless it says otherwise). "blocking": it waits until the last
# byte has arrived (a blocking send, as Megatron-LM's p2p calls wait on their requests). A batched send
# (batch_isend_irecv: the send waited on together with the next receive, as Megatron Core's batch_p2p_comm
# and torch's Schedule1F1B do) gives "blocking"'s numbers here: messages travel on their own, so waiting
# for both ends when the later one is in, as waiting for one and then the other does. Not a third value.
SENDS = ("overlapped", "blocking")


def check_inputs(
    schedule: object, costs: object, boundary_bytes: object, links: object, stash: object
) -> None:
    """Refuse, naming the argument, anything ``simulate`` cannot read (before any work)."""
    # the messages are built only for a refusal: a Schedule's repr lists every action (milliseconds)
    if not isinstance(schedule, Schedule):
        example = "such as build_schedule('1f1b', 4, 8)"
        raise CourseError(f"schedule must be a Schedule ({example}), got {shown(schedule)}")
    check_costs(costs, boundary_bytes, links, stash)


def check_costs(costs: object, boundary_bytes: object, links: object = None, stash: object = None) -> None:
    """The costs, message sizes and links of a simulation (a dashboard's too), checked for their types."""
    if not (costs is None or isinstance(costs, StageCosts)):
        raise CourseError(f"costs must be StageCosts(f=..., i=..., w=...) or None, got {shown(costs)}")
    for name, value in (("boundary_bytes", boundary_bytes), ("stash_bytes", stash)):
        for i, x in enumerate(value if _is_list(value) else [] if value is None else [value]):
            real(f"{name}[{i}]" if _is_list(value) else name, x)
    for link in links if _is_list(links) else [] if links is None else [links]:
        if not isinstance(link, Link):
            raise CourseError(f"links must be a Link or a list of them, got {shown(link)}")


def _is_list(value: object) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, str)


def check_sends(sends: object) -> None:
    """Refuse a `sends` that is not one of SENDS, naming it and what is allowed (before any work)."""
    require(
        isinstance(sends, str) and sends in SENDS,
        f"sends must be one of {', '.join(repr(x) for x in SENDS)}, got {sends!r}",
    )
