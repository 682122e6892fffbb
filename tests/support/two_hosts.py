"""Two "hosts" on one Linux machine: two network namespaces joined by a veth pair (root only).

Each namespace has only its loopback and its end of the pair (addresses 10.231.N.1 and 10.231.N.2,
N from this process's id), no route elsewhere and an empty resolv.conf, so nothing a test starts there
can reach another address. ``close()`` kills every process left in the namespaces and deletes them; it
runs from the fixture's ``finally`` and from ``atexit``, so a failed or interrupted test leaves nothing.
"""

from __future__ import annotations

import atexit
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from support.paths import REPO_ROOT
from support.readme import README, bash_commands

ROOT = REPO_ROOT
_NETNS_ETC = Path("/etc/netns")  # `ip netns exec` bind-mounts /etc/netns/NAME/resolv.conf over /etc's


def why_not_here() -> str | None:
    """None when namespaces can be made here; otherwise the one-line reason."""
    if not sys.platform.startswith("linux"):
        return f"network namespaces are Linux's; this is {sys.platform}"
    if os.geteuid() != 0:
        return "network namespaces need root (CI runs the suite as root)"
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    return f"needs iproute2's {' and '.join(missing)}" if missing else None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


@dataclass
class TwoHosts:
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:6])  # unique names per run
    subnet: int = field(default_factory=lambda: 1 + os.getpid() % 250)
    procs: list[subprocess.Popen] = field(default_factory=list)

    @property
    def names(self) -> tuple[str, str]:
        return f"pp{self.tag}a", f"pp{self.tag}b"

    def address(self, node: int) -> str:
        return f"10.231.{self.subnet}.{node + 1}"

    def interface(self, node: int) -> str:
        return f"v{self.tag}{'ab'[node]}"  # under Linux's 15 characters

    def open(self) -> TwoHosts:
        atexit.register(self.close)
        a, b = self.names
        for ns in (a, b):
            _ip("netns", "add", ns)
            (_NETNS_ETC / ns).mkdir(parents=True, exist_ok=True)
            (_NETNS_ETC / ns / "resolv.conf").write_text("# no name server inside the test namespace\n")
        _ip("link", "add", self.interface(0), "type", "veth", "peer", "name", self.interface(1))
        for node, ns in enumerate((a, b)):
            dev = self.interface(node)
            _ip("link", "set", dev, "netns", ns)
            _ip("-n", ns, "addr", "add", f"{self.address(node)}/30", "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        return self

    def shape(self, rate: str) -> None:
        """Both directions through a token bucket (tc tbf) of `rate`, e.g. '8mbit' (netem is often not
        in the kernel; tbf is)."""
        for node, ns in enumerate(self.names):
            tbf = ["tc", "qdisc", "replace", "dev", self.interface(node), "root", "tbf", "rate", rate]
            cmd = ["ip", "netns", "exec", ns, *tbf, "burst", "32kb", "latency", "2s"]
            subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=30)

    def unshape(self) -> None:
        for node, ns in enumerate(self.names):
            cmd = ["ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", self.interface(node), "root"]
            subprocess.run(cmd, capture_output=True, timeout=30)

    def start(self, node: int, command: list[str], cwd: Path, env: dict[str, str]) -> subprocess.Popen:
        """`command` inside node's namespace, in its own process group (so that close() can end it)."""
        proc = subprocess.Popen(
            ["ip", "netns", "exec", self.names[node], *command], cwd=cwd, env=env, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
        )  # fmt: skip
        self.procs.append(proc)
        return proc

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
        for ns in self.names:
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
            for pid in pids:  # anything started in there that left its process group
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)  # takes the veth pair with it
            shutil.rmtree(_NETNS_ETC / ns, ignore_errors=True)
        atexit.unregister(self.close)


def readme_two_host_command() -> list[str]:
    """The README's two-host command (the one with --nnodes 2 and HOST0), as a list of words."""
    found = [c for c in bash_commands(README.read_text()) if "--nnodes 2" in c and "HOST0" in c]
    assert len(found) == 1, f"README.md should have one two-host torchrun command, found {found}"
    return shlex.split(found[0], comments=True)


def node_command(hosts: TwoHosts, node: int, extra: list[str]) -> list[str]:
    words = [w.replace("HOST0", hosts.address(0)) for w in readme_two_host_command()]
    words[words.index("--node-rank") + 1] = str(node)
    return [*words, *extra]


def clean_env() -> dict[str, str]:
    """This checkout's course_lib, no torchrun variables and no GLOO_SOCKET_IFNAME: the engine picks it."""
    drop = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
            "GLOO_SOCKET_IFNAME", "GROUP_RANK", "GROUP_WORLD_SIZE")  # fmt: skip
    return {k: v for k, v in os.environ.items() if k not in drop} | {"PYTHONPATH": str(ROOT)}


def run_two_nodes(hosts: TwoHosts, extra: list[str]) -> tuple[dict, str, str]:
    """Both nodes, node 1 a second later; node 0's JSON, node 0's and node 1's stderr."""
    procs = []
    for node in (0, 1):
        procs.append(hosts.start(node, node_command(hosts, node, extra), ROOT, clean_env()))
        time.sleep(1)
    outs = [p.communicate(timeout=300) for p in procs]
    for node, (p, (out, err)) in enumerate(zip(procs, outs, strict=True)):
        assert p.returncode == 0, f"node {node} exited {p.returncode}:\n{out}\n{err[-3000:]}"
    return json.loads(outs[0][0]), outs[0][1], outs[1][1]
