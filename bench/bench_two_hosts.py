"""Real bytes on a real, rate-limited wire against the simulator and the engine's injected links.

Two network namespaces joined by a veth pair (tests/support/two_hosts.py), one torchrun node in each,
running the README's two-host command; the wire between them limited with ``tc tbf`` to each rate
in turn. For each rate: the measured step (two "hosts"), the simulator's prediction from the same
work's measured compute on one machine (``lessons.scale_out.replay``: measured compute + simulated
link), and the distributed engine on one machine with that ``--bandwidth`` injected. Root and Linux.

    sudo .venv/bin/python bench/bench_two_hosts.py            # prints a table, writes data/two_hosts_tbf.json

Lesson 08 draws the saved file (labelled as a saved measurement), so it shows on machines without root.
"""

from __future__ import annotations

import json
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the namespace helper is the tests' (one copy)

from two_hosts import TwoHosts, run_two_nodes, why_not_here  # noqa: E402

import course_lib.engines  # noqa: E402, F401  (the rooms: injected links)
from course_lib.lessons.scale_out import replay  # noqa: E402
from course_lib.shelf.costs import Link  # noqa: E402
from course_lib.shelf.distributed_engine import launch, make_spec  # noqa: E402
from course_lib.shelf.reference import TrainConfig  # noqa: E402

OUT = ROOT / "data" / "two_hosts_tbf.json"
CFG = TrainConfig(n_layers=8, d_model=64, n_heads=4, seq_len=128, batch_size=16, microbatches=4, steps=4)
FLAGS = ["--layers", "8", "--width", "64", "--heads", "4", "--seq-len", "128", "--batch-size", "16",
         "--microbatches", "4", "--steps", "4", "--json"]  # fmt: skip
RATES_MBIT = [64, 32, 16, 8, 4]  # tc's mbit: 10**6 bits per second


def measure() -> dict:
    rates = [r * 1e6 / 8 for r in RATES_MBIT]  # bytes per second
    specs = [make_spec(CFG, "gpipe", 2, threads=1)]
    specs += [make_spec(CFG, "gpipe", 2, threads=1, links=Link(bandwidth_Bps=b)) for b in rates]
    free, *injected = launch(specs)
    nbytes = max(t.nbytes for t in free.timeline.transfers)
    rows, hosts = [], TwoHosts()
    try:
        hosts.open()
        real_free, _, _ = run_two_nodes(hosts, FLAGS)
        for mbit, rate, inj in zip(RATES_MBIT, rates, injected, strict=True):
            hosts.shape(f"{mbit}mbit")
            real, _, _ = run_two_nodes(hosts, FLAGS)
            hosts.unshape()
            simulated = replay(free.timelines, specs[0].schedule, Link(bandwidth_Bps=rate), nbytes).makespan
            rows.append({"rate_Bps": rate, "measured_s": real["step_time_s"], "simulated_s": simulated,
                         "injected_s": inj.step_time_s})  # fmt: skip
    finally:
        hosts.close()
    return {
        "what": "gpipe, p=2, m=4, two network namespaces joined by a veth pair, tc tbf on both ends",
        "message_bytes": nbytes, "free_measured_s": real_free["step_time_s"],
        "free_one_node_s": free.step_time_s, "rows": rows, "config": FLAGS,
        "machine": f"{platform.node()} {platform.platform()}, {time.strftime('%Y-%m-%d', time.gmtime())}",
        "command": "sudo .venv/bin/python bench/bench_two_hosts.py",
    }  # fmt: skip


def main() -> int:
    why = why_not_here()
    if why:
        print(f"skipped: {why}")
        return 0
    saved = measure()
    free_ms = saved["free_measured_s"] * 1000
    print(f"message {saved['message_bytes']} bytes; free link: {free_ms:.0f} ms a step")
    print(f"{'Mbit/s':>6} {'measured':>9} {'simulated':>10} {'injected':>9}  measured/sim  measured/inj")
    for row in saved["rows"]:
        m, s, i, mbit = row["measured_s"], row["simulated_s"], row["injected_s"], row["rate_Bps"] * 8e-6
        print(f"{mbit:>6.0f} {m:>9.3f} {s:>10.3f} {i:>9.3f}  {m / s:>12.2f}  {m / i:>12.2f}")
    OUT.write_text(json.dumps(saved, indent=1) + "\n")
    print(f"saved to {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
