"""`pdeladder store export --format the-well`: The Well's layout checked by hand (the-well 1.2
pins fsspec 2024.10, which would downgrade this environment's, so its loader is not used here):
the tree and attributes of each file, the trainer's split, values equal to the store's, stats."""

import json

import h5py
import numpy as np
import pytest
import yaml

from pdeladder.dataset.export.well import export_well
from pdeladder.dataset.store import open_store
from pdeladder.errors import PdeladderError
from pdeladder.solvers import Grid, Sample, SolveStats, get_family
from pdeladder.trainer.training.data import split

CASES = [("navier_stokes", Grid(2, 9, 4, 0.5)), ("darcy", Grid(1, 7, 1, 0.0))]


def make_store(url: str, samples: int = 5) -> list[str]:
    store, paths = open_store(url, "a"), []
    rng = np.random.default_rng(3)
    for family, grid in CASES:
        fam = get_family(family)
        g = store.require_group("s", fam, grid, n_samples=samples)
        for i in range(samples):
            f = rng.normal(size=(grid.snapshots, len(g.channel_names), *grid.shape))
            g.write(
                i,
                Sample(
                    family,
                    f.astype(np.float32),
                    grid,
                    fam.parse_params(),
                    7 + i,
                    SolveStats(dofs=1),
                ),
            )
        paths.append(g.path)
    return paths


def test_well_layout_and_values(tmp_path):
    url = str(tmp_path / "s.zarr")
    paths = make_store(url)
    out = export_well(open_store(url), tmp_path / "well", held_out=0.4)
    store = open_store(url)
    for path in paths:
        g = store.group(path)
        name = path.replace("/", "_")
        train, held = split(np.arange(5), 0.4)
        expect = {"train": train, "valid": held[: len(held) // 2], "test": held[len(held) // 2 :]}
        train_values = []
        for part, idx in expect.items():
            with h5py.File(out / name / "data" / part / f"{name}.hdf5", "r") as f:
                dim = g.grid.dim
                assert f.attrs["n_spatial_dims"] == dim and f.attrs["grid_type"] == "cartesian"
                assert f.attrs["n_trajectories"] == len(idx)
                assert {
                    "dimensions",
                    "boundary_conditions",
                    "scalars",
                    "t0_fields",
                    "t1_fields",
                    "t2_fields",
                    "pdeladder",
                } <= set(f)
                assert list(f["dimensions"].attrs["spatial_dims"]) == ["x", "y", "z"][:dim]
                np.testing.assert_array_equal(
                    f["dimensions/time"][:], g.array("t")[:].astype(np.float32)
                )
                np.testing.assert_array_equal(f["pdeladder/sample_index"][:], idx)
                np.testing.assert_array_equal(f["pdeladder/seed"][:], 7 + idx)
                assert json.loads(f["pdeladder"].attrs["group_attrs"])["family"] == g.family
                for j, p in enumerate(g.param_names):
                    ds = f["scalars"][p]
                    assert ds.attrs["sample_varying"] and ds.dtype == np.float32
                    np.testing.assert_array_equal(ds[:], g.params()[idx, j].astype(np.float32))
                for row, i in enumerate(idx):
                    u = g.read(int(i))  # (T, C, X, Y, Z)
                    cut = (slice(None), *[slice(None)] * dim, *[0] * (3 - dim))
                    for c, ch in enumerate(g.channel_names):
                        if g.family == "navier_stokes" and ch in ("u", "v"):
                            v = f["t1_fields/velocity"][row][..., "uv".index(ch)]
                            np.testing.assert_array_equal(v, u[:, c][cut])
                            continue
                        ds = f["t0_fields"][ch]
                        assert ds.dtype == np.float32
                        if ds.attrs["time_varying"]:
                            np.testing.assert_array_equal(ds[row], u[:, c][cut])
                        else:  # darcy: steady, and its input a a time-constant field
                            np.testing.assert_array_equal(ds[row], u[0, c][cut[1:]])
                    if part == "train":
                        train_values.append(u)
        stats = yaml.safe_load((out / name / "stats.yaml").read_text())
        first = "u" if g.family == "navier_stokes" else "p"
        c = g.channel_names.index(first)
        values = np.stack(train_values)[:, :, c].astype(np.float64)
        if g.family == "navier_stokes":
            assert stats["mean"]["velocity"][0] == pytest.approx(values.mean())
            assert stats["std_delta"]["p"] == pytest.approx(
                np.diff(np.stack(train_values)[:, :, 2].astype(np.float64), axis=1).std()
            )
        else:
            assert stats["mean"]["p"] == pytest.approx(values.mean())
            assert stats["rms"]["p"] == pytest.approx(np.sqrt((values**2).mean()))


def test_well_refuses_unknown_group_and_writes_nothing(tmp_path):
    url = str(tmp_path / "s.zarr")
    make_store(url)
    with pytest.raises(PdeladderError, match="no group"):
        export_well(open_store(url), tmp_path / "w", groups=["s/heat/1d_n9_t3"])
    assert not (tmp_path / "w").exists()
