"""Issue 28: the largest size each entry point accepts, and how long it takes there.

Each row runs one command in-process (its output thrown away) at the largest size its bounds accept,
and prints wall-clock and CPU seconds. Target: under 10 s each on 2 cores. The sizes:

1. ``schedule`` 1F1B at p=333,333, m=1: 999,999 = 3pm actions, just under LIMITS["actions"]
   (build and validate; the validator was quadratic in p before, minutes here);
2. ``simulate`` the same (build and simulate; the validator runs only on a schedule it rejects);
3. ``plan`` megatron-1t on 10**9 GPUs with a batch of 10**9 (divisors in sqrt(n) steps);
4. ``schedule --from-csv`` of the 666,666 actions written by 1 (the CSV reader and the validator).

Run::

    .venv/bin/python bench/bench_bounds.py
"""

from __future__ import annotations

import contextlib
import io
import tempfile
import time
from pathlib import Path

from course_lib.cli import main

BIG = ["--schedule", "1f1b", "--stages", "333333", "--microbatches", "1"]


def timed(argv: list[str]) -> tuple[float, float, int]:
    """(wall s, CPU s, exit code) of ``python -m course_lib *argv``, its stdout discarded."""
    wall, cpu = time.perf_counter(), time.process_time()
    with contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    return time.perf_counter() - wall, time.process_time() - cpu, code


def main_bench() -> None:
    with tempfile.TemporaryDirectory() as folder:
        csv = Path(folder) / "big.csv"
        with open(csv, "w") as file, contextlib.redirect_stdout(file):
            main(["schedule", *BIG, "--format", "torch-csv"])
        rows = {
            "schedule p=333,333 m=1": ["schedule", *BIG],
            "simulate p=333,333 m=1": ["simulate", *BIG],
            "plan 10**9 GPUs, batch 10**9": ["plan", "--model", "megatron-1t", "--cluster", "a100-selene",
                                             "--gpus", str(10**9), "--global-batch", str(10**9)],  # fmt: skip
            "schedule --from-csv 666,666 actions": ["schedule", "--from-csv", str(csv)],
        }
        for name, argv in rows.items():
            wall, cpu, code = timed(argv)
            print(f"{name:<38} {wall:7.2f} s wall {cpu:7.2f} s CPU  exit {code}")


if __name__ == "__main__":
    main_bench()
