"""Loopback only unless configured: the real commands, their sockets read from /proc while they
run. A K-rank solve, ``flows serve`` (and a killed one leaves no server holding its port), and,
run alone (serial), a campaign: a materialize with a 2-rank gang, a training on 2 Ray Train
workers and a 2-rank predict; and a killed train's leftovers."""

import ipaddress
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest

from pdeladder import network, ray_runtime
from pdeladder.errors import UserInputError

from .conftest import alive, process_tree, tcp_listeners

PDELADDER = os.path.join(os.path.dirname(sys.executable), "pdeladder")


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:120]
    except OSError:
        return "?"


def listeners(pids: set[int]) -> dict[tuple[str, int], str]:
    """(address, port) -> command line, of every TCP listener one of ``pids`` holds."""
    return {key: cmdline(pid) for key, pid in tcp_listeners(pids).items()}


class Watch:
    """The listeners and command lines seen in a process tree, sampled every 0.2 s."""

    def __init__(self, root: int):
        self.root, self.seen, self.commands = root, {}, set()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        while not self.stop.is_set():
            self.sample()
            self.stop.wait(0.2)

    def sample(self) -> None:
        pids = process_tree(self.root)
        self.commands |= {cmdline(p) for p in pids}
        for key, line in listeners(pids).items():
            self.seen.setdefault(key, line)

    def close(self) -> None:
        self.stop.set()
        self.thread.join()

    def outside_loopback(self) -> dict[tuple[str, int], str]:
        return {k: v for k, v in self.seen.items() if not ipaddress.ip_address(k[0]).is_loopback}

    def ran(self, words: str) -> bool:
        return any(words in c for c in self.commands)


def environment(tmp_path: Path) -> dict[str, str]:
    """A user's environment: no MPI or gloo settings of their own, caches in ``tmp_path``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UCX_", "GLOO_", "PDELADDER_"))}
    env.pop("PREFECT_API_URL", None)
    return env | {
        "XDG_CACHE_HOME": str(tmp_path / "xdg"),
        "PREFECT_HOME": str(tmp_path / "prefect"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "RAY_USAGE_STATS_ENABLED": "0",
        "OMP_NUM_THREADS": "1",
    }


def watched(args: list[str], env: dict[str, str], cwd: Path, timeout: float = 600) -> Watch:
    """Run ``pdeladder *args`` to its end, asserted to exit 0, watching its listeners."""
    proc = subprocess.Popen(
        [PDELADDER, *args], env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    watch = Watch(proc.pid)
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        watch.close()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out[-3000:]
    return watch


def assert_loopback_only(watch: Watch) -> None:
    outside = watch.outside_loopback()
    assert not outside, "listening outside loopback:\n" + "\n".join(
        f"{ip}:{port}  {line}" for (ip, port), line in sorted(outside.items())
    )


# --- the settings -------------------------------------------------------------------------------


def test_unset_mpi_settings_get_loopback_and_user_settings_are_kept() -> None:
    env: dict[str, str] = {}
    assert network.loopback_defaults(env) == {"UCX_NET_DEVICES": "lo", "UCX_TLS": "self,sm"}
    assert network.defaulted(env) == {"UCX_NET_DEVICES", "UCX_TLS"}
    assert network.loopback_defaults(env) == network.loopback_defaults(dict(env))  # idempotent
    user = {"UCX_NET_DEVICES": "eth0"}
    assert network.loopback_defaults(user) == {"UCX_NET_DEVICES": "eth0", "UCX_TLS": "self,sm"}
    assert network.defaulted(user) == {"UCX_TLS"}  # eth0 is the user's
    assert network.local_gloo_env({})["GLOO_SOCKET_IFNAME"] == "lo"
    assert network.local_gloo_env({"GLOO_SOCKET_IFNAME": "eth1"})["GLOO_SOCKET_IFNAME"] == "eth1"


def test_other_hosts_need_a_configured_interface(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("UCX_NET_DEVICES", "UCX_TLS", network.DEFAULTED):
        monkeypatch.delenv(name, raising=False)
    assert network.mpi_env(f"localhost:1,{socket.gethostname()}:1")["UCX_TLS"] == "self,sm"
    with pytest.raises(UserInputError, match="set UCX_NET_DEVICES"):
        network.mpi_env("node-a:2,node-b:2")
    monkeypatch.setenv("UCX_NET_DEVICES", "eth0")  # configured: UCX's transports on eth0
    env = network.mpi_env("node-a:2,node-b:2")
    assert (env["UCX_NET_DEVICES"], env["UCX_TLS"]) == ("eth0", "all")
    monkeypatch.setenv("UCX_TLS", "tcp")
    assert network.mpi_env("node-a:2,node-b:2")["UCX_TLS"] == "tcp"


def test_a_solve_across_hosts_without_an_interface_is_refused_in_one_line(tmp_path: Path) -> None:
    env_clean = {k: v for k, v in os.environ.items() if not k.startswith("UCX_")}
    line = subprocess.run(
        [PDELADDER, "solve", "heat", "--out", "s.zarr", "--resolution", "9", "--ranks", "2",
         "--hosts", "node-a:1,node-b:1"],
        cwd=tmp_path, env=env_clean, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert line.returncode == 2 and line.stderr.count("\n") == 1, line.stderr[-2000:]
    assert "UCX_NET_DEVICES" in line.stderr and not (tmp_path / "s.zarr").exists()


def test_importing_mpi_in_a_pdeladder_process_opens_no_listener(tmp_path: Path) -> None:
    """Before: UCX listened on the outward address and on 127.0.0.1 in every such process."""
    code = (
        "import os, sys, pdeladder\n"
        "from mpi4py import MPI\n"
        "print(os.environ['UCX_NET_DEVICES'], os.environ['UCX_TLS'])\n"
        "sys.stdout.flush(); sys.stdin.read()\n"  # held open while its sockets are read
    )

    def run(env: dict[str, str]) -> tuple[str, dict[tuple[str, int], str]]:
        proc = subprocess.Popen(
            [sys.executable, "-c", code], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        try:
            line = proc.stdout.readline().strip()
            return line, listeners({proc.pid})
        finally:
            proc.communicate("", timeout=60)

    env = environment(tmp_path)
    assert run(env) == ("lo self,sm", {})
    # a user's setting is kept: UCX's TCP transport on loopback listens there, and only there
    settings, found = run(env | {"UCX_TLS": "tcp,self"})
    assert settings == "lo tcp,self"
    assert found and all(ipaddress.ip_address(ip).is_loopback for ip, _ in found), found


@pytest.mark.mpi
def test_a_solve_on_two_ranks_listens_on_nothing_outside_loopback(tmp_path: Path) -> None:
    """Before: the driver and both ranks on the outward address (UCX), mpiexec on 0.0.0.0."""
    args = ["solve", "heat", "--out", "s.zarr", "--dim", "2", "--resolution", "9",
            "--snapshots", "3", "--ranks", "2", "--json"]  # fmt: skip
    watch = watched(args, environment(tmp_path), tmp_path)
    assert watch.ran("pdeladder.curriculum.slab_solve"), watch.commands  # the ranks were seen
    assert_loopback_only(watch)


# --- flows serve ----------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def serving(port: int, env: dict[str, str], cwd: Path) -> Iterator[tuple[subprocess.Popen, Watch]]:
    """``pdeladder flows serve --port PORT``, yielded once it printed its UI address; stopped
    (SIGTERM, then its process group killed) on exit unless it ended already."""
    proc = subprocess.Popen(
        [PDELADDER, "flows", "serve", "--port", str(port)], env=env, cwd=cwd,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True)
    reader.start()
    watch = Watch(proc.pid)
    try:
        seen, deadline = [], time.monotonic() + 400
        while not any(x.startswith("Prefect UI: ") for x in seen):
            assert proc.poll() is None and time.monotonic() < deadline, "".join(seen)[-3000:]
            try:
                seen.append(lines.get(timeout=1))
            except queue.Empty:
                continue
        time.sleep(1)  # the deployments are served
        watch.sample()
        yield proc, watch
    finally:
        watch.close()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # flow-run processes, if any are left
        except ProcessLookupError:
            pass
        proc.wait()
        reader.join(timeout=10)
        proc.stdout.close()


def gone(pids: set[int], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not [p for p in pids if alive(p)]:
            return True
        time.sleep(0.2)
    return False


def test_flows_serve_listens_on_loopback_and_a_killed_one_leaves_no_server(
    tmp_path: Path,
) -> None:
    """Before: ``flows serve`` on the outward address (UCX); after kill -9 its Prefect server
    lived on, holding the port, and the next ``flows serve`` failed with "already in use"."""
    env, port = environment(tmp_path), free_port()
    with serving(port, env, tmp_path) as (first, watch):
        assert ("127.0.0.1", port) in watch.seen, watch.seen  # the server, seen listening
        assert_loopback_only(watch)
        server = {p for p in process_tree(first.pid) if "prefect server start" in cmdline(p)}
        assert server, watch.commands
        first.kill()  # SIGKILL: no cleanup of its own
        first.wait()
        assert gone(server, timeout=30), f"the server outlived flows serve: {server}"
    with serving(port, env, tmp_path) as (second, watch):  # the port is free again
        assert ("127.0.0.1", port) in watch.seen
        assert second.poll() is None


# --- a campaign ---------------------------------------------------------------------------------

CAMPAIGN = """\
name: loopback
seed: 7
model: {width: 4, modes: 2, layers: 1}
stages:
  - name: s0
    families:
      - family: heat
        dims: [2]
        resolutions: [9]
        snapshots: 3
        samples: 4
        ranks_per_sample: 2
    training: {steps: 2, batch_size: 2}
"""


@pytest.mark.serial
@pytest.mark.mpi
def test_a_campaign_listens_on_nothing_outside_loopback(tmp_path: Path) -> None:
    """Materialize with 2-rank gangs, train on 2 Ray Train workers (gloo), predict on 2 ranks.
    Before: the driver, every solver actor and every rank on the outward address (UCX), each
    gang's mpiexec on 0.0.0.0, and rank 0's rendezvous store on [::]."""
    env = environment(tmp_path)
    (tmp_path / "c.yaml").write_text(CAMPAIGN)
    steps = {
        "materialize": ["curriculum", "materialize", "c.yaml", "--store", "s.zarr"],
        "train": ["train", "c.yaml", "--store", "s.zarr", "--workers", "2", "--run-dir", "run"],
        "predict": ["predict", "run/stages/s0/model", "--store", "s.zarr", "--out", "p.zarr",
                    "--domain-ranks", "2"],
    }  # fmt: skip
    evidence = {
        "materialize": "pdeladder.curriculum.slab_solve",
        "train": "RayTrainWorker",
        "predict": "pdeladder.trainer.predict",
    }
    for name, args in steps.items():
        # a step's listeners live as long as its ranks: a quick one (predict's 2 ranks on four
        # 9² samples) may end between two of the watcher's samples, so it runs again, into a
        # new output, until they are seen (at most 3 times); every run is on loopback only
        for attempt in range(3):
            if attempt:
                args = [*args[:-3], f"p{attempt}.zarr", *args[-2:]]  # predict's --out
            watch = watched(args, env, tmp_path)
            assert watch.ran(evidence[name]), (name, sorted(watch.commands))
            assert_loopback_only(watch)
            if watch.seen or name != "predict":
                break
        assert watch.seen, name  # Ray's and gloo's listeners were seen, on loopback


@pytest.mark.serial
def test_a_train_killed_by_sigkill_leaves_rays_agents_until_the_next_start(
    tmp_path: Path,
) -> None:
    """What a ``train`` killed with SIGKILL leaves: Ray's daemons that it started die with it
    (Ray's own fate sharing), its workers and actors within seconds; the raylet's dashboard and
    runtime-env agents would live on for about a minute (measured: 60-62 s, Ray's liveness
    check), and a worker still starting until it tries to reach its raylet: the next start ends
    them (``ray_runtime.end_orphans``) and runs to its end."""
    env = environment(tmp_path)
    (tmp_path / "c.yaml").write_text(CAMPAIGN)
    watched(["curriculum", "materialize", "c.yaml", "--store", "s.zarr"], env, tmp_path)
    (tmp_path / "long.yaml").write_text(CAMPAIGN.replace("steps: 2,", "steps: 100000,"))
    args = ["train", "long.yaml", "--store", "s.zarr", "--workers", "2", "--run-dir", "long",
            "--checkpoint-every", "1000000"]  # fmt: skip
    first = subprocess.Popen([PDELADDER, *args], env=env, cwd=tmp_path, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 400
    while not any("RayTrainWorker" in cmdline(p) for p in process_tree(first.pid)):
        assert first.poll() is None and time.monotonic() < deadline, "no Ray Train worker started"
        time.sleep(0.5)
    left = {p: cmdline(p) for p in process_tree(first.pid) - {first.pid}}
    starting = {p for p in left if ray_runtime.RAY_WORKER in ray_runtime._proc(p, "cmdline")}
    first.kill()
    first.wait()
    killed = time.monotonic()
    agents = {p for p, line in left.items() if line.startswith(ray_runtime.RAY_AGENTS)}
    assert agents, sorted(left.values())
    running = set(left) - agents - starting
    assert gone(running, timeout=20), {p: cmdline(p) for p in running if alive(p)}
    again = ["train", "c.yaml", "--store", "s.zarr", "--workers", "2", "--run-dir", "again"]
    with ThreadPoolExecutor(1) as pool:
        run = pool.submit(watched, again, env, tmp_path)
        lingering = agents | starting
        assert gone(lingering, timeout=30), {p: cmdline(p) for p in lingering if alive(p)}
        assert time.monotonic() - killed < 50  # ended by the start, before Ray's own minute
        watch = run.result()
    assert watch.ran("RayTrainWorker")
    assert_loopback_only(watch)
