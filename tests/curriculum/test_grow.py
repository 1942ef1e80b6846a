"""Growing a dataset (issue 37): raising a group's ``samples`` from 12 to 16 and materializing
again solves exactly the 4 new samples into the same group, leaves the first 12 bit for bit as
they were, and ends bit-identical to a store materialized at 16 at once, also after the driver
was killed (SIGKILL) half-way through the growth. Lowering ``samples``, or changing anything
else of a group, is refused in one line, exit 2, before Ray starts.

Real solves of tiny 1D heat groups (9 points, 5 snapshots) on the session's local Ray.
"""

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from pdeladder.curriculum import materialize, parse_curriculum, plan_stage
from pdeladder.dataset.format import OK
from pdeladder.dataset.store import open_store
from pdeladder.errors import UserInputError

from .killed import half_way

#: The installed console script, as a user runs it.
PDELADDER = os.path.join(os.path.dirname(sys.executable), "pdeladder")

SPEC = """\
name: growing
seed: 11
stages:
  - name: line
    families:
      - family: heat
        dims: [1]
        resolutions: [9]
        snapshots: 5
        samples: {n}
        design: {design}
        params:
          diffusivity: [{low}, 0.05]
"""
GROUP = "line/heat/1d_n9_t5"


def spec(n: int, design: str = "sobol", low: float = 0.005, seed: int = 11) -> str:
    text = SPEC.format(n=n, design=design, low=low)
    return text.replace("seed: 11", f"seed: {seed}")


def write(tmp_path: Path, name: str, text: str) -> Path:
    file = tmp_path / name
    file.write_text(text)
    return file


def sample_files(url: str, n: int) -> dict[str, bytes]:
    """Every chunk file of the group's per-sample arrays (fields and records) of samples
    ``0 .. n - 1``, by path (per-sample chunk keys start ``c.{index}.``)."""
    root = Path(url)
    out = {}
    for f in sorted((root / GROUP).rglob("c.*")):
        if f.parent.name not in ("t", "x", "y", "z") and int(f.name.split(".")[1]) < n:
            out[str(f.relative_to(root))] = f.read_bytes()
    return out


def same_group(a: str, b: str) -> None:
    """The two stores' groups hold bit-identical statuses, seeds, parameters and fields."""
    ga, gb = open_store(a).group(GROUP), open_store(b).group(GROUP)
    for name in ("status", "seed", "params", "checksum"):
        np.testing.assert_array_equal(ga.column(name), gb.column(name), err_msg=name)
    np.testing.assert_array_equal(ga.array("fields")[...], gb.array("fields")[...])


def test_the_first_samples_of_a_plan_do_not_depend_on_its_count() -> None:
    small = plan_stage(parse_curriculum(spec(12)), "line").groups[0]
    large = plan_stage(parse_curriculum(spec(16)), "line").groups[0]
    np.testing.assert_array_equal(small.params, large.params[:12])
    np.testing.assert_array_equal(small.seeds, large.seeds[:12])
    assert small.config_hash != large.config_hash  # the hash holds the count ...
    assert large.hash_at(12) == small.config_hash  # ... and tells the same configuration
    assert small.prefix_stable and large.prefix_stable
    # a Latin hypercube depends on its count: why growing one is refused
    lhs = [plan_stage(parse_curriculum(spec(n, "latin_hypercube")), "line") for n in (12, 16)]
    assert not np.array_equal(lhs[0].groups[0].params, lhs[1].groups[0].params[:12])
    assert not lhs[1].groups[0].prefix_stable


@pytest.fixture(scope="module")
def grown(ray_local: None, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A store materialized at 12 then grown to 16, and one materialized at 16 at once."""
    tmp = tmp_path_factory.mktemp("grow")
    url, reference = str(tmp / "grown.zarr"), str(tmp / "reference.zarr")
    first = materialize(parse_curriculum(spec(12)), store_url=url, workers=2)
    assert (first.ok, first.failed) == (12, 0)
    before = sample_files(url, 12)
    events: list = []
    second = materialize(
        parse_curriculum(spec(16)), store_url=url, workers=2, on_progress=events.append
    )
    full = materialize(parse_curriculum(spec(16)), store_url=reference, workers=2)
    assert (full.ok, full.failed) == (16, 0)
    return {"url": url, "reference": reference, "before": before, "run": second, "events": events}


def test_growth_solves_only_the_new_samples(grown: dict) -> None:
    run = grown["run"]
    assert (run.ok, run.skipped, run.failed) == (4, 12, 0)
    solved = sorted(e.index for e in grown["events"] if e.kind == "sample")
    assert solved == [12, 13, 14, 15]
    group = open_store(grown["url"]).group(GROUP)
    assert group.attrs["n_samples"] == 16 and group.n_samples == 16
    assert group.status().tolist() == [OK] * 16
    plan = plan_stage(parse_curriculum(spec(16)), "line").groups[0]
    assert group.attrs["config_hash"] == plan.config_hash  # a rerun at 16 reopens it as is


def test_the_first_samples_keep_their_bytes(grown: dict) -> None:
    before = grown["before"]
    assert len(before) >= 4 * 12  # fields, status, record, provenance of each sample at least
    assert sample_files(grown["url"], 12) == before
    same_group(grown["url"], grown["reference"])  # as if it had been 16 from the start


def test_a_grown_store_verifies_clean(grown: dict) -> None:
    proc = subprocess.run(
        [PDELADDER, "store", "verify", grown["url"]], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_rerun_after_growth_solves_nothing(grown: dict) -> None:
    again = materialize(parse_curriculum(spec(16)), store_url=grown["url"], workers=1)
    assert (again.ok, again.skipped) == (0, 16)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"n": 12}, "holds 16 samples and the plan asks for 12; a store never drops samples"),
        ({"n": 16, "low": 0.01}, "another configuration (config_hash"),
        ({"n": 16, "low": 0.01}, "parameter values of diffusivity"),
        ({"n": 16, "seed": 12}, "seeds: the curriculum's seed"),
    ],
)
def test_other_changes_are_refused_before_ray(
    grown: dict, refused, tmp_path: Path, change: dict, words: str
) -> None:
    """One line, exit 2, naming what differs and the ways forward; before Ray: the command is
    given an address where no Ray runs, which it would fail to reach first."""
    file = write(tmp_path, "c.yaml", spec(**change))
    before = sample_files(grown["url"], 16)
    t0 = time.monotonic()
    line = refused(
        "curriculum", "materialize", file, "--store", grown["url"], "--address", "127.0.0.1:9"
    )
    elapsed = time.monotonic() - t0
    assert words in line, line
    assert "new stage name" in line and "new store (--store URL)" in line and "--stage" in line
    assert elapsed < 60, elapsed  # Ray's start alone takes longer on these machines
    assert sample_files(grown["url"], 16) == before


def test_growing_a_latin_hypercube_is_refused(ray_local: None, tmp_path: Path) -> None:
    url = str(tmp_path / "lhs.zarr")
    materialize(parse_curriculum(spec(4, "latin_hypercube")), store_url=url, workers=2)
    before = sample_files(url, 4)
    with pytest.raises(UserInputError, match="latin_hypercube design depends on the count"):
        materialize(parse_curriculum(spec(6, "latin_hypercube")), store_url=url, workers=2)
    assert open_store(url).group(GROUP).n_samples == 4 and sample_files(url, 4) == before


HALF = 14


def test_a_growth_killed_half_way_resumes_bit_identical(grown: dict, tmp_path: Path) -> None:
    url = str(tmp_path / "killed.zarr")
    assert materialize(parse_curriculum(spec(12)), store_url=url, workers=2).ok == 12
    before = sample_files(url, 12)
    file = write(tmp_path, "c16.yaml", spec(16))
    with half_way(file, url, GROUP, HALF, timeout=300):
        pass
    status = open_store(url).group(GROUP).status()
    assert len(status) == 16 and np.flatnonzero(status == OK).tolist() == list(range(HALF))

    resumed = materialize(parse_curriculum(spec(16)), store_url=url, workers=2)
    assert (resumed.ok, resumed.skipped, resumed.failed) == (16 - HALF, HALF, 0)
    assert sample_files(url, 12) == before
    same_group(url, grown["reference"])
