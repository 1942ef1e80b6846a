"""A group's size is bounded (issue 32, item 3): asked of require_group or grow_group, or read
from a store whose attributes or arrays say more than ``format.MAX_SAMPLES`` samples, it is one
line naming it, never an allocation of the size asked (1e12 samples asked 931 GiB)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pdeladder.dataset.format import MAX_SAMPLES
from pdeladder.dataset.store import open_store
from pdeladder.errors import FormatError, UserInputError

from .conftest import GRID, HEAT, array_sample

EXE = Path(sys.executable).with_name("pdeladder")
HUGE = 10**12


def small_group(url: str):
    g = open_store(url, "a").require_group("s", HEAT, GRID, n_samples=2)
    for i in range(2):
        g.write(i, array_sample(GRID, i))
    return g


def test_require_and_grow_refuse_more_samples_than_a_group_may_hold(tmp_path: Path):
    store = open_store(str(tmp_path / "s.zarr"), "a")
    for n in (MAX_SAMPLES + 1, HUGE):
        with pytest.raises(UserInputError, match=r"n_samples must be in 1\.\.10_000_000, got"):
            store.require_group("s", HEAT, GRID, n_samples=n)
    assert store.groups() == []  # nothing made
    g = store.require_group("s", HEAT, GRID, n_samples=MAX_SAMPLES)  # the bound itself: made
    assert g.n_samples == MAX_SAMPLES
    small = store.require_group("t", HEAT, GRID, n_samples=2)
    with pytest.raises(UserInputError, match="n_samples must be in"):
        store.grow_group(small.path, HUGE)
    assert store.group(small.path).n_samples == 2


def _tamper(url: str, path: str, *, attribute: bool, arrays: bool) -> None:
    """Make the group at ``path`` say it holds HUGE samples: in its ``n_samples`` attribute
    and/or the sample axis of its per-sample arrays' metadata (no chunk written)."""
    root = Path(url, path)
    if attribute:
        meta = json.loads((root / "zarr.json").read_text())
        meta["attributes"]["n_samples"] = HUGE
        (root / "zarr.json").write_text(json.dumps(meta))
    if arrays:
        for array in root.glob("*/zarr.json"):
            meta = json.loads(array.read_text())
            if meta.get("dimension_names", [None])[0] == "sample":
                meta["shape"][0] = HUGE
                array.write_text(json.dumps(meta))


@pytest.mark.parametrize(
    ("attribute", "arrays", "said"),
    [
        (True, False, "attribute 'n_samples' is 1000000000000, outside 1..10000000"),
        (False, True, "its status array holds 1000000000000 samples, more than a group may"),
        (True, True, "attribute 'n_samples' is 1000000000000"),
    ],
    ids=["attribute", "arrays", "both"],
)
def test_a_store_saying_1e12_samples_is_one_line(tmp_path: Path, attribute, arrays, said):
    url = str(tmp_path / "s.zarr")
    path = small_group(url).path
    _tamper(url, path, attribute=attribute, arrays=arrays)
    with pytest.raises(FormatError, match=said):
        open_store(url).group(path).status()
    for args in (["inspect", url], ["export", url, "--format", "pdebench", "--out", "e"]):
        proc = subprocess.run(
            [EXE, "store", *args], capture_output=True, text=True, timeout=300, cwd=tmp_path
        )
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-2000:]
        assert said in lines[0] and path in lines[0]
    assert not (tmp_path / "e").exists()
    verify = subprocess.run([EXE, "store", "verify", url], capture_output=True, text=True)
    assert verify.returncode == 1 and "1000000000000" in verify.stdout.replace("\n", "")


def test_a_store_saying_a_sample_of_1e18_points_is_one_line(tmp_path: Path):
    """A group's resolution attribute tampered to 10^6 in 3D (10^18 points per snapshot): every
    command that opens it says so in one line, exit 2, and nothing is allocated or exported."""
    url = str(tmp_path / "s.zarr")
    path = small_group(url).path
    meta_file = Path(url, path, "zarr.json")
    meta = json.loads(meta_file.read_text())
    meta["attributes"].update(dim=3, resolution=10**6)
    meta_file.write_text(json.dumps(meta))
    for args in (["inspect", url], ["export", url, "--format", "pdebench", "--out", "e"]):
        proc = subprocess.run(
            [EXE, "store", *args], capture_output=True, text=True, timeout=300, cwd=tmp_path
        )
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-2000:]
        assert "more than one sample may hold" in lines[0]
    assert not (tmp_path / "e").exists()
