"""A ``pdeladder curriculum materialize`` driver to kill half-way, for the resume tests: its
solver actors never return from sample ``half`` on, so exactly samples ``0 .. half - 1`` (each
ahead of those in its actor's queue) are stored when the test kills it (:func:`half_way`)."""

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import ray

from pdeladder.dataset.format import OK
from pdeladder.dataset.store import open_store
from pdeladder.errors import StoreError


def hanging_driver(half: int) -> str:
    """The command line's entry point, with solver actors that hang from sample ``half`` on
    (the class is defined in ``__main__``, so Ray ships it to the actors by value); run it as
    ``python -c DRIVER curriculum materialize ...``."""
    return f"""\
import sys, time

import ray

from pdeladder.cli import main
from pdeladder.curriculum import generation, worker


class HangsFromHalf(worker.Solver):
    def solve(self, path, spec):
        if spec.index >= {half}:
            time.sleep(3600)  # until the test kills the driver, and with it this actor
        return super().solve(path, spec)


generation.solver_actor = lambda: ray.remote(num_cpus=1)(HangsFromHalf)
sys.argv[0] = "pdeladder"
main()
"""


def ok_count(url: str, group: str) -> int:
    """Samples of ``group`` stored ok so far (0 before the group exists)."""
    try:  # open the group by path: listing a store while it is written races its temporary files
        return int((open_store(url).group(group).status() == OK).sum())
    except StoreError:  # not created yet
        return 0


@contextmanager
def half_way(
    file: Path, url: str, group: str, half: int, timeout: float = 600
) -> Iterator[subprocess.Popen]:
    """Run the driver on curriculum ``file`` into ``url``, joined to the session's Ray cluster
    (its actors die with it), until ``half`` samples of ``group`` are stored; yield it, alive,
    then kill it with SIGKILL."""
    address = ray.get_runtime_context().gcs_address
    args = ["materialize", str(file), "--store", url, "--workers", "2", "--address", address]
    driver = subprocess.Popen(
        [sys.executable, "-c", hanging_driver(half), "curriculum", *args, "--json"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + timeout
        while ok_count(url, group) < half:
            assert driver.poll() is None, driver.stderr.read().decode()
            solved = ok_count(url, group)
            assert time.monotonic() < deadline, f"the driver solved {solved} in {timeout} s"
            time.sleep(0.05)
        yield driver
        os.kill(driver.pid, signal.SIGKILL)
    finally:
        driver.kill()
        driver.wait()
        driver.stderr.close()
