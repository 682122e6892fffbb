"""Looped breadth-first pipeline (Lamy-Poirier 2022, "Breadth-First Pipeline Parallelism", arXiv 2211.05953).

Like interleaved 1F1B, the model is cut into p*v stages and stage s lives on device s % p ("loop"
placement). Unlike it, each device runs *breadth first*: every micro-batch through its first stage,
then every micro-batch through its second, and so on; then the backwards, last stage first and last
micro-batch first. It is GPipe on each loop of the pipe: the bubble is interleaved 1F1B's (divided by
v) where m >= p, and every device holds all v*m micro-batches' activations until its backwards start.
This is the order torch.distributed.pipelining's ScheduleLoopedBFS produces.

Try it::

    from course_lib.schedules.looped import looped_bfs
    print(looped_bfs(n_devices=2, n_microbatches=4, virtual=2))
"""

from __future__ import annotations

from course_lib.schedules.interleaved import loop_placement
from course_lib.shelf.first_schedules import check_sizes
from course_lib.shelf.schedule import Action, Kind, Schedule


def looped_bfs(n_devices: int, n_microbatches: int, virtual: int = 2) -> Schedule:
    """Looped BFS with `virtual` stages per device (p*v stages in all, stage s on device s % p); any m."""
    n_devices, n_microbatches, virtual = check_sizes(n_devices, n_microbatches, virtual)  # 0: refused
    p, m, v = n_devices, n_microbatches, virtual
    orders = []
    for d in range(p):
        stages = range(d, p * v, p)  # the device's stages, first to last
        forwards = [Action(s, Kind.F, mb) for s in stages for mb in range(m)]
        backwards = [Action(s, Kind.B, mb) for s in reversed(stages) for mb in reversed(range(m))]
        orders.append(forwards + backwards)
    return Schedule("looped-bfs", p * v, m, orders, loop_placement(p * v, p))
