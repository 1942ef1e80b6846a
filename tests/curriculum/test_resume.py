"""A driver killed half-way (SIGKILL, real processes): the stage stays locked against a second
run while it lives, and a rerun completes it into fields bit-identical to an uninterrupted run.
The killed driver joins the session's Ray cluster (``--address``); its actors die with it.

Half-way is exact: the driver is `pdeladder curriculum materialize` with one injected fault, a
solver whose samples from index ``HALF`` on never return, so samples ``0 .. HALF - 1`` (each
ahead of those in its actor's queue) are stored and no other.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import ray

from pdeladder.curriculum import materialize, parse_curriculum
from pdeladder.dataset.format import OK
from pdeladder.dataset.store import open_store
from pdeladder.errors import StoreError

SPEC = """\
name: resumable
seed: 5
stages:
  - name: big
    families:
      - family: heat
        dims: [2]
        resolutions: [65]
        samples: 40
        params:
          diffusivity: {low: 0.002, high: 0.05, scale: log}
"""


GROUP = "big/heat/2d_n65_t11"
HALF = 20

#: The command line's entry point, with solver actors that hang from sample HALF on (the
#: class is defined in ``__main__``, so Ray ships it to the actors by value).
DRIVER = f"""\
import sys, time

import ray

from pdeladder.cli import main
from pdeladder.curriculum import generation, worker


class HangsFromHalf(worker.Solver):
    def solve(self, path, spec):
        if spec.index >= {HALF}:
            time.sleep(3600)  # until the test kills the driver, and with it this actor
        return super().solve(path, spec)


generation.solver_actor = lambda: ray.remote(num_cpus=1)(HangsFromHalf)
sys.argv[0] = "pdeladder"
main()
"""


def ok_count(url: str) -> int:
    try:  # open the group by path: listing a store while it is written races its temporary files
        return int((open_store(url).group(GROUP).status() == OK).sum())
    except StoreError:  # not created yet
        return 0


def test_sigkilled_driver_resumes_bit_identical(ray_local: None, tmp_path: Path) -> None:
    file = tmp_path / "c.yaml"
    file.write_text(SPEC)
    killed, reference = str(tmp_path / "killed.zarr"), str(tmp_path / "reference.zarr")
    cmd = [sys.executable, "-c", DRIVER, "curriculum", "materialize", str(file)]
    address = ray.get_runtime_context().gcs_address  # the driver joins the session's cluster
    driver = subprocess.Popen(
        [*cmd, "--store", killed, "--workers", "2", "--address", address, "--json"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 600
        while ok_count(killed) < HALF:
            assert driver.poll() is None, driver.stderr.read().decode()
            assert time.monotonic() < deadline, f"the driver solved {ok_count(killed)} in 600 s"
            time.sleep(0.05)
        with pytest.raises(StoreError, match=rf"being materialized by pid {driver.pid} "):
            materialize(parse_curriculum(SPEC), store_url=killed, workers=1)
        os.kill(driver.pid, signal.SIGKILL)
    finally:
        driver.kill()
        driver.wait()
        driver.stderr.close()
    status = open_store(killed).group(GROUP).status()
    assert np.flatnonzero(status == OK).tolist() == list(range(HALF))

    resumed = materialize(parse_curriculum(SPEC), store_url=killed, workers=2)
    assert (resumed.ok, resumed.skipped, resumed.failed) == (40 - HALF, HALF, 0)
    full = materialize(parse_curriculum(SPEC), store_url=reference, workers=2)
    assert full.ok == 40
    a, b = open_store(killed).group(GROUP), open_store(reference).group(GROUP)
    for name in ("status", "seed", "params", "checksum"):
        np.testing.assert_array_equal(a.column(name), b.column(name), err_msg=name)
    np.testing.assert_array_equal(a.array("fields")[...], b.array("fields")[...])
