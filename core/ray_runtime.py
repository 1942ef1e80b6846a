"""Starting Ray for pdeladder's commands: one local start, bound to 127.0.0.1, robust to a slow
start on a busy machine; or joining a cluster."""

import logging
import os
import signal
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

from pdeladder.errors import ClusterLostError, ServiceError

logger = logging.getLogger(__name__)

#: Environment of every task and actor: one BLAS/OpenMP thread, no usage statistics.
RUNTIME_ENV = {"env_vars": {"OMP_NUM_THREADS": "1", "RAY_USAGE_STATS_ENABLED": "0"}}

#: Tries at starting a node. Ray gives a new node's raylet 30 s (not configurable) to register
#: with the GCS; on a loaded machine that can run out while nothing is wrong.
START_ATTEMPTS = 3


def ray_init(**kwargs: Any) -> None:
    """``ray.init(**kwargs)``; a node that timed out during start-up is shut down and started
    again, up to :data:`START_ATTEMPTS` times. Any other error is raised at once."""
    import ray

    for attempt in range(1, START_ATTEMPTS + 1):
        try:
            ray.init(**kwargs)
            return
        except Exception as err:
            ray.shutdown()  # a start that failed must not leave its processes behind
            if "timed out during startup" not in str(err) or attempt == START_ATTEMPTS:
                raise
            logger.warning("Ray node start timed out (attempt %d of %d); starting it again",
                           attempt, START_ATTEMPTS)  # fmt: skip


@contextmanager
def _loopback() -> Iterator[None]:
    """Keep Ray's loopback addresses loopback while the ``ray.init`` inside runs.

    Ray replaces 127.0.0.1, in a node IP and in an address to join, by the machine's outward
    address (and a node's servers then listen on all interfaces), unless the node may not form
    a cluster (as on macOS, where ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER`` is read once, at
    import): so it is, for the call.
    """
    from ray._private import ray_constants

    cluster = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = cluster


def local_runtime_env() -> dict[str, dict[str, str]]:
    """:data:`RUNTIME_ENV` of the local runtime: every worker on this machine, so MPI and gloo
    on loopback unless configured (:mod:`pdeladder.network`; the settings in force here, the
    user's where set)."""
    from pdeladder import network

    env = {**RUNTIME_ENV["env_vars"], **network.loopback_defaults()}
    if names := network.defaulted():
        env[network.DEFAULTED] = ",".join(sorted(names))
    env["GLOO_SOCKET_IFNAME"] = os.environ.get("GLOO_SOCKET_IFNAME", network.LOOPBACK)
    return {"env_vars": env}


#: Process titles of the agents a raylet starts beside it. A raylet that dies with a killed
#: driver leaves them running for about a minute (Ray's liveness check), holding their ports.
RAY_AGENTS = ("ray::DashboardAgent", "ray::RuntimeEnvAgent")
#: The script of a Ray worker that has not yet been given its first task or actor (a started
#: one retitles itself ``ray::…``). One still importing when its raylet dies lives on until it
#: tries to connect: seen above 20 s on a loaded 2-core machine.
RAY_WORKER = b"ray/_private/workers/default_worker.py"


def _proc(pid: int, name: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/{name}").read_bytes()
    except OSError:  # gone meanwhile, or not Linux
        return b""


def _ray_process(cmdline: bytes) -> bool:
    """A Ray agent, or a Ray worker not yet started (by its command line)."""
    args = cmdline.split(b"\0")
    return args[0].decode(errors="replace").startswith(RAY_AGENTS) or any(
        a.endswith(RAY_WORKER) for a in args[1:3]
    )


def orphans() -> list[int]:
    """This user's Ray agents and not-yet-started workers whose raylet is gone (their parent
    is no raylet): what a driver killed with SIGKILL left. On a machine without /proc, none."""
    uid, found = os.getuid(), []
    for entry in Path("/proc").glob("[0-9]*"):
        pid = int(entry.name)
        if not _ray_process(_proc(pid, "cmdline")):
            continue
        try:
            if entry.stat().st_uid != uid:
                continue
        except OSError:
            continue
        status = _proc(pid, "status").decode(errors="replace")
        ppid = next((int(line.split()[1]) for line in status.splitlines()
                     if line.startswith("PPid:")), 0)  # fmt: skip
        if b"raylet" not in _proc(ppid, "cmdline"):
            found.append(pid)
    return found


def end_orphans() -> list[int]:
    """End :func:`orphans` (SIGKILL: the agents ignore SIGTERM while they wait for their
    raylet, and none serves anything without it); their pids."""
    pids = orphans()
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:  # ended meanwhile
            pass
    if pids:
        logger.info("ended %d Ray processes a killed run had left: %s", len(pids), pids)
    return pids


def start_local(num_cpus: int | None = None) -> None:
    """Start a fresh local Ray runtime in this process (``num_cpus``: default all) whose every
    TCP listener is on 127.0.0.1: no dashboard, no usage statistics, token authentication as
    Ray's default has it (on), MPI and gloo of its workers on loopback
    (:func:`local_runtime_env`); first ends the Ray processes a killed run left
    (:func:`end_orphans`). ``docs/deploy.md`` lists what listens where."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    end_orphans()  # what a killed run left: a minute of its ports and memory
    with _loopback():  # the node's processes get 127.0.0.1 as their IP and listen on it
        ray_init(
            address="local",  # a fresh runtime, even when `ray start` left one running here
            num_cpus=num_cpus,
            include_dashboard=False,
            log_to_driver=False,
            runtime_env=local_runtime_env(),
            _node_ip_address="127.0.0.1",
        )


#: Seconds a cluster's address has to accept a connection before joining it is given up.
CONNECT_TIMEOUT_S = 10.0


def _host_port(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of ``host:port`` or ``ray://host:port``; None for another form."""
    host, _, port = address.rpartition("://")[2].rpartition(":")
    return (host.strip("[]"), int(port)) if host and port.isascii() and port.isdigit() else None


def _refusal(address: str) -> OSError | None:
    """Why ``address`` accepts no TCP connection within :data:`CONNECT_TIMEOUT_S`; None when it
    does, or when it is no ``host:port`` (``auto``: left to Ray)."""
    if (where := _host_port(address)) is None:
        return None
    try:
        with socket.create_connection(where, timeout=CONNECT_TIMEOUT_S):
            return None
    except OSError as err:
        return err


def answers(address: str) -> None:
    """Raise :class:`~pdeladder.errors.ServiceError` naming ``address`` (``host:port`` or
    ``ray://host:port``) unless something there accepts a TCP connection within
    :data:`CONNECT_TIMEOUT_S`: Ray itself retries a GCS address where nothing listens for
    minutes, and a Ray Client one for 30 s. Other forms (``auto``) are left to Ray."""
    if err := _refusal(address):
        raise ServiceError(f"cannot reach the Ray cluster at {address}: {err}") from err


#: The cluster this process joined (:func:`join`): its address, as :func:`still_joined` probes
#: it; None on a local runtime.
_joined: str | None = None


def still_joined() -> None:
    """Raise :class:`~pdeladder.errors.ClusterLostError` naming the address when the cluster this
    process joined accepts no connection there any more (its head is gone). Ray's own core
    worker ends a driver whose GCS it has lost for 60 s without a word to the caller, so a
    long-running driver calls this more often than that. Nothing on a local runtime."""
    if _joined and (err := _refusal(_joined)):
        raise ClusterLostError(f"lost the Ray cluster at {_joined}: {err}") from err


def join(address: str) -> None:
    """Join the Ray cluster at ``address`` (``host:port``, ``ray://…`` or ``auto``). An address
    on 127.0.0.1 is joined there (Ray would connect to the machine's outward address instead,
    where :func:`start_local`'s runtime does not listen); the driver then attaches to the node
    of this machine, whatever its IP. A cluster that cannot be reached is a
    :class:`~pdeladder.errors.ServiceError` that names ``address``."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    answers(address)
    loopback = "://" not in address and address.rpartition(":")[0] in ("127.0.0.1", "localhost")
    try:
        with _loopback() if loopback else nullcontext():
            ray_init(address=address, runtime_env=RUNTIME_ENV, log_to_driver=False)
    except ConnectionError as err:  # a cluster that is gone, or was never there
        raise ServiceError(f"cannot reach the Ray cluster at {address}: {err}") from err
    import ray

    global _joined
    _joined = address if _host_port(address) else ray.get_runtime_context().gcs_address


@contextmanager
def ray_session(
    address: str | None = None,
    num_cpus: int | None = None,
    on_step: Callable[[str], None] | None = None,
) -> Iterator[None]:
    """Use the Ray runtime already initialized in this process; or join the cluster at
    ``address`` (default: ``RAY_ADDRESS``, which a Ray job's entrypoint has); or start a local
    one (:func:`start_local`) with ``num_cpus``, shut down on exit.

    ``on_step``: told one line as the start or join begins and one when Ray is ready (its
    seconds: a local start takes 10-30 s on a small machine)."""
    import ray

    if ray.is_initialized():
        yield
        return
    tell = on_step or (lambda line: None)
    address = address or os.environ.get("RAY_ADDRESS")
    t0 = time.perf_counter()
    if address:
        tell(f"joining the Ray cluster at {address} ...")
        join(address)
        tell(f"joined the Ray cluster at {address} in {time.perf_counter() - t0:.0f} s")
    else:
        cpus = "every CPU" if num_cpus is None else f"{num_cpus} CPU{'s' * (num_cpus != 1)}"
        tell(f"starting a local Ray runtime ({cpus}) ...")
        start_local(num_cpus)
        tell(f"started Ray in {time.perf_counter() - t0:.0f} s")
    global _joined
    try:
        yield
    finally:
        _joined = None
        ray.shutdown()
