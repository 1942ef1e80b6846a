"""Materializing stages on a real local Ray runtime into real Zarr stores on disk."""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from pdeladder.curriculum import ProgressEvent, materialize, parse_curriculum, plan_stage
from pdeladder.curriculum.lock import StageLock
from pdeladder.curriculum.worker import Solver, create_group
from pdeladder.dataset.format import FAILED, OK
from pdeladder.dataset.store import open_store
from pdeladder.errors import StoreError, UnknownNameError, UserInputError
from pdeladder.solvers import get_family

from ..conftest import alive

SPEC = """\
name: tiny
seed: 3
stages:
  - name: s0
    families:
      - family: heat
        dims: [1, 2]
        resolutions: [9]
        snapshots: 5
        samples: 6
        params:
          diffusivity: [0.005, 0.05]
      - family: darcy
        dims: [2]
        resolutions: [9]
        samples: 4
"""


def same_store(a: str, b: str) -> None:
    """The two stores hold bit-identical fields, parameters, seeds and statuses."""
    sa, sb = open_store(a), open_store(b)
    assert sa.groups() == sb.groups()
    for path in sa.groups():
        ga, gb = sa.group(path), sb.group(path)
        for name in ("status", "seed", "params", "checksum"):
            np.testing.assert_array_equal(ga.column(name), gb.column(name), err_msg=name)
        np.testing.assert_array_equal(ga.array("fields")[...], gb.array("fields")[...])


@pytest.fixture(scope="module")
def reference(ray_local: None, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list]:
    """An uninterrupted run, and the progress events it sent."""
    url = str(tmp_path_factory.mktemp("ref") / "store.zarr")
    events: list[ProgressEvent] = []
    summary = materialize(
        parse_curriculum(SPEC), store_url=url, workers=2, on_progress=events.append
    )
    assert (summary.ok, summary.failed, summary.skipped) == (16, 0, 0)
    return url, events


def test_samples_match_the_plan_bit_for_bit(reference: tuple[str, list]) -> None:
    url, events = reference
    store, plan = open_store(url), plan_stage(parse_curriculum(SPEC), "s0")
    assert store.groups() == sorted(g.path for g in plan.groups)
    for g in plan.groups:
        group = store.group(g.path)
        assert np.all(group.status() == OK)
        np.testing.assert_array_equal(group.params(), g.params)
        assert group.attrs["config_hash"] == g.config_hash
        fam = get_family(g.family)
        spec = g.sample(g.n - 1)  # the solver alone, in this process, gives the same bytes
        direct = fam.run(fam.Params(**spec.params), spec.grid, spec.seed)
        np.testing.assert_array_equal(group.read(g.n - 1), direct.fields)
    assert events[0].kind == "stage" and events[0].total == 16
    assert [e.done for e in events[1:]] == list(range(1, 17))
    assert events[-1].dof_steps > 0 and events[-1].dof_steps_per_s > 0
    assert not any(Path(url).parent.glob("*.lock"))  # the stage lock is released


def test_rerun_skips_recorded_samples(reference: tuple[str, list]) -> None:
    summary = materialize(parse_curriculum(SPEC), store_url=reference[0], workers=1)
    assert (summary.ok, summary.failed, summary.skipped) == (0, 0, 16)
    d = summary.to_dict()
    assert d["groups"][0]["skipped"] == 6 and "dof_steps_per_s" in d["groups"][0]


def test_killed_actor_is_restarted_and_its_sample_retried(
    reference: tuple[str, list], tmp_path: Path
) -> None:
    url, killed = str(tmp_path / "store.zarr"), []

    def kill_first_worker(event: ProgressEvent) -> None:
        if event.kind == "sample" and not killed:
            os.kill(event.pid, signal.SIGKILL)
            killed.append(event.pid)

    events: list[ProgressEvent] = []
    summary = materialize(
        parse_curriculum(SPEC),
        store_url=url,
        workers=2,
        on_progress=lambda e: (events.append(e), kill_first_worker(e)),
    )
    assert killed and (summary.ok, summary.failed) == (16, 0)
    # A result the killed actor sent before it died may still arrive after the kill; what
    # proves the restart is a third process beside the two first actors, and the killed one gone.
    pids = {e.pid for e in events if e.kind == "sample"}
    assert len(pids) >= 3 and not alive(killed[0])
    same_store(reference[0], url)


def test_recorded_failures_are_skipped_unless_retried(
    reference: tuple[str, list], tmp_path: Path
) -> None:
    spec, url = parse_curriculum(SPEC), str(tmp_path / "store.zarr")
    plan = plan_stage(spec, "s0").groups[0]
    store = open_store(url, mode="a")
    create_group(store, plan, spec.name)
    Solver(store).record_failure(plan.path, plan.sample(2), "diverged")
    summary = materialize(spec, store_url=url, workers=2)
    assert (summary.ok, summary.skipped) == (15, 1)
    group = open_store(url).group(plan.path)
    assert group.status()[2] == FAILED and group.info(2)["reason"] == "diverged"
    retried = materialize(spec, store_url=url, workers=2, retry_failed=True)
    assert (retried.ok, retried.skipped) == (1, 15)
    same_store(reference[0], url)


def test_second_run_on_a_held_stage_refuses(tmp_path: Path) -> None:
    url = str(tmp_path / "store.zarr")
    with StageLock(url, "s0"):
        with pytest.raises(StoreError, match=rf"stage 's0' of .* by pid {os.getpid()} on "):
            materialize(parse_curriculum(SPEC), store_url=url, workers=1)
    assert not list(tmp_path.glob("*.lock"))


def test_stale_locks_are_taken_over(tmp_path: Path) -> None:
    url = str(tmp_path / "store.zarr")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a pid that no longer runs
    lock = StageLock(url, "s0")
    Path(lock.path).write_text(
        f'{{"pid": {dead.pid}, "host": "{socket.gethostname()}", "started": 0, '
        f'"heartbeat": {time.time()}, "token": "x"}}'
    )
    with lock:
        assert lock.read()["pid"] == os.getpid()
    Path(lock.path).write_text(  # another host, silent for longer than stale_after
        '{"pid": 1, "host": "elsewhere", "started": 0, "heartbeat": 0, "token": "y"}'
    )
    with StageLock(url, "s0", stale_after=60) as taken:
        assert taken.read()["token"] == taken.token


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"store_url": "memory://x"}, UserInputError, "do not cross processes"),
        ({"store_url": None}, UserInputError, "names no store: pass --store"),
        ({"workers": 0}, UserInputError, "workers must be at least 1"),
        ({"stages": ["s9"]}, UnknownNameError, "no stage 's9'; available: s0"),
    ],
)
def test_bad_input_fails_before_writing(
    tmp_path: Path, kwargs: dict, error: type, words: str
) -> None:
    args = {"store_url": str(tmp_path / "store.zarr"), **kwargs}
    with pytest.raises(error, match=words):
        materialize(parse_curriculum(SPEC), **args)
    assert not list(tmp_path.iterdir())
