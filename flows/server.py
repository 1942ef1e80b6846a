"""The Prefect API the commands use: the configured one (``PREFECT_API_URL``), or a local server
(API and UI, SQLite under ``PREFECT_HOME``) started for the command's duration.

The local server is ``prefect server start`` as a child process bound to 127.0.0.1 by default;
it is ready once ``/api/health`` answers.
"""

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext

import httpx

from pdeladder.errors import ServiceError
from pdeladder.processes import tied


def wait_healthy(api_url: str, timeout_s: float, proc: subprocess.Popen | None = None) -> None:
    """Poll ``{api_url}/health`` until it answers, the process exits, or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise ServiceError(f"the Prefect server exited with code {proc.returncode}")
        try:
            if httpx.get(f"{api_url}/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise ServiceError(f"no Prefect server answered at {api_url} within {timeout_s:g} s")


@contextmanager
def local_server(
    host: str = "127.0.0.1", port: int = 4200, timeout_s: float = 300
) -> Iterator[str]:
    """Start ``prefect server start --host HOST --port PORT``; yield its API URL; stop it on exit.

    The server ends with this process, however it ends (Linux: :func:`pdeladder.processes.tied`,
    which ties it to the calling thread, so call this from the thread that outlives its use).
    The server's log goes to a temporary file whose tail is shown if the start fails.
    """
    api_url = f"http://{host}:{port}/api"
    try:
        httpx.get(f"{api_url}/health", timeout=1)
    except httpx.TransportError:
        pass
    else:
        raise ServiceError(f"port {port} on {host} is already in use; pass another --port")
    env = os.environ | {
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_UI_API_URL": api_url,  # the UI's pages call this API (default: port 4200)
    }
    env.pop("PREFECT_API_URL", None)
    cmd = [sys.executable, "-m", "prefect", "server", "start", "--host", host, "--port", str(port)]
    with tempfile.TemporaryFile("w+") as log:
        # A session of its own: a Ctrl-C meant for the caller must not stop the server before the
        # caller has finished with it; the server is stopped below, and tied to this process
        # (the kernel ends it when this process dies, by SIGKILL too: else it lives on holding
        # the port, and the next start fails).
        proc = subprocess.Popen(
            tied(cmd), stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        try:
            try:
                wait_healthy(api_url, timeout_s, proc)
            except ServiceError as err:
                log.seek(0)
                tail = " | ".join(log.read().strip().splitlines()[-3:])
                raise ServiceError(f"{err}: {tail}") from None
            yield api_url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@contextmanager
def prefect_api(host: str, port: int, timeout_s: float) -> Iterator[str]:
    """Yield the API URL of the configured server, or of a local one started on HOST:PORT (and
    stopped on exit). Flows run in this process and child processes report to it."""
    from prefect.client.orchestration import get_client
    from prefect.logging.handlers import APILogWorker
    from prefect.settings import PREFECT_API_URL, temporary_settings

    configured = os.environ.get("PREFECT_API_URL")
    with nullcontext(configured) if configured else local_server(host, port, timeout_s) as api_url:
        os.environ["PREFECT_API_URL"] = api_url
        with temporary_settings({PREFECT_API_URL: api_url}):
            with get_client(sync_client=True) as client:
                error = client.api_healthcheck()
            if error is not None:
                raise ServiceError(f"no Prefect server at {api_url}: {error}")
            try:
                yield api_url
            finally:  # the runs' last log lines, sent while their server still listens
                APILogWorker.drain_all(timeout=5)
