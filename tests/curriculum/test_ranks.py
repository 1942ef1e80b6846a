"""Samples on K ranks in a curriculum: ``ranks_per_sample``, the memory model that picks K for
``auto``, and gangs of K MPI ranks materialized through the local Ray runtime (2 CPUs)."""

import json
import os
import signal
import threading
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from pdeladder.cli import app
from pdeladder.curriculum import ProgressEvent, materialize, parse_curriculum, plan_stage
from pdeladder.curriculum.cost import (
    Calibration,
    CompressionCalibration,
    CostModel,
    MemoryCalibration,
    human_time,
)
from pdeladder.dataset.format import COMPRESSIONS, OK
from pdeladder.dataset.store import open_store
from pdeladder.dataset.verify import verify
from pdeladder.errors import CurriculumError, UserInputError
from pdeladder.solvers import get_family

SPEC = """\
name: gang
seed: 7
generation:
  memory_budget_gb: {budget}
stages:
  - name: s0
    families:
      - family: heat
        dims: [2]
        resolutions: [17]
        snapshots: 5
        samples: 3
        ranks_per_sample: {ranks}
      - family: heat
        dims: [1]
        resolutions: [9]
        snapshots: 5
        samples: 2
"""
GANG = "s0/heat/2d_n17_t5"
#: across K a sample equals the serial one within this fraction of its largest magnitude
#: (docs/curriculum.md, "One sample on K ranks"; tests/curriculum/test_slab_solve.py)
BOUND = 1e-6


def seed_cache(cache: Path) -> None:
    """Calibrations of heat 2D and 1D chosen so that 1 rank needs about 390 MB of a 2D sample,
    2 ranks about 245 MB each (the plumbing is tested here; the measurement in test_plan)."""
    cm = CostModel(cache)
    entries = {}
    for dim in (1, 2):
        cal = Calibration("heat", dim, 1.0, 1.0, 0.0, 0.0, 1e-6, "seeded by the test")
        mem = MemoryCalibration("heat", dim, 100e6, 0.0, 1e6 if dim == 2 else 1.0, "seeded")
        entries[cm._key("heat", dim)] = asdict(cal)
        entries[cm._key("heat", dim) + "|memory"] = asdict(mem)
        ratios = CompressionCalibration("heat", dim, dict.fromkeys(COMPRESSIONS, 1.0), "seeded")
        entries[cm._key("heat", dim) + "|compression"] = asdict(ratios)
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(entries))


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    path = tmp_path / "xdg/pdeladder/cost-model.json"
    seed_cache(path)
    return path


@pytest.mark.parametrize(
    ("ranks", "budget", "words"),
    [
        (17, 1, "ranks_per_sample 17 exceeds the 16 cells along x"),
        (0, 1, "ranks_per_sample must be at least 1"),
        ('"auto"', "null", "needs generation.memory_budget_gb"),
        ('"many"', 1, "ranks_per_sample"),
    ],
)
def test_bad_ranks_per_sample_name_the_field(ranks: object, budget: object, words: str) -> None:
    with pytest.raises(CurriculumError, match=words):
        parse_curriculum(SPEC.format(ranks=ranks, budget=budget))


def test_auto_picks_the_fewest_ranks_that_fit(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    cm = CostModel(cache)
    plan = plan_stage(parse_curriculum(SPEC.format(ranks="auto", budget=0.3)), "s0")
    gang, single = cm.resolve(plan, 0.3, cluster=False).groups
    assert (gang.ranks, single.ranks) == (2, 1)
    assert cm.per_rank_bytes(gang, 1) > 0.3 * 2**30 >= cm.per_rank_bytes(gang, 2)
    assert cm.resolve(plan, 0.5, cluster=False).groups[0].ranks == 1
    with pytest.raises(UserInputError, match="no K up to 2 whose per-rank memory fits"):
        cm.resolve(plan, 0.1, cluster=False)
    assert cm.resolve(plan, 0.2, cluster=True).groups[0].ranks == 3  # beyond 2 cores


def test_ranks_above_the_cores_need_a_cluster(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    k = 3
    plan = plan_stage(parse_curriculum(SPEC.format(ranks=k, budget=1)), "s0")
    with pytest.raises(UserInputError, match=f"ranks_per_sample {k} exceeds the .* cores"):
        CostModel(cache).resolve(plan, 1, cluster=False)
    assert CostModel(cache).resolve(plan, 1, cluster=True).groups[0].ranks == k


def test_human_time() -> None:
    assert human_time(12.3) == "12.3 s"
    assert human_time(90) == "1.5 min"
    assert human_time(2 * 3600) == "2 h"
    assert human_time(3 * 86400) == "3 days"
    assert human_time(2 * 365.25 * 86400) == "2 years"


def test_plan_cli_shows_memory_ranks_and_refuses_unmet_budgets(cache: Path, tmp_path: Path) -> None:
    file = tmp_path / "c.yaml"
    file.write_text(SPEC.format(ranks="auto", budget=0.3))
    res = CliRunner().invoke(app, ["curriculum", "plan", str(file), "--json"])
    assert res.exit_code == 0, res.output
    gang, single = json.loads(res.stdout)["stages"][0]["groups"]
    assert (gang["ranks_per_sample"], single["ranks_per_sample"]) == (2, 1)
    assert gang["memory_per_sample_bytes"] == pytest.approx(100e6 + 289e6 + 5 * 289 * 4)
    assert gang["memory_per_rank_bytes"] < 0.3 * 2**30 < gang["memory_per_sample_bytes"]
    assert gang["larger_than_node"] is False
    res = CliRunner().invoke(app, ["curriculum", "plan", str(file)])
    assert res.exit_code == 0, res.output
    assert "ranks" in res.output and "memory" in res.output
    file.write_text(SPEC.format(ranks="auto", budget=0.1))
    res = CliRunner().invoke(app, ["curriculum", "plan", str(file)])
    # UserInputError: `pdeladder` (errors.exit_on_error) prints it as one line, exit code 2
    assert isinstance(res.exception, UserInputError) and "\n" not in str(res.exception)
    assert "no K up to" in str(res.exception)


def test_materialize_refuses_an_unmet_budget_writing_nothing(cache: Path, tmp_path: Path) -> None:
    url = tmp_path / "store.zarr"
    with pytest.raises(UserInputError, match="no K up to"):
        materialize(parse_curriculum(SPEC.format(ranks="auto", budget=0.1)), store_url=str(url))
    assert not url.exists()


class RankKiller:
    """Sends SIGKILL, once, to the first rank of a slab solve it sees (a real process)."""

    def __init__(self) -> None:
        self.killed: list[int] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        while not self.stop.is_set() and not self.killed:
            for pid in os.listdir("/proc"):
                if not pid.isdigit():
                    continue
                try:
                    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                except OSError:
                    continue
                if argv[1:3] == [b"-m", b"pdeladder.curriculum.slab_solve"]:
                    os.kill(int(pid), signal.SIGKILL)
                    self.killed.append(int(pid))
                    break
            self.stop.wait(0.05)

    def close(self) -> None:
        self.stop.set()
        self.thread.join()


def test_two_rank_gangs_materialize_retry_a_killed_rank_resume_and_verify(
    ray_local: None, cache: Path, tmp_path: Path
) -> None:
    spec = parse_curriculum(SPEC.format(ranks="auto", budget=0.3))
    url = str(tmp_path / "store.zarr")
    killer = RankKiller()
    events: list[ProgressEvent] = []
    try:
        summary = materialize(spec, store_url=url, workers=2, on_progress=events.append)
    finally:
        killer.close()
    assert killer.killed, "no rank was seen to kill"
    assert (summary.ok, summary.failed) == (5, 0)  # the killed rank's sample was retried
    verify(url)
    group = open_store(url).group(GANG)
    assert group.attrs["ranks_per_sample"] == 2
    plan = plan_stage(spec, "s0").groups[0]
    fam = get_family("heat")
    first = group.array("fields")[...]
    for i in range(plan.n):
        info = group.info(i)
        provenance = info["provenance"]
        provenance = json.loads(provenance) if isinstance(provenance, str) else provenance
        assert provenance["ranks"] == 2
        s = plan.sample(i)
        serial = fam.run(fam.Params(**s.params), s.grid, s.seed).fields
        err = np.abs(group.read(i) - serial).max() / np.abs(serial).max()
        assert err <= BOUND, (i, err)
    # a driver killed with a sample in flight leaves it missing; a rerun solves just that one
    open_store(url, mode="a").group(GANG).discard(1)
    again = materialize(spec, store_url=url, workers=2)
    assert (again.ok, again.skipped) == (1, 4)
    group = open_store(url).group(GANG)
    assert (group.status() == OK).all()
    np.testing.assert_array_equal(group.array("fields")[...], first)  # bitwise for a given K
    verify(url)
