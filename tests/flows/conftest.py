"""Fixtures of the flow tests: a tiny curriculum, free ports, a real Ray head with a dashboard."""

import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn
from uuid import UUID

import pytest

#: Two stages of one-dimensional problems, small enough to solve and train in seconds.
TINY = """\
name: tiny
seed: 7
model: {width: 4, modes: 2, layers: 1}
stages:
  - name: first
    families:
      - family: heat
        dims: [1]
        resolutions: [9]
        samples: 3
        params:
          diffusivity: {low: 0.01, high: 0.1, scale: log}
    training: {steps: 4, batch_size: 2}
  - name: second
    families:
      - family: heat
        dims: [1]
        resolutions: [9]
        samples: 2
      - family: darcy
        dims: [1]
        resolutions: [9]
        samples: 2
    training: {steps: 4, batch_size: 2}
"""


@pytest.fixture
def tiny_yaml() -> str:
    return TINY


@pytest.fixture
def artifacts() -> Callable[[UUID], dict[str, Any]]:
    """Artifacts of a flow run by key, read back from the server."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    def read(flow_run_id: UUID) -> dict[str, Any]:
        with get_client(sync_client=True) as client:
            found = client.read_artifacts(
                artifact_filter=ArtifactFilter(
                    flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id])
                )
            )
        return {a.key: a for a in found}

    return read


@pytest.fixture
def tiny_spec(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    return path


@pytest.fixture(scope="module")
def tiny_store(tmp_path_factory: pytest.TempPathFactory, ray_local: None) -> str:
    """A store with the tiny curriculum's first stage solved (on the session's Ray runtime)."""
    from pdeladder.curriculum.generation import materialize
    from pdeladder.curriculum.loader import parse_curriculum

    url = str(tmp_path_factory.mktemp("tiny") / "store.zarr")
    summary = materialize(parse_curriculum(TINY), stages=["first"], store_url=url, workers=2)
    assert summary.ok == 3, summary.to_dict()
    return url


def unused_port() -> int:
    """A port on 127.0.0.1 that was free a moment ago. Another process may take it before the
    caller binds it: start services through :func:`on_free_ports`, which retries that case."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: What a server prints when the port it was given was taken in between (uvicorn, Ray).
PORT_TAKEN = re.compile(r"address already in use|already in use|errno 98", re.IGNORECASE)


def on_free_ports[R](start: Callable[[], R], attempts: int = 3) -> R:
    """``start()`` (which picks its ports with :func:`unused_port`) retried with fresh ports while
    it fails because one of them was taken in between (its :class:`PortTaken`)."""
    for _ in range(attempts - 1):
        try:
            return start()
        except PortTaken:
            continue
    return start()


class PortTaken(Exception):
    """A service could not listen on a port :func:`unused_port` had found free."""


def start_failed(output: str, what: str) -> NoReturn:
    """Fail the test with the tail of a service's ``output``; a lost port race raises
    :class:`PortTaken` instead (so that :func:`on_free_ports` retries)."""
    if PORT_TAKEN.search(output):
        raise PortTaken(output[-500:])
    pytest.fail(f"{what} failed: {output[-2000:]}")


@pytest.fixture
def free_port() -> Iterator[int]:
    """A port on 127.0.0.1 that nothing listens on: bound by this fixture, never listening, so
    no other process can take it while the test runs (connections to it are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


@dataclass(frozen=True)
class RayHead:
    """Addresses of a running Ray head: ``gcs`` to join it (``host:port``), ``jobs`` for its
    job server (``http://host:port``); ``temp`` is its temp dir (session logs below it)."""

    gcs: str
    jobs: str
    temp: Path

    def log_excerpt(self, limit: int = 60) -> str:
        """The lines of the head's raylet and worker logs that say why a process died."""
        logs = Path(self.temp, "session_latest", "logs")
        lines = [
            f"{path.name}: {line.strip()}"
            for path in sorted(logs.glob("*.out")) + sorted(logs.glob("*.err"))
            for line in path.read_text(errors="replace").splitlines()
            if any(w in line for w in ("died", "kill", "Killed", "memory", "Error", "error"))
        ]
        return "\n".join(lines[-limit:]) or f"(nothing about deaths under {logs})"


@pytest.fixture(scope="session")
def ray_head() -> Iterator[RayHead]:
    """A real Ray head on 127.0.0.1 with its dashboard (the job server).

    ``ray start`` runs in a session of its own, and every daemon it starts stays in its process
    group; the group is ended afterwards (what ``ray stop`` does, without touching other Ray
    instances on the machine).
    """
    ray = str(Path(sys.executable).parent / "ray")
    env = os.environ | {
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_AUTH_MODE": "disabled",  # drivers that join it (the UI test's campaign) hold no token
        "OMP_NUM_THREADS": "1",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",  # jobs' python
    }

    def start() -> tuple[subprocess.Popen, RayHead]:
        port, dashboard = unused_port(), unused_port()
        # Every port of its own: Ray's fixed defaults (dashboard agent 52365, client server
        # 10001) may be taken by another Ray runtime on the machine, and a head whose dashboard
        # agent cannot listen never accepts jobs ("No available agent to submit job").
        own_ports = [
            f"--{flag}={unused_port()}"
            for flag in ("dashboard-agent-listen-port", "dashboard-agent-grpc-port",
                         "runtime-env-agent-port", "metrics-export-port",
                         "ray-client-server-port")
        ]  # fmt: skip
        # Short: Ray's unix sockets live below it, and AF_UNIX paths are limited to 107 bytes
        # (pytest's tmp paths under xdist are too long).
        temp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
        cmd = [ray, "start", "--head", f"--port={port}", "--node-ip-address=127.0.0.1",
               "--include-dashboard=true", "--dashboard-host=127.0.0.1",
               f"--dashboard-port={dashboard}", "--num-cpus=2", f"--temp-dir={temp}",
               "--disable-usage-stats", *own_ports]  # fmt: skip
        proc = subprocess.Popen(cmd, env=env, start_new_session=True, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)  # fmt: skip
        out, _ = proc.communicate(timeout=240)
        if proc.returncode != 0:
            stop_group(proc.pid)
            shutil.rmtree(temp, ignore_errors=True)
            start_failed(out, "ray start")
        return proc, RayHead(f"127.0.0.1:{port}", f"http://127.0.0.1:{dashboard}", Path(temp))

    proc, head = on_free_ports(start)
    try:
        yield head
    finally:
        stop_group(proc.pid)
        shutil.rmtree(head.temp, ignore_errors=True)


def stop_group(pgid: int, grace_s: float = 10.0) -> None:
    """SIGTERM the process group, then SIGKILL whatever is left of it after ``grace_s``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.2)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[str]:
    """``pdeladder flows serve`` on a free port with a fresh local server; yields the UI URL."""
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env |= {"PREFECT_HOME": str(tmp_path / "prefect"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    cli = str(Path(sys.executable).parent / "pdeladder")

    def start() -> tuple[subprocess.Popen, threading.Thread, str]:
        proc = subprocess.Popen(
            [cli, "flows", "serve", "--port", str(unused_port())],
            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True,
        )  # fmt: skip
        lines: queue.Queue[str] = queue.Queue()
        reader = threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True)
        reader.start()
        deadline, seen = time.monotonic() + 400, []
        try:
            while time.monotonic() < deadline and proc.poll() is None:
                try:
                    seen.append(lines.get(timeout=1))
                except queue.Empty:
                    continue
                if seen[-1].startswith("Prefect UI: "):
                    return proc, reader, seen[-1].removeprefix("Prefect UI: ").strip()
        except BaseException:
            stop(proc, reader)
            raise
        stop(proc, reader)
        seen.extend(lines.queue)
        start_failed("".join(seen), "flows serve (no UI address printed)")

    def stop(proc: subprocess.Popen, reader: threading.Thread) -> None:
        proc.send_signal(signal.SIGTERM)  # serve stops its server itself
        try:
            proc.wait(timeout=60)
        finally:
            stop_group(proc.pid)  # flow-run processes and their Ray runtime, if any are left
            reader.join(timeout=10)
            proc.stdout.close()

    proc, reader, url = on_free_ports(start)
    try:
        yield url
    finally:
        stop(proc, reader)
