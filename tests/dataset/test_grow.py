"""Growing a fixed-size group (``Store.grow_group``): the samples it holds keep their bytes, the
new ones are missing, a growth cut short between its steps is completed by the next call, and
a group never shrinks."""

from pathlib import Path

import numpy as np
import pytest

from pdeladder.dataset import format as fmt
from pdeladder.dataset.format import MISSING, OK
from pdeladder.dataset.store import open_store
from pdeladder.dataset.verify import verify
from pdeladder.errors import StoreError

from .conftest import GRID, HEAT, array_sample

PATH = fmt.group_path("s0", "heat", GRID.dim, GRID.resolution, GRID.snapshots)


def sample_files(root: Path, n: int) -> dict[str, bytes]:
    """Every chunk file of the group's per-sample arrays for samples ``0 .. n - 1``, by its
    path: per-sample chunk keys start ``c.{index}.``."""
    out = {}
    for f in sorted((root / PATH).rglob("c.*")):
        if int(f.name.split(".")[1]) < n and f.parent.name not in ("t", "x", "y", "z"):
            out[str(f.relative_to(root))] = f.read_bytes()
    return out


def written_group(url: str, n: int = 3):
    store = open_store(url, mode="a", check_writable=True)
    group = store.require_group("s0", HEAT, GRID, n_samples=n, attrs={"config_hash": "h3"})
    for i in range(n):
        group.write(i, array_sample(GRID, seed=i))
    return store


def test_growth_keeps_the_samples_and_adds_missing_ones(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    store = written_group(url)
    before = sample_files(tmp_path / "store", 3)
    assert len(before) >= 4 * 3  # fields, status, record, reason/provenance chunks of 3 samples

    grown = store.grow_group(PATH, 5, {"config_hash": "h5"})
    assert grown.attrs["n_samples"] == 5 and grown.attrs["config_hash"] == "h5"
    assert grown.status().tolist() == [OK, OK, OK, MISSING, MISSING]
    assert sample_files(tmp_path / "store", 3) == before  # bit for bit
    reopened = open_store(url, mode="a").require_group(
        "s0", HEAT, GRID, n_samples=5, attrs={"config_hash": "h5"}
    )
    verify(url, values=False)  # the structure holds: arrays agree with n_samples
    for i in (3, 4):
        reopened.write(i, array_sample(GRID, seed=i))
    np.testing.assert_array_equal(reopened.read(4), array_sample(GRID, seed=4).fields)
    np.testing.assert_array_equal(reopened.read(0), array_sample(GRID, seed=0).fields)
    assert sample_files(tmp_path / "store", 3) == before
    verify(url)  # and every sample matches its checksum


def test_a_growth_cut_between_its_steps_is_completed(tmp_path: Path) -> None:
    """The injected fault: a growth killed after resizing some arrays and before the
    attributes (its commit) were written. The group still says 3 samples; the next call
    completes it, or, asked for the old count, puts the arrays back."""
    url = str(tmp_path / "store")
    store = written_group(url)
    before = sample_files(tmp_path / "store", 3)
    shapes = {s.name: s.shape for s in fmt.array_specs(store.group(PATH).attrs, 5)}
    for name in ("fields", "status", "record"):  # part of the resize, as a kill would leave it
        store.root[f"{PATH}/{name}"].resize(shapes[name])
    assert store.root[PATH].attrs["n_samples"] == 3

    square = open_store(url, mode="a").grow_group(PATH, 3)  # the curriculum went back to 3
    assert all(square.array(s.name).shape == s.shape for s in fmt.array_specs(square.attrs, 3))
    verify(url)
    assert sample_files(tmp_path / "store", 3) == before

    store.root[f"{PATH}/status"].resize((5,))  # cut short again, then completed
    grown = open_store(url, mode="a").grow_group(PATH, 5, {"config_hash": "h5"})
    assert all(grown.array(s.name).shape == s.shape for s in fmt.array_specs(grown.attrs, 5))
    assert grown.status().tolist() == [OK, OK, OK, MISSING, MISSING]
    assert sample_files(tmp_path / "store", 3) == before
    verify(url, values=False)


def test_a_group_never_shrinks(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    store = written_group(url)
    with pytest.raises(StoreError, match="holds 3 samples; it cannot shrink to 2"):
        store.grow_group(PATH, 2)
    appendable = store.require_group("s1", HEAT, GRID)
    with pytest.raises(StoreError, match="appendable"):
        store.grow_group(appendable.path, 4)
    with pytest.raises(StoreError, match="read-only"):
        open_store(url).grow_group(PATH, 4)
    assert store.group(PATH).n_samples == 3
