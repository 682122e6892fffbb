"""A deadlock is reported, not waited on forever: a rank that never sends leaves its peer waiting in a
receive, and once the run's limit on a wait passes the run fails naming the rank that waits, the
operation (the message it waits for), the peer it waits on and for how long (lesson 16)."""

from __future__ import annotations

import re
import time

import pytest

from course_lib.engines.faults import Fault
from course_lib.shelf.distributed_engine import DistributedError, run_distributed
from course_lib.shelf.reference import TrainConfig

LIMIT_S = 2.0


def test_a_rank_waiting_forever_on_a_receive_is_named_with_operation_peer_and_seconds() -> None:
    cfg = TrainConfig(n_layers=2, d_model=16, n_heads=2, seq_len=8, batch_size=4, microbatches=2, steps=1)
    start = time.perf_counter()
    with pytest.raises(DistributedError) as caught:  # rank 1 hangs before its second action
        run_distributed(cfg, "1f1b", 2, fault=Fault(rank=1, how="hang"), timeout_s=LIMIT_S, threads=1)
    elapsed = time.perf_counter() - start
    err = caught.value
    assert err.failed_rank == 1  # the rank that stopped answering, not the one that saw it
    waited = re.search(r"rank 0 waited for (\d[FBI]\d+) from rank 1 .*given up after ([\d.]+) s", str(err))
    assert waited is not None, str(err)
    assert waited.group(1) == "1B0"  # 1F1B on 2 ranks: rank 0 waits for stage 1's first backward
    assert LIMIT_S * 0.9 <= float(waited.group(2)) <= LIMIT_S * 5  # the limit, with slack for a busy host
    assert elapsed < 60 + 5 * LIMIT_S  # start-up, the limit and the launcher's grace, with 5x slack
