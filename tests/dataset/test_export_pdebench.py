"""`pdeladder store export --format pdebench`, read back the way PDEBench's dataset classes read
its files (a reader written here from its layout: the single-file ``tensor`` reader, its Darcy
reading of ``nu`` beside ``tensor``, and the per-sample ``NNNN/data`` + ``NNNN/grid`` reader),
for the quick-start families in 1D and 2D: values, grids, times and the sidecar's seeds and
parameters equal the store's exactly; and the command's one-line refusals."""

import json
import os
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from pdeladder.dataset.export import LEDGER
from pdeladder.dataset.export.pdebench import export_pdebench
from pdeladder.dataset.store import open_store
from pdeladder.outputs import MARKER
from pdeladder.solvers import Sample, SolveStats, get_family

from .conftest import family_group

EXE = os.path.join(os.path.dirname(sys.executable), "pdeladder")
CASES = {  # (family, dim) → the layout PDEBench has for such data
    ("heat", 1): "tensor",
    ("heat", 2): "per-sample",
    ("burgers", 1): "tensor",
    ("burgers", 2): "per-sample",
    ("darcy", 1): "darcy",
    ("darcy", 2): "darcy",
    ("advection_diffusion", 1): "per-sample",
    ("advection_diffusion", 2): "per-sample",
    ("channel_flow", 2): "per-sample",
}
SAMPLES = 4


def read_pdebench(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """A PDEBench file as its dataset classes hold it: ``data (N, *space, T, C)``, ``grid
    (*space, dim)`` and the times (``None`` for Darcy). Darcy's coefficient ``nu`` comes first
    in the time slot, then the solution ``tensor``, one channel."""
    with h5py.File(path, "r") as f:
        keys = sorted(f.keys())
        if "tensor" not in keys:  # per sample: NNNN/data (T, *space, C), NNNN/grid/{x, y, z, t}
            data, grid, t = [], None, None
            for k in keys:
                d = np.asarray(f[k]["data"], np.float32)
                data.append(np.moveaxis(d, 0, -2))  # (*space, T, C)
                axes = [np.asarray(f[k]["grid"][a], np.float32) for a in "xyz" if a in f[k]["grid"]]
                grid = np.stack(np.meshgrid(*axes, indexing="ij"), -1)
                t = np.asarray(f[k]["grid"]["t"], np.float32)
            return np.stack(data), grid, t
        tensor = np.asarray(f["tensor"], np.float32)
        axes = [
            np.asarray(f[f"{a}-coordinate"], np.float32) for a in "xyz" if f"{a}-coordinate" in f
        ]
        grid = np.stack(np.meshgrid(*axes, indexing="ij"), -1)
        if "nu" in keys:  # Darcy: tensor (N, 1, *space), nu (N, *space)
            nu = np.asarray(f["nu"], np.float32)[:, None]
            both = np.concatenate([nu, tensor], axis=1)  # (N, 2, *space)
            return np.moveaxis(both, 1, -1)[..., None], grid, None
        # 1D: tensor (N, T, X)
        return (
            np.transpose(tensor, (0, 2, 1))[..., None],
            grid,
            np.asarray(f["t-coordinate"], np.float32),
        )


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("pdebench")
    url = str(root / "s.zarr")
    for k, (family, dim) in enumerate(CASES):
        fam = get_family(family)
        family_group(
            url, family, fam.grid(dim, 9 if dim == 1 else 5, 1 if fam.steady else 3), SAMPLES, k
        )
    return open_store(url), export_pdebench(open_store(url), root / "out")


@pytest.mark.parametrize(("family", "dim"), list(CASES))
def test_pdebench_reader_gets_the_store_values(exported, family, dim):
    store, out = exported
    g = next(store.group(p) for p in store.groups() if p.startswith(f"s/{family}/{dim}d_"))
    name = g.path.replace("/", "_")
    kind = CASES[(family, dim)]
    path = out / (name + (".h5" if kind == "per-sample" else ".hdf5"))
    sidecar = json.loads((out / f"{name}.json").read_text())
    assert sidecar["layout"] == kind and sidecar["group"] == g.path
    assert [c["name"] for c in sidecar["channels"]] == g.channel_names
    assert ("mask" in sidecar.get("domain", "")) is (family == "channel_flow")
    data, grid, t = read_pdebench(path)
    assert data.dtype == np.float32 and len(data) == SAMPLES
    cut = (..., *[slice(None)] * dim, *[0] * (3 - dim))
    roles = [c["role"] for c in sidecar["channels"]]
    for row, entry in enumerate(sidecar["samples"]):
        i = entry["index"]
        assert i == row and entry["seed"] == 10 + i
        assert list(entry["params"].values()) == g.params()[i].tolist()
        u = g.read(i)[cut]  # (T, C, *space)
        if kind == "darcy":  # the coefficient, then the solution, in the time slot
            expect = np.stack([u[0, roles.index("input")], u[0, roles.index("output")]], -1)[
                ..., None
            ]
        else:
            expect = np.moveaxis(u, (0, 1), (-2, -1))  # (*space, T, C)
        np.testing.assert_array_equal(data[row], expect)
    coords = [np.asarray(g.array(a)[:], np.float32) for a in "xyz"[:dim]]
    np.testing.assert_array_equal(grid, np.stack(np.meshgrid(*coords, indexing="ij"), -1))
    if t is not None:
        np.testing.assert_array_equal(t, np.asarray(g.array("t")[:], np.float32))
    with h5py.File(
        path, "r"
    ) as f:  # nothing but PDEBench's keys (its per-sample reader takes every key)
        expect_keys = {
            "tensor": {"tensor", "x-coordinate", "t-coordinate"},
            "darcy": {"tensor", "nu", *(f"{a}-coordinate" for a in "xyz"[:dim])},
            "per-sample": {f"{r:04d}" for r in range(SAMPLES)},
        }[kind]
        assert set(f) == expect_keys


def test_pdebench_command_and_its_refusals(tmp_path):
    url = str(tmp_path / "s.zarr")
    heat = get_family("heat")
    g = family_group(url, "heat", heat.grid(1, 9, 3), 3)
    failed = SolveStats(status="failed", reason="Krylov solve diverged")
    g.write(1, Sample("heat", None, g.grid, heat.parse_params(), 99, failed))
    out = tmp_path / "out"
    base = [EXE, "store", "export", url, "--format", "pdebench", "--out", str(out)]
    for args, text in (([*base, "--groups", "s/heat/1d_n9_t5"], "no group"),):
        result = subprocess.run(args, capture_output=True, text=True, timeout=600)
        message = result.stderr.strip()
        assert result.returncode == 2 and text in message, result.stderr
        assert "\n" not in message and not out.exists()
    result = subprocess.run(base, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    written = sorted(p.name for p in out.iterdir())
    name = g.path.replace("/", "_")
    assert written == [LEDGER, MARKER, f"{name}.hdf5", f"{name}.json"]
    data, _, _ = read_pdebench(out / f"{name}.hdf5")  # the ok samples only, in index order
    for row, i in enumerate((0, 2)):  # (X, T) of the one channel
        np.testing.assert_array_equal(data[row, ..., 0], g.read(i)[:, 0, :, 0, 0].T)
    sidecar = json.loads((out / f"{name}.json").read_text())
    assert [e["index"] for e in sidecar["samples"]] == [0, 2] and len(data) == 2
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    result = subprocess.run(base, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr  # the same export, complete: nothing rewritten
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before
    result = subprocess.run([*base, "--groups", g.path], capture_output=True, text=True)
    assert result.returncode == 2 and "--force" in result.stderr  # another export's folder
    assert sorted(p.name for p in out.iterdir()) == written
    assert subprocess.run([*base, "--force"], capture_output=True, timeout=600).returncode == 0
