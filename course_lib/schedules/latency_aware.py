"""Latency-aware 1F1B: keep enough micro-batches in flight that slow links never starve a stage.

Plain 1F1B lets device d run p - 1 - d forwards before its first backward, so it holds p - d
micro-batches. That is exactly enough when links are free. With a link latency L, each micro-batch
needs a longer round trip, and with the same number in flight the pipe runs dry (Little's law:
throughput = micro-batches in flight / round-trip time). For equal stage costs t_f, t_b and the same
L on every link, the simulator reproduces, exactly,

    step(L) = (m + p - 1)(t_f + t_b) + 2L [ (p - 1) + floor((m - 1)(p - 1) / p) ]     (plain 1F1B)

so every bit of latency shows up in the step time: none of it is hidden. Hiding it takes about
ceil(2L / (t_f + t_b)) more micro-batches in flight per link downstream of a device (the round trip
of a link, counted in micro-batch slots), each costing one stage's stashed activations. This
builder is 1F1B (``one_f_one_b``) with a deeper warm-up: device d runs sum over links l >= d of
(1 + extra_l) forwards before its first backward; with that, each device's idle time stays within
the flush bound

    (p - 1)(t_f + t_b) + 2 * sum(L)

that no 1F1B-family schedule (one stage per device, fused backward) beats. Interleaving divides the
first part by v and zero-bubble schedules shrink it; the 2 * sum(L) of the last micro-batch's round
trip is what no synchronous schedule avoids.

Try it::

    from course_lib.schedules.latency_aware import latency_aware_1f1b, extra_in_flight
    k = extra_in_flight(latency_s=0.03, t_f=0.01, t_b=0.02)     # 2 more per link
    print(latency_aware_1f1b(4, 8, extra_per_link=k))
    build_schedule("latency-aware-1f1b", 4, 8)                  # registered with one extra per link
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from course_lib.schedules.closed_forms import LinkLike
from course_lib.shelf.errors import require
from course_lib.shelf.first_schedules import check_sizes, one_f_one_b
from course_lib.shelf.schedule import Schedule


def extra_in_flight(latency_s: float | LinkLike, t_f: float, t_b: float, nbytes: float = 0) -> int:
    """More micro-batches a device must keep in flight to hide one link: ceil(2L / (t_f + t_b)).

    `latency_s` may be a Link, whose one-way time for `nbytes` (latency + bytes/bandwidth) is used.
    `t_f`, `t_b`: forward and full-backward time of one micro-batch on a stage."""
    one_way = float(latency_s) if isinstance(latency_s, (int, float)) else latency_s.transfer_time(nbytes)
    require(one_way >= 0, f"link latency must be >= 0 seconds, got {one_way!r}")
    require(t_f + t_b > 0, f"t_f + t_b must be > 0 (compute per micro-batch), got {t_f} + {t_b}")
    return math.ceil(2 * one_way / (t_f + t_b) - 1e-12)  # the epsilon: 2L exactly k slots needs k


def _per_link(extra: int | Sequence[int], n_links: int) -> list[int]:
    values = [extra] * n_links if isinstance(extra, int) else list(extra)
    require(
        len(values) == n_links,
        f"extra_per_link has {len(values)} entries but {n_links + 1} devices have {n_links} links; "
        "give one number per link (device d -> d+1), or one for all",
    )
    bad = [v for v in values if not (isinstance(v, int) and v >= 0)]
    require(not bad, f"extra micro-batches per link must be whole numbers >= 0, got {bad[0] if bad else 0!r}")
    return values


def warmup_forwards(n_devices: int, extra_per_link: int | Sequence[int] = 0) -> list[int]:
    """Forwards device d runs before its first backward: sum over links l >= d of (1 + extra_l).
    With no extra this is plain 1F1B's p - 1 - d."""
    extra = _per_link(extra_per_link, n_devices - 1)
    return [sum(1 + extra[link] for link in range(d, n_devices - 1)) for d in range(n_devices)]


def latency_aware_1f1b(
    n_devices: int, n_microbatches: int, extra_per_link: int | Sequence[int] = 1
) -> Schedule:
    """1F1B whose warm-up is deepened by `extra_per_link` micro-batches for every link below a device
    (one number for all links, or one per link d -> d+1). extra_per_link=0 is plain 1F1B."""
    check_sizes(n_devices, n_microbatches)  # before counting links: p - 1 of them
    deeper = one_f_one_b(n_devices, n_microbatches, warmup=warmup_forwards(n_devices, extra_per_link))
    return replace(deeper, name="latency-aware-1f1b")


def plain_1f1b_step(n_devices: int, n_microbatches: int, t_f: float, t_b: float, latency_s: float) -> float:
    """Plain 1F1B's step time with equal stage costs and the same latency on every link (the formula
    in this module's docstring; the simulator agrees to rounding error)."""
    p, m = n_devices, n_microbatches
    return (m + p - 1) * (t_f + t_b) + 2 * latency_s * ((p - 1) + ((m - 1) * (p - 1)) // p)


def flush_bound(n_devices: int, t_f: float, t_b: float, latencies_s: Sequence[float]) -> float:
    """Idle time per device that no 1F1B-family schedule avoids: (p - 1)(t_f + t_b) + 2 sum(L)."""
    return (n_devices - 1) * (t_f + t_b) + 2 * sum(latencies_s)


def extra_activation_bytes(
    n_devices: int, extra_per_link: int | Sequence[int], stash_bytes: Sequence[int], n_microbatches: int
) -> list[int]:
    """Bytes of activations each device holds *beyond* plain 1F1B (more micro-batches in flight,
    each stashing `stash_bytes[d]`), capped where m runs out."""
    plain = warmup_forwards(n_devices, 0)
    deeper = warmup_forwards(n_devices, extra_per_link)
    m = n_microbatches
    return [(min(deeper[d] + 1, m) - min(plain[d] + 1, m)) * int(stash_bytes[d]) for d in range(n_devices)]
