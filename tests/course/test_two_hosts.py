"""The README's two-host torchrun command, run as written on two "hosts": two network namespaces
joined by a veth pair (tests/support/two_hosts.py), one torchrun node in each. Root and Linux only.

Free link: both nodes finish and say so, and the losses are a one-node run's. Shaped link (tc tbf at
a rate where the boundary messages take most of the step): the measured step agrees with the
simulator's prediction from the same work's measured compute, and with the engine's own injected
``--bandwidth`` run, within 25%. A node whose peer never starts ends with one line naming the endpoint.
"""

from __future__ import annotations

import argparse
import logging
import re
import subprocess
import sys
import time
from collections import Counter

import pytest
from support.two_hosts import (
    ROOT,
    TwoHosts,
    clean_env,
    node_command,
    readme_two_host_command,
    run_two_nodes,
    why_not_here,
)

from course_lib.cli.torchrun import missing_peer_line, rendezvous_timeout
from course_lib.lessons.scale_out import replay
from course_lib.shelf.costs import Link
from course_lib.shelf.distributed_engine import launch, make_spec
from course_lib.shelf.reference import TrainConfig
from course_lib.shelf.schedule import messages


def on_two_hosts(test):
    """A test that starts processes in two namespaces: skipped, with the reason, where they cannot be made."""
    skip = pytest.mark.skipif(why_not_here() is not None, reason=str(why_not_here()))
    return pytest.mark.processes(skip(test))


# a shaped run where the wire sets the pace: 4 x 128 tokens x 64 wide x 4 bytes = 131 kB per message,
# 262 ms each at 0.5 MB/s (4 Mbit/s), against a few ms of compute per micro-batch and stage
SHAPED = TrainConfig(n_layers=8, d_model=64, n_heads=4, seq_len=128, batch_size=16, microbatches=4, steps=3)
AS_FLAGS = {"--layers": "n_layers", "--width": "d_model", "--heads": "n_heads", "--seq-len": "seq_len",
            "--batch-size": "batch_size", "--microbatches": "microbatches", "--steps": "steps"}  # fmt: skip
SHAPED_FLAGS = [str(w) for flag, field in AS_FLAGS.items() for w in (flag, getattr(SHAPED, field))]
RATE_BPS = 5e5  # bytes per second
RATE_TC = "4mbit"  # the same, as tc writes it


def readme_flag(name: str) -> str:
    words = readme_two_host_command()
    return words[words.index(name) + 1]


@pytest.fixture(scope="module")
def one_node():
    """On one machine (loopback, one launch): the README's run, the shaped run's work on a free link,
    and the same with the engine's injected --bandwidth."""
    readme = TrainConfig(n_layers=int(readme_flag("--layers")), steps=int(readme_flag("--steps")))
    specs = [
        make_spec(readme, readme_flag("--schedule"), 2, threads=1),
        make_spec(SHAPED, "gpipe", 2, threads=1),
        make_spec(SHAPED, "gpipe", 2, threads=1, links=Link(bandwidth_Bps=RATE_BPS)),
    ]
    return dict(zip(("readme", "free", "injected"), launch(specs), strict=True)) | {"specs": specs}


@pytest.fixture(scope="module")
def hosts():
    pair = TwoHosts()
    try:
        try:
            pair.open()
        except subprocess.CalledProcessError as err:  # e.g. a container without CAP_NET_ADMIN
            pytest.skip(f"cannot make network namespaces here: {err.stderr.strip()}")
        yield pair
    finally:
        pair.close()


@on_two_hosts
def test_each_node_finds_the_interface_towards_node_0(hosts):
    probe = (
        "from course_lib.cli.across_nodes import interface_towards; "
        f"print(interface_towards({hosts.address(0)!r}))"
    )
    for node in (0, 1):
        out, _ = hosts.start(node, [sys.executable, "-c", probe], ROOT, clean_env()).communicate(timeout=60)
        assert out.strip() == hosts.interface(node)  # not the loopback that the hostname resolves to
    # a second address on one interface, which the ioctl does not see (iproute2's list does)
    second = f"10.231.{hosts.subnet}.200"
    add = ["ip", "-n", hosts.names[1], "addr", "add", f"{second}/32", "dev", hosts.interface(1)]
    subprocess.run(add, check=True, timeout=30)
    probe = f"from course_lib.cli.across_nodes import interface_of; print(interface_of({second!r}))"
    out, _ = hosts.start(1, [sys.executable, "-c", probe], ROOT, clean_env()).communicate(timeout=60)
    assert out.strip() == hosts.interface(1)


@on_two_hosts
def test_two_hosts_train_like_one(hosts, one_node):
    out, err0, err1 = run_two_nodes(hosts, ["--json"])
    steps = readme_flag("--steps")
    assert re.search(rf"node 0 of 2, rank 0 of 2: finished {steps} steps, step times [\d, ]+ ms", err0), err0
    assert re.search(rf"node 1 of 2, rank 1 of 2: finished {steps} steps, step times [\d, ]+ ms", err1), err1
    assert out["losses"] == pytest.approx(one_node["readme"].losses, rel=1e-6)
    assert (out["pipeline_ranks"], out["world"]) == (2, 2)
    print(f"two hosts: {out['step_time_s']:.3f} s a step; one node: {one_node['readme'].step_time_s:.3f} s")


@on_two_hosts
def test_shaped_link_step_matches_simulated_and_injected(hosts, one_node):
    one_node_free, one_node_injected = one_node["free"], one_node["injected"]
    nbytes = max(t.nbytes for t in one_node_free.timeline.transfers)
    schedule = one_node["specs"][1].schedule
    predicted = replay(one_node_free.timelines, schedule, Link(bandwidth_Bps=RATE_BPS), nbytes).makespan
    try:
        hosts.shape(RATE_TC)
    except subprocess.CalledProcessError as err:
        pytest.skip(f"tc tbf is not available in this kernel: {err.stderr.strip()}")
    try:
        real, _, _ = run_two_nodes(hosts, [*SHAPED_FLAGS, "--json"])
    finally:
        hosts.unshape()
    measured, injected_step = real["step_time_s"], one_node_injected.step_time_s
    print(f"{RATE_TC}: measured {measured:.3f}, simulated {predicted:.3f}, injected {injected_step:.3f} s")
    # the wire's own floor, whatever the load on the cores: a step cannot beat one direction's bytes at
    # the rate (a test where tbf shaped nothing fails here; a busy machine only makes compute longer)
    per_direction = Counter((m.src, m.dst) for m in messages(schedule))
    wire_floor = max(per_direction.values()) * nbytes / RATE_BPS
    assert measured > wire_floor, f"{measured:.3f} s a step, faster than the shaped wire allows"
    assert measured == pytest.approx(predicted, rel=0.25)
    assert measured == pytest.approx(injected_step, rel=0.25)
    assert real["losses"] == pytest.approx(one_node_free.losses, rel=1e-6)


@on_two_hosts
def test_a_node_whose_peer_never_starts_says_what_it_waited_for(hosts):
    """Node 0 alone and node 1 alone, at once: node 1 looks for node 0 on a port where nothing listens."""
    start, procs, ports = time.monotonic(), {}, {0: 29500, 1: 29501}
    for node, port in ports.items():  # later flags win: the README's timeout cut to 3 s, node 1's port
        words = node_command(hosts, node, [])
        at = len(words) - 1 - words[::-1].index("-m")  # torchrun's -m (the launcher is run with one too)
        flags = ["--rdzv-conf", "timeout=3", "--master-port", str(port)]
        procs[node] = hosts.start(node, [*words[:at], *flags, *words[at:]], ROOT, clean_env())
    for node, proc in procs.items():
        _, err = proc.communicate(timeout=120)
        lines, endpoint = err.strip().splitlines(), f"{hosts.address(0)}:{ports[node]}"
        print(f"node {node} alone, after {time.monotonic() - start:.0f} s: {err.strip()}")
        assert proc.returncode == 1
        assert len(lines) == 1 and lines[0].startswith(f"error: node {node} of 2: no rendezvous at "), err
        assert f"{endpoint} after 3 s" in lines[0]
        if node == 1:  # torch's own words name the endpoint it could not reach
            assert f"after 3000ms while trying to connect to ({hosts.address(0)}, {ports[1]})" in lines[0]
        else:  # node 0 holds the endpoint: it says how many nodes came
            assert "waiting for clients. 1/2 clients joined" in lines[0]


def test_the_missing_peer_line_says_what_to_check():
    args = argparse.Namespace(master_addr="10.0.0.1", master_port=29500, nnodes="2", rdzv_conf="timeout=60")
    err = RuntimeError("Timed out after 61 seconds waiting for clients. 1/2 clients joined.\nmore")
    node0 = missing_peer_line(argparse.Namespace(**vars(args), node_rank=0), err)
    assert node0 == (
        "node 0 of 2: no rendezvous at 10.0.0.1:29500 after 60 s (Timed out after 61 seconds waiting for "
        "clients. 1/2 clients joined.). Check that every other node runs this command with --nnodes 2, its "
        "own --node-rank and --master-addr 10.0.0.1, and reaches port 29500 of this node."
    )
    node1 = missing_peer_line(argparse.Namespace(**vars(args), node_rank=1), err)
    assert node1.startswith("node 1 of 2: ")
    assert "Check that node 0 runs this command with --node-rank 0" in node1
    assert rendezvous_timeout("read_timeout=3,timeout=7") == "7 s"
    assert rendezvous_timeout("") == "torchrun's rendezvous timeout"


def test_node_0_closing_the_store_at_the_exit_barrier_is_one_line(capsys):
    from torch.distributed import DistNetworkError

    from course_lib.cli.torchrun import _EarlyStoreClose

    def record(msg: str, err: Exception) -> logging.LogRecord:
        return logging.LogRecord("api", logging.ERROR, "api.py", 1, msg, (1.0,), (type(err), err, None))

    note, barrier = _EarlyStoreClose(1, "2"), "Error waiting on exit barrier. Elapsed: %s seconds"
    assert not note.filter(record(barrier, DistNetworkError("closed")))
    assert capsys.readouterr().err == (
        "node 1 of 2: this node's ranks finished; node 0 ended first and closed the rendezvous, so "
        "torchrun's exit barrier here ended without its answer\n"
    )
    assert note.filter(record(barrier, RuntimeError("other")))
    assert note.filter(record("something else", DistNetworkError("closed")))
