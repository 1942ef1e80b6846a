"""The local Prefect server that `pdeladder demo` starts: a flow run's last log lines reach it
before it stops, so nothing is left to fail at exit ("Error logging to API" once ended every
demo)."""

import os
import subprocess
import sys

from .conftest import on_free_ports, start_failed, unused_port

SCRIPT = """
from prefect import flow, get_run_logger
from pdeladder.flows.server import prefect_api

@flow
def talk():
    for i in range(50):
        get_run_logger().info("line %d", i)

with prefect_api("127.0.0.1", int(__import__("sys").argv[1]), 120):
    talk()
"""


def test_last_logs_are_sent_before_the_local_server_stops(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env |= {"PREFECT_HOME": str(tmp_path), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}

    def run() -> subprocess.CompletedProcess:
        done = subprocess.run(
            [sys.executable, "-c", SCRIPT, str(unused_port())],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        if done.returncode != 0:
            start_failed(done.stdout + done.stderr, "the flow on a local server")
        return done

    done = on_free_ports(run)
    output = done.stdout + done.stderr
    assert "line 49" in output
    assert "Error logging to API" not in output
