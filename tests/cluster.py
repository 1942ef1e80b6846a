"""A multi-node Ray cluster on this machine: a head and worker nodes, each in a network namespace
of its own, joined by a bridge in another namespace.

Every node has its own address (``10.213.0.N``) and its own processes (those of its namespace),
the closest a single machine comes to separate machines: killing a node is killing its
namespace's processes. All traffic stays on the bridge; no namespace has a route to the
machine's outward interface. Ray refuses a second node on loopback and rewrites 127.0.0.1 to the
outward address, which is why the nodes are not on loopback.

Needs root and ``ip netns`` (CI runs as root); :func:`available` says why not, for a skip.
"""

import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

#: The cluster's subnet (the bridge is the namespaces' own: two clusters do not meet).
SUBNET = "10.213.0"
#: The head's GCS port.
PORT = 6379
#: The head's dashboard and job server port (``dashboard=True``).
DASHBOARD_PORT = 8265
#: The S3 endpoint's port (:meth:`Cluster.serve_s3`).
S3_PORT = 5000
RAY = str(Path(sys.executable).with_name("ray"))
ROOT = Path(__file__).parents[1]


def available() -> str | None:
    """None when this machine can make namespaces (root, ``ip``); else the reason."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2)"
    return None


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


@dataclass
class Node:
    name: str
    namespace: str
    address: str
    temp_dir: Path

    def pids(self) -> list[int]:
        """The processes of this node (its namespace's)."""
        out = subprocess.run(
            ["ip", "netns", "pids", self.namespace], capture_output=True, text=True, timeout=30
        )
        return [int(p) for p in out.stdout.split()]

    def command(self, *args: str) -> list[str]:
        """``args`` run as a process of this node."""
        return ["ip", "netns", "exec", self.namespace, *args]


@dataclass
class Cluster:
    """Namespaces ``<prefix>-sw`` (the bridge) and one per node; nodes started with
    ``ray start``, each with its own temporary folder (short: Ray's socket paths)."""

    prefix: str = field(default_factory=lambda: f"pdl{os.getpid() % 100000}")
    nodes: dict[str, Node] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    servers: list[subprocess.Popen] = field(default_factory=list)  # ended with their node

    def __post_init__(self) -> None:
        token = secrets.token_hex(32)  # this cluster's own: not the user's ~/.ray/auth_token
        # gloo binds the interface a cluster's nodes reach each other on, as a user sets it
        # (docs/deploy.md): the host name resolves to the machine's outward address
        self.env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token,
                    "RAY_USAGE_STATS_ENABLED": "0", "GLOO_SOCKET_IFNAME": "e0"}  # fmt: skip
        self.env.pop("RAY_ADDRESS", None)
        self.bridge = f"{self.prefix}-sw"
        ip("netns", "add", self.bridge)
        self._exec(self.bridge, "ip", "link", "add", "br0", "type", "bridge")
        self._exec(self.bridge, "ip", "link", "set", "br0", "up")

    @property
    def head(self) -> Node:
        return self.nodes["head"]

    @property
    def address(self) -> str:
        """The GCS address to join (``ray.init``, ``--address``, ``RAY_ADDRESS``)."""
        return f"{self.head.address}:{PORT}"

    def _exec(self, namespace: str, *args: str) -> None:
        ip("netns", "exec", namespace, *args)

    def _node(self, name: str) -> Node:
        """A namespace for ``name`` on the bridge, with its address."""
        node = Node(
            name,
            f"{self.prefix}-{name}",
            f"{SUBNET}.{len(self.nodes) + 1}",
            Path(f"/tmp/{self.prefix}-{name}"),
        )
        veth = f"v{self.prefix}{name}"[:15]
        ip("netns", "add", node.namespace)
        ip("link", "add", veth, "type", "veth", "peer", "name", "e0", "netns", node.namespace)
        ip("link", "set", veth, "netns", self.bridge)
        self._exec(self.bridge, "ip", "link", "set", veth, "master", "br0", "up")
        self._exec(node.namespace, "ip", "addr", "add", f"{node.address}/24", "dev", "e0")
        self._exec(node.namespace, "ip", "link", "set", "e0", "up")
        self._exec(node.namespace, "ip", "link", "set", "lo", "up")
        self.nodes[name] = node
        return node

    def start(self, name: str, cpus: int, dashboard: bool = False) -> Node:
        """A node named ``name`` with ``cpus`` CPUs: the head first (``name == "head"``; with
        its dashboard and job server on its address where ``dashboard``), then workers that
        join it. Returns when ``ray start`` has."""
        node = self._node(name)
        shutil.rmtree(node.temp_dir, ignore_errors=True)
        role = ["--head", "--port", str(PORT), "--include-dashboard", str(dashboard).lower()]
        if dashboard:
            role += ["--dashboard-host", node.address, "--dashboard-port", str(DASHBOARD_PORT)]
        if name != "head":
            role = ["--address", self.address]
        start = [RAY, "start", *role, "--node-ip-address", node.address, "--num-cpus", str(cpus),
                 "--temp-dir", str(node.temp_dir), "--disable-usage-stats"]  # fmt: skip
        subprocess.run(
            node.command(*start), env=self.env, check=True, capture_output=True, timeout=180
        )
        return node

    def serve_s3(self) -> str:
        """An S3 endpoint on a node of its own, ``s3`` (moto's server: a machine that stores,
        as a cluster's object store is one), before any Ray node starts: the nodes' processes
        get its address and credentials in their environment. Returns the endpoint URL."""
        assert not self.nodes, "the S3 endpoint comes before the Ray nodes (their environment)"
        node = self._node("s3")
        url = f"http://{node.address}:{S3_PORT}"
        self.env |= {"AWS_ENDPOINT_URL": url, "AWS_ACCESS_KEY_ID": "testing",
                     "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}  # fmt: skip
        moto = str(Path(sys.executable).with_name("moto_server"))
        self.servers.append(self.run("s3", moto, "-H", node.address, "-p", str(S3_PORT),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))  # fmt: skip
        return url

    def machine(self, name: str) -> Node:
        """A machine on the cluster's network that runs no Ray node (a user's, submitting)."""
        return self._node(name)

    def call(self, node: str, *args: str, timeout: float = 600) -> str:
        """``args`` run to their end on ``node`` in the repository (``tests`` importable), with
        the cluster's environment; their output (stdout and stderr; a failure raises)."""
        out = subprocess.run(self.nodes[node].command(*args), env=self.env, cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             timeout=timeout)  # fmt: skip
        assert out.returncode == 0, out.stdout
        return out.stdout

    def python(self, node: str, code: str) -> str:
        """``code`` run by this interpreter on ``node`` (:meth:`call`)."""
        return self.call(node, sys.executable, "-c", code, timeout=300)

    def run(self, node: str, *args: str, **kwargs) -> subprocess.Popen:
        """``args`` started on ``node`` with the cluster's environment (its token)."""
        return subprocess.Popen(self.nodes[node].command(*args), env=self.env, **kwargs)

    def kill(self, name: str) -> None:
        """Kill every process of the node (SIGKILL), as a machine that loses power."""
        node = self.nodes[name]
        deadline = time.monotonic() + 30
        while pids := node.pids():
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            assert time.monotonic() < deadline, f"node {name}: {pids} outlive SIGKILL"
            time.sleep(0.2)

    def ran(self, name: str, what: str) -> int:
        """How many worker processes of node ``name`` ran an actor of class ``what`` or a task
        of function ``what`` (Ray's own record: a worker's log holds ``:actor_name:<class>``,
        and ``:task_name:<function>`` for each task it starts)."""
        marks = (f":actor_name:{what}\n", f":task_name:{what}\n")
        logs = self.nodes[name].temp_dir.glob("session_*/logs/worker-*.out")
        return sum(any(m in p.read_text(errors="replace") for m in marks) for p in logs)

    def close(self) -> None:
        """Kill every node and remove the namespaces and the nodes' folders."""
        for name in reversed(list(self.nodes)):  # the S3 node, started first, goes last
            self.kill(name)
        for server in self.servers:
            server.wait()
        for node in self.nodes.values():
            subprocess.run(["ip", "netns", "del", node.namespace], capture_output=True)
            shutil.rmtree(node.temp_dir, ignore_errors=True)
        subprocess.run(["ip", "netns", "del", self.bridge], capture_output=True)


@contextmanager
def cluster(
    workers: dict[str, int], head_cpus: int = 0, s3: bool = False, dashboard: bool = False
) -> Iterator[Cluster]:
    """A started :class:`Cluster`: a head of ``head_cpus`` CPUs (with its job server where
    ``dashboard``) and one worker node per item of ``workers`` (name: CPUs), with an S3
    endpoint (:meth:`Cluster.serve_s3`) where ``s3``; closed after use."""
    c = Cluster()
    try:
        if s3:
            c.serve_s3()
        c.start("head", head_cpus, dashboard)
        for name, cpus in workers.items():
            c.start(name, cpus)
        yield c
    finally:
        c.close()
