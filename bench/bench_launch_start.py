"""What starting the ranks costs: wall and CPU of tiny 2-rank launches of the distributed engine, the
1st and the 2nd in one process (course_lib/shelf/launcher.py starts ranks from a forkserver that imports torch
once; the 1st launch pays for that server, later ones only fork it).

CPU is counted where it lands: the ranks the launcher reaped itself (spawn: RUSAGE_CHILDREN), and the
forkserver's own plus that of the ranks it reaped (read from /proc while it lives; Linux only).

Run::

    .venv/bin/python bench/bench_launch_start.py            # two launches
    .venv/bin/python bench/bench_launch_start.py --launches 4
"""

from __future__ import annotations

import argparse
import json
import multiprocessing.forkserver
import os
import resource
import time

from course_lib.shelf.distributed_engine import launch, make_spec
from course_lib.shelf.reference import TrainConfig

TINY = dict(n_layers=6, d_model=16, n_heads=2, seq_len=16, batch_size=8, steps=2)


def reaped_cpu_s() -> float:
    """User + system CPU of the children this process has reaped."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def forkserver_cpu_s() -> dict[str, float]:
    """The forkserver's own CPU and that of the ranks it reaped (empty: none runs)."""
    pid = getattr(multiprocessing.forkserver._forkserver, "_forkserver_pid", None)  # no public way
    if pid is None:
        return {}
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    tick = os.sysconf("SC_CLK_TCK")
    return {"forkserver_cpu_s": (int(fields[11]) + int(fields[12])) / tick,
            "ranks_under_forkserver_cpu_s": (int(fields[13]) + int(fields[14])) / tick}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--launches", type=int, default=2)
    args = parser.parse_args()
    spec = make_spec(TrainConfig(**TINY), "1f1b", 2)
    rows = []
    for _ in range(args.launches):
        cpu, start = reaped_cpu_s(), time.perf_counter()
        launch([spec])
        rows.append(
            {"wall_s": round(time.perf_counter() - start, 2), "reaped_cpu_s": round(reaped_cpu_s() - cpu, 2)}
        )
    print(json.dumps({"launches": rows, **forkserver_cpu_s()}, indent=1))


if __name__ == "__main__":
    main()
