"""Starting Ray: the local runtime listens on loopback only (the real runtime, its sockets read
from /proc); a node that times out during start-up is started again (an injected fault)."""

import ipaddress
import os
from pathlib import Path

import pytest

from pdeladder import ray_runtime

from .conftest import process_tree, tcp_listeners


class FlakyStart:
    """``ray.init`` failing like a node whose raylet registered too late, ``failures`` times."""

    def __init__(self, failures: int, message: str):
        self.failures, self.message, self.calls, self.shutdowns = failures, message, 0, 0

    def init(self, **kwargs) -> None:
        self.calls += 1
        if self.calls <= self.failures:
            raise Exception(self.message)

    def shutdown(self) -> None:
        self.shutdowns += 1


TIMED_OUT = "The current node timed out during startup. This could happen because ..."


@pytest.fixture
def flaky(monkeypatch):
    import ray

    def make(failures: int, message: str = TIMED_OUT) -> FlakyStart:
        fake = FlakyStart(failures, message)
        monkeypatch.setattr(ray, "init", fake.init)
        monkeypatch.setattr(ray, "shutdown", fake.shutdown)
        return fake

    return make


def test_a_start_that_timed_out_is_tried_again(flaky):
    fake = flaky(ray_runtime.START_ATTEMPTS - 1)
    ray_runtime.ray_init(address="local")
    assert fake.calls == ray_runtime.START_ATTEMPTS
    assert fake.shutdowns == ray_runtime.START_ATTEMPTS - 1  # each failed start cleaned up


def test_gives_up_after_the_last_attempt(flaky):
    fake = flaky(ray_runtime.START_ATTEMPTS)
    with pytest.raises(Exception, match="timed out during startup"):
        ray_runtime.ray_init(address="local")
    assert fake.calls == ray_runtime.START_ATTEMPTS


def test_other_errors_are_not_retried(flaky):
    fake = flaky(1, "Could not find any running Ray instance")
    with pytest.raises(Exception, match="Could not find"):
        ray_runtime.ray_init(address="auto")
    assert fake.calls == 1


def test_the_local_runtime_listens_on_loopback_only(ray_local: None) -> None:
    import ray

    worker = ray.get(ray.remote(lambda: os.getpid()).remote())  # a worker process listens too
    host, port = ray.get_runtime_context().gcs_address.rsplit(":", 1)
    runtime = process_tree(os.getpid())  # the driver, this process, too
    assert host == "127.0.0.1" and worker in runtime
    listeners = tcp_listeners(runtime)
    assert (host, int(port)) in listeners  # the GCS, seen as listening
    assert len(tcp_listeners({worker})) >= 1
    assert {k for k in listeners if not ipaddress.ip_address(k[0]).is_loopback} == set()


def test_a_session_tells_its_start_and_when_ray_is_ready(flaky, monkeypatch) -> None:
    import ray

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    fake, lines = flaky(1), []  # a first start that timed out is inside the step
    with ray_runtime.ray_session(num_cpus=2, on_step=lines.append):
        assert fake.calls == 2 and len(lines) == 2  # told before the session's work
    assert lines[0] == "starting a local Ray runtime (2 CPUs) ..."
    assert lines[1].startswith("started Ray in ") and lines[1].endswith(" s")
    lines.clear()
    with ray_runtime.ray_session("10.0.0.1:6379", on_step=lines.append):
        pass
    assert lines[0] == "joining the Ray cluster at 10.0.0.1:6379 ..."
    assert lines[1].startswith("joined the Ray cluster at 10.0.0.1:6379 in ")


SPEC = """\
name: told
seed: 3
stages:
  - name: line
    families:
      - {family: heat, dims: [1], resolutions: [9], snapshots: 3, samples: 2}
"""


def test_materialize_shows_ray_as_a_step_on_stderr(ray_local: None, tmp_path: Path) -> None:
    """The command's stderr tells Ray's start before the first sample; stdout stays JSON."""
    import json
    import subprocess
    import sys

    import ray

    (tmp_path / "c.yaml").write_text(SPEC)
    address = ray.get_runtime_context().gcs_address  # joins the session's cluster
    exe = os.path.join(os.path.dirname(sys.executable), "pdeladder")
    args = ["curriculum", "materialize", "c.yaml", "--store", "s.zarr", "--workers", "1"]
    proc = subprocess.run(
        [exe, *args, "--address", address, "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["ok"] == 2
    told = [line for line in proc.stderr.splitlines() if line.startswith("join")]
    assert told[0] == f"joining the Ray cluster at {address} ..."
    assert told[1].startswith(f"joined the Ray cluster at {address} in ")


@pytest.mark.parametrize("scheme", ["", "ray://"])
def test_a_cluster_that_cannot_be_reached_is_one_line_naming_its_address(
    tmp_path: Path, scheme: str
) -> None:
    """A GCS or Ray Client address where nothing answers (a cluster gone, or never there): Ray
    would retry for minutes (GCS) or 30 s (Ray Client); the command says where, in one line,
    exit 2, at once (a flow run's failure names it too: the data campaign joins the same
    way)."""
    import socket
    import subprocess
    import sys

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        address = f"{scheme}127.0.0.1:{s.getsockname()[1]}"
    (tmp_path / "c.yaml").write_text(SPEC)
    exe = os.path.join(os.path.dirname(sys.executable), "pdeladder")
    proc = subprocess.run(
        [exe, "curriculum", "materialize", "c.yaml", "--store", "s.zarr", "--address", address],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: cannot reach the Ray cluster at {address}: "), proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "s.zarr").exists()  # refused before the store is made


def test_a_joined_cluster_that_stops_answering_is_lost_naming_its_address(monkeypatch) -> None:
    """What a driver's heartbeat checks: nothing while the joined address answers (or on a
    local runtime); once it does not, a ClusterLostError naming it, which a flow's retry
    condition does not retry (this process stays bound to the lost cluster)."""
    import socket

    from pdeladder.errors import ClusterLostError, ServiceError
    from pdeladder.flows.common import transient

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        address = f"127.0.0.1:{server.getsockname()[1]}"
        monkeypatch.setattr(ray_runtime, "_joined", address)
        ray_runtime.still_joined()  # it answers
    with pytest.raises(ClusterLostError, match=f"^lost the Ray cluster at {address}: "):
        ray_runtime.still_joined()
    monkeypatch.setattr(ray_runtime, "_joined", None)
    ray_runtime.still_joined()  # a local runtime: nothing to lose

    class State:
        def __init__(self, error: Exception):
            self.error = error

        def result(self, raise_on_failure: bool) -> Exception:
            return self.error

    assert not transient(None, None, State(ClusterLostError("lost")))
    assert transient(None, None, State(ServiceError("no Prefect server")))


def test_a_start_ends_the_agents_and_starting_workers_a_killed_run_left(tmp_path: Path) -> None:
    """Agents and not-yet-started workers whose raylet is gone are ended; an agent under a live
    raylet is not (processes named as Ray names them: injected leftovers)."""
    import contextlib
    import subprocess
    import sys
    import time

    worker = tmp_path / "ray" / "_private" / "workers" / "default_worker.py"
    worker.parent.mkdir(parents=True)
    worker.write_text("import time\ntime.sleep(600)\n")
    orphans = [
        subprocess.Popen(["bash", "-c", "exec -a ray::DashboardAgent sleep 600"]),
        subprocess.Popen([sys.executable, str(worker), "--node-ip-address=127.0.0.1"]),
    ]
    keeper = subprocess.Popen(
        ["bash", "-c", 'exec -a raylet bash -c "(exec -a ray::RuntimeEnvAgent sleep 600) & wait"']
    )
    try:
        deadline = time.monotonic() + 10
        while len(process_tree(keeper.pid)) < 2 or len(ray_runtime.orphans()) < 2:
            assert time.monotonic() < deadline, "the injected processes did not start"
            time.sleep(0.05)
        (kept,) = process_tree(keeper.pid) - {keeper.pid}
        assert {p.pid for p in orphans} <= set(ray_runtime.orphans())
        assert kept not in ray_runtime.orphans()  # its parent is a raylet
        assert {p.pid for p in orphans} <= set(ray_runtime.end_orphans())
        assert [p.wait(timeout=10) for p in orphans] == [-9, -9]
        assert keeper.poll() is None and Path(f"/proc/{kept}").exists()
    finally:
        for p in (*orphans, keeper):
            for pid in process_tree(p.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, 9)
            p.wait()
