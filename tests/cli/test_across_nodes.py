"""course_lib/cli/across_nodes.py: the interface towards the rendezvous, threads across nodes, each rank's
last line.
(A real non-loopback choice, inside two network namespaces: tests/course/test_two_hosts.py.)"""

from __future__ import annotations

import sys

import pytest

from course_lib.cli import across_nodes

ACROSS_NODES = {"GROUP_WORLD_SIZE": "2", "GROUP_RANK": "1", "WORLD_SIZE": "2"}


def test_the_loopback_needs_no_choice():
    assert across_nodes.source_address("127.0.0.1") == "127.0.0.1"
    assert across_nodes.interface_towards("127.0.0.1") is None
    env: dict[str, str] = {}
    assert across_nodes.use_interface_towards("127.0.0.1", env) is None
    assert "GLOO_SOCKET_IFNAME" not in env  # one machine: gloo's own choice, as before


def test_an_unknown_host_gives_none_not_an_error():
    assert across_nodes.source_address("no-such-host.invalid") is None
    assert across_nodes.interface_towards("no-such-host.invalid") is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="interface names are read the Linux way")
def test_the_interface_that_holds_an_address():
    assert across_nodes.interface_of("127.0.0.1") == "lo"
    assert across_nodes.interface_of("::1") in (None, "lo")  # None where IPv6 is off
    assert across_nodes.interface_of("192.0.2.77") is None  # TEST-NET-1: held by no interface here


def test_a_name_the_user_gave_wins():
    env = {"GLOO_SOCKET_IFNAME": "eth7"}
    assert across_nodes.use_interface_towards("127.0.0.1", env) == "eth7"
    assert env == {"GLOO_SOCKET_IFNAME": "eth7"}


def test_across_nodes_a_loopback_endpoint_is_named(capsys):
    env = dict(ACROSS_NODES)
    assert across_nodes.use_interface_towards("127.0.0.1", env) is None
    err = capsys.readouterr().err
    assert "127.0.0.1 is a loopback address on this node" in err and "GLOO_SOCKET_IFNAME" in err


def test_one_thread_per_rank_across_nodes():
    assert across_nodes.default_threads(ACROSS_NODES) == 1
    assert across_nodes.default_threads({}) is None  # one node: the engine shares the cores among its ranks
    assert across_nodes.default_threads({"GROUP_WORLD_SIZE": "1"}) is None


def test_every_rank_says_it_finished_across_nodes(capsys):
    times = [0.25, 0.125]
    across_nodes.print_node_finished(1, times, ACROSS_NODES)
    assert capsys.readouterr().err == "node 1 of 2, rank 1 of 2: finished 2 steps, step times 250, 125 ms\n"
    across_nodes.print_node_finished(1, times, {})  # one node: rank 0's summary says it all
    assert capsys.readouterr().err == ""
