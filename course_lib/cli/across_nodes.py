"""torchrun across nodes: the interface that reaches the peers, threads per rank, each node's last line.

gloo finds the address it tells its peers by resolving this machine's hostname, unless
``GLOO_SOCKET_IFNAME`` names an interface. On many machines (Debian, containers, network namespaces)
the hostname resolves to 127.0.0.1 or 127.0.1.1, so across machines gloo would advertise the loopback
and the other nodes could not connect. :func:`use_interface_towards` asks the kernel which local
address it would use to reach the rendezvous endpoint (a UDP ``connect`` sends no packet) and names
the interface that holds that address. On one machine (the endpoint is the loopback) nothing changes.

Across nodes every rank trains on one CPU thread unless ``--threads`` says more: a node cannot tell
whether other nodes share its cores (containers or namespaces on one host), and this small model's step
gets many times slower when ranks oversubscribe the cores. Every rank prints that it finished, with its
step times, so that each node's terminal ends with a line of its own.

    from course_lib.cli.across_nodes import interface_towards
    interface_towards("127.0.0.1")   # None: the loopback, nothing to choose
    interface_towards("10.0.0.2")    # e.g. 'eth0', the interface whose address reaches 10.0.0.2
"""

from __future__ import annotations

import fcntl
import ipaddress
import os
import shutil
import socket
import struct
import subprocess
import sys
from collections.abc import Sequence

_SIOCGIFADDR = 0x8915  # Linux ioctl: an interface's IPv4 address


def source_address(host: str, port: int = 9) -> str | None:
    """The local address the kernel would send from to reach `host` (None: no route, unknown host)."""
    try:
        family, _, _, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect(addr)  # UDP: only picks the route; nothing is sent
            return probe.getsockname()[0]
    except OSError:
        return None


def _ipv4_of(name: str) -> str | None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
        except OSError:  # no IPv4 address on this interface
            return None
    return socket.inet_ntoa(packed[20:24])


def _ipv6_interfaces() -> dict[str, str]:
    """IPv6 address -> interface, from /proc/net/if_inet6 (Linux)."""
    try:
        lines = open("/proc/net/if_inet6").read().split("\n")
    except OSError:
        return {}
    table = {}
    for line in filter(None, lines):
        hexaddr, *_, name = line.split()
        table[str(ipaddress.ip_address(bytes.fromhex(hexaddr)))] = name
    return table


def _from_ip_command(address: str) -> str | None:
    """iproute2's list, for what the ioctl cannot see (a second address on one interface)."""
    if shutil.which("ip") is None:
        return None
    listing = subprocess.run(["ip", "-o", "addr", "show"], capture_output=True, text=True, timeout=10).stdout
    for fields in (line.split() for line in listing.splitlines()):
        if len(fields) > 3 and fields[3].split("/")[0] == address:
            return fields[1].split("@")[0]
    return None


def interface_of(address: str) -> str | None:
    """The name of the interface that holds `address` (Linux; None elsewhere or if none holds it)."""
    if not sys.platform.startswith("linux"):
        return None
    if ipaddress.ip_address(address).version == 6:
        found = _ipv6_interfaces().get(str(ipaddress.ip_address(address)))
    else:
        found = next((n for _, n in socket.if_nameindex() if _ipv4_of(n) == address), None)
    return found or _from_ip_command(address)


def interface_towards(host: str) -> str | None:
    """The interface this machine reaches `host` through; None when that is the loopback (one machine)."""
    local = source_address(host)
    if local is None or ipaddress.ip_address(local).is_loopback:
        return None
    return interface_of(local)


def spans_nodes(env: dict[str, str] | os._Environ = os.environ) -> bool:
    """Whether torchrun started this run on more than one node (its GROUP_WORLD_SIZE: the nodes)."""
    return int(env.get("GROUP_WORLD_SIZE", "1")) > 1


def use_interface_towards(endpoint: str, env: dict[str, str] | os._Environ = os.environ) -> str | None:
    """Before gloo starts: set GLOO_SOCKET_IFNAME to the interface that reaches the rendezvous
    `endpoint` (MASTER_ADDR), unless the user set it or the endpoint is on the loopback. Returns the
    interface gloo will use (None: gloo's own choice)."""
    if "GLOO_SOCKET_IFNAME" in env:
        return env["GLOO_SOCKET_IFNAME"]
    name = interface_towards(endpoint)
    if name is not None:
        env["GLOO_SOCKET_IFNAME"] = name
    elif spans_nodes(env):  # several nodes, yet the endpoint is this machine's loopback: peers cannot use it
        print(
            f"warning: the rendezvous endpoint {endpoint} is a loopback address on this node; the other "
            "nodes cannot reach it. Use an address they reach, or set GLOO_SOCKET_IFNAME=<interface>",
            file=sys.stderr,
        )
    return name


def default_threads(env: dict[str, str] | os._Environ = os.environ) -> int | None:
    """Torch threads per rank when --threads is left out: 1 across nodes, else None (the engine shares
    this machine's cores among its ranks)."""
    return 1 if spans_nodes(env) else None


def print_node_finished(
    rank: int, step_times_s: Sequence[float], env: dict[str, str] | os._Environ = os.environ
) -> None:
    """Across nodes, one line per rank on stderr (stdout stays rank 0's summary or JSON)."""
    if not spans_nodes(env):
        return
    times = list(step_times_s)
    shown = ", ".join(f"{t * 1000:.0f}" for t in times[:8]) + (", ..." if len(times) > 8 else "")
    node, nodes = env.get("GROUP_RANK", "?"), env.get("GROUP_WORLD_SIZE", "?")
    print(
        f"node {node} of {nodes}, rank {rank} of {env.get('WORLD_SIZE', '?')}: finished {len(times)} steps, "
        f"step times {shown} ms", file=sys.stderr, flush=True,
    )  # fmt: skip
