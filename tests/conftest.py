"""Shared fixtures: real services, started once per test session (per xdist worker).

- ``ray_local``: pdeladder's local Ray runtime (2 CPUs, on 127.0.0.1), shut down at the end.
- ``prefect_server``: a real temporary Prefect server with SQLite (``prefect_test_harness``);
  ``PREFECT_API_URL`` points at it for this process and for Ray workers.
- ``fresh_python``: runs code in a fresh interpreter (``sys.modules`` starts empty).
- ``running``: the processes whose command line holds given words (Linux's /proc).
- ``refused``: runs the ``pdeladder`` console script on bad input and asserts one line, exit 2,
  nothing written.

Helpers (imported: ``from .conftest import ...``): :func:`alive`, whether a process runs;
:func:`process_tree` and :func:`tcp_listeners`, a process tree and the TCP listeners its
processes hold (/proc).
"""

import ipaddress
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pytest

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session")
def ray_local() -> Iterator[None]:
    import ray

    from pdeladder.ray_runtime import start_local

    start_local(num_cpus=2)
    yield
    ray.shutdown()


@pytest.fixture(scope="session")
def prefect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    os.environ["PREFECT_HOME"] = str(tmp_path_factory.mktemp("prefect_home"))
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        url = PREFECT_API_URL.value()
        os.environ["PREFECT_API_URL"] = url
        yield url


@pytest.fixture
def fresh_python() -> Callable[[str], list[str]]:
    """``run(code)``: ``python -c code`` in a fresh interpreter, asserted to exit 0; its stdout
    lines."""

    def run(code: str) -> list[str]:
        proc = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        return proc.stdout.strip().splitlines()

    return run


@pytest.fixture
def two_ranks() -> Callable[..., list[str]]:
    """``run(code, *args)``: ``python -c code *args`` on two MPI ranks (``mpiexec -n 2``, one
    thread each), asserted to exit 0; its stdout lines."""
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")

    def run(code: str, *args: str) -> list[str]:
        proc = subprocess.run(
            [mpiexec, "-n", "2", sys.executable, "-c", code, *args],
            env={**os.environ, "OMP_NUM_THREADS": "1"},
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        return proc.stdout.strip().splitlines()

    return run


@pytest.fixture
def running() -> Callable[..., list[int]]:
    """``running(*words, parent=None)``: pids of the live processes whose command line holds
    every word (and whose parent is ``parent``, when given); a zombie's command line is empty."""

    def pids(*words: str, parent: int | None = None) -> list[int]:
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    line = f.read().replace(b"\0", b" ")
                with open(f"/proc/{pid}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            if all(w.encode() in line for w in words) and parent in (None, ppid):
                found.append(int(pid))
        return found

    return pids


#: The installed console script, as a user runs it.
PDELADDER = os.path.join(os.path.dirname(sys.executable), "pdeladder")


@pytest.fixture
def refused() -> Callable[..., str]:
    """``refused(*args, out=None, cwd=None)``: run ``pdeladder *args`` and assert that it exits
    2 with exactly one stderr line starting ``error:`` and that nothing exists at ``out`` (the
    output path the command was given) afterwards; returns that line."""

    def run(*args: str, out: str | Path | None = None, cwd: str | Path | None = None) -> str:
        proc = subprocess.run(
            [PDELADDER, *map(str, args)], capture_output=True, text=True, timeout=120, cwd=cwd
        )
        lines = proc.stderr.splitlines()
        assert proc.returncode == 2 and len(lines) == 1, (proc.returncode, proc.stderr[-3000:])
        assert lines[0].startswith("error: "), lines[0]
        if out is not None:
            assert not os.path.lexists(Path(cwd or ".", out)), f"{out} was written"
        return lines[0]

    return run


# -- processes and their listening sockets (Linux's /proc) --------------------------------------


def alive(pid: int) -> bool:
    """Whether ``pid`` runs: a zombie, which a container's PID 1 may never reap, has ended."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def process_tree(pid: int) -> set[int]:
    """``pid`` and every process below it, at any depth."""
    below: dict[int, list[int]] = {}  # ppid -> pids
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError):  # exited meanwhile
            continue
        below.setdefault(ppid, []).append(int(stat.parent.name))
    found, todo = {pid}, [pid]
    while todo:
        found.update(new := below.get(todo.pop(), []))
        todo += new
    return found


def tcp_listeners(pids: Iterable[int]) -> dict[tuple[str, int], int]:
    """(address, port) -> pid, of every TCP socket in LISTEN state that one of ``pids`` holds
    (an IPv4-mapped IPv6 address written as its IPv4 one)."""
    table = {}  # socket inode -> (address, port), of every listener on the machine
    for name, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        for line in Path("/proc/net", name).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A":  # TCP_LISTEN
                continue
            address, port = fields[1].split(":")
            raw = bytes.fromhex(address)  # 32-bit words in host (little-endian) order
            packed = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
            ip = ipaddress.ip_address(socket.inet_ntop(family, packed))
            table[fields[9]] = (str(getattr(ip, "ipv4_mapped", None) or ip), int(port, 16))
    found: dict[tuple[str, int], int] = {}
    for pid in pids:
        try:
            links = [os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir()]
        except OSError:  # exited meanwhile, or a descriptor closed while listed
            continue
        for link in links:
            if link.startswith("socket:[") and link[8:-1] in table:
                found.setdefault(table[link[8:-1]], pid)
    return found
