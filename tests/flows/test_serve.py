"""``pdeladder flows serve`` fails with one line and a non-zero exit when it cannot deploy."""

import os
import subprocess
import sys
from pathlib import Path


def test_serve_without_a_reachable_server_exits_non_zero(tmp_path: Path, free_port: int):
    env = os.environ | {
        "PREFECT_API_URL": f"http://127.0.0.1:{free_port}/api",
        "PREFECT_HOME": str(tmp_path),
    }
    cli = Path(sys.executable).parent / "pdeladder"
    proc = subprocess.run(
        [cli, "flows", "serve"], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 2
    assert "no Prefect server at" in proc.stderr and str(free_port) in proc.stderr
    assert "Traceback" not in proc.stderr
