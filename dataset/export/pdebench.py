"""Groups in PDEBench's HDF5 files: one file per group, every ok sample in index order,
float32, unit axes dropped (``space`` = the group's ``dim`` axes), named after the group path
with ``/`` as ``_``. The file's kind follows what the group holds:

- ``tensor`` (a 1D group of one channel, PDEBench's 1D files): ``OUT/<name>.hdf5`` with
  ``tensor (N, T, X)``, ``x-coordinate (X,)`` and ``t-coordinate (T,)``.
- ``darcy`` (a steady group of one input coefficient and one output, PDEBench's Darcy file):
  ``OUT/<name>.hdf5`` with ``tensor (N, 1, *space)`` (the output), ``nu (N, *space)`` (the
  coefficient) and ``x-coordinate`` (``y-``, ``z-`` in 2D/3D).
- ``per-sample`` (every other group: 2D/3D, several channels, vector fields; PDEBench's 2D/3D
  files): ``OUT/<name>.h5`` with one group per sample, ``NNNN`` (its position among the
  exported samples, zero-padded to four digits or more), holding ``data (T, *space, C)`` (the
  channels in the store's order) and ``grid/x`` (``y``, ``z``) and ``grid/t``.

The file holds nothing else (PDEBench's per-sample reader takes every top-level key for a
sample). What PDEBench's files have no place for goes to ``OUT/<name>.json``: the group path,
the file's kind (key ``layout``), channel names and roles, per exported sample its store
index, seed and parameters, and for a group whose domain is not its box (a ``mask`` channel,
exported in ``data`` like the others) key ``domain``: which points are no part of the solution,
which PDEBench's metrics cannot tell.
"""

import json
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from pdeladder.dataset import format as fmt
from pdeladder.dataset.export import (
    PART,
    export_job,
    no_progress,
    open_groups,
    prepare_out,
    spatial,
    written,
)
from pdeladder.dataset.group import Group
from pdeladder.dataset.store import Store
from pdeladder.solvers.family import MASK

AXES = ("x", "y", "z")


def file_kind(group: Group) -> str:
    """``tensor``, ``darcy`` or ``per-sample`` (module docstring)."""
    roles = [c.get("role", "output") for c in group.attrs["channels"]]
    if group.grid.snapshots == 1 and sorted(roles) == ["input", "output"]:
        return "darcy"
    if group.grid.dim == 1 and roles == ["output"]:
        return "tensor"
    return "per-sample"


def file_name(group: Group) -> str:
    suffix = ".h5" if file_kind(group) == "per-sample" else ".hdf5"
    return group.path.replace("/", "_") + suffix


def _coords(group: Group) -> list[np.ndarray]:
    """The grid's coordinates in metres along its ``dim`` axes, float32."""
    return [group.grid.axis(a).astype(np.float32) for a in range(group.grid.dim)]


def _write(f: h5py.File, group: Group, indices: np.ndarray, advance) -> None:
    grid, dim, kind = group.grid, group.grid.dim, file_kind(group)
    space, T, n = grid.shape[:dim], grid.snapshots, len(indices)
    t = np.asarray(group.array("t")[:], np.float32)
    coords = _coords(group)
    if kind == "per-sample":
        width = max(4, len(str(n - 1)))
        for row, i in enumerate(indices):
            u = spatial(group.read(int(i)), dim)  # (T, C, *space): one sample in memory
            s = f.create_group(f"{row:0{width}d}")
            s.create_dataset("data", data=np.moveaxis(u, 1, -1).astype(np.float32))
            g = s.create_group("grid")
            for a, c in zip(AXES, coords, strict=False):
                g.create_dataset(a, data=c)
            g.create_dataset("t", data=t)
            advance(1)
        return
    for a, c in zip(AXES, coords, strict=False):
        f.create_dataset(f"{a}-coordinate", data=c)
    if kind == "tensor":
        f.create_dataset("t-coordinate", data=t)
        out = f.create_dataset("tensor", shape=(n, T, *space), dtype=np.float32)
        for row, i in enumerate(indices):
            out[row] = spatial(group.read(int(i)), dim)[:, 0]
            advance(1)
        return
    roles = [c.get("role", "output") for c in group.attrs["channels"]]
    a_in, a_out = roles.index("input"), roles.index("output")
    tensor = f.create_dataset("tensor", shape=(n, 1, *space), dtype=np.float32)
    nu = f.create_dataset("nu", shape=(n, *space), dtype=np.float32)
    for row, i in enumerate(indices):
        u = spatial(group.read(int(i)), dim)[0]  # (C, *space)
        tensor[row, 0], nu[row] = u[a_out], u[a_in]
        advance(1)


#: The sidecar's word on a group whose domain is not its whole box (its channel ``mask``).
OUTSIDE = (
    "the channel 'mask' is 1 at the grid points inside the domain and 0 outside it, where every "
    "output holds 0 and is no part of the solution; PDEBench's readers and metrics take every "
    "grid point alike, so score only where mask is 1"
)


def _sidecar(group: Group, indices: np.ndarray) -> dict[str, Any]:
    params, seeds = group.params(), group.column("seed")
    masked = MASK in group.channel_names
    return {
        "group": group.path,
        "layout": file_kind(group),
        "channels": [
            {"name": c["name"], "role": c.get("role", "output")} for c in group.attrs["channels"]
        ],
        **({"domain": OUTSIDE} if masked else {}),
        "samples": [
            {
                "index": int(i),
                "seed": int(seeds[i]),
                "params": dict(zip(group.param_names, map(float, params[i]), strict=True)),
            }
            for i in indices
        ],
    }


def export_pdebench(
    store: Store,
    out: Path,
    *,
    groups: list[str] | None = None,
    force: bool = False,
    progress=None,
) -> Path:
    """Write ``groups`` (default all) of ``store`` in PDEBench's files under ``out``; returns
    ``out``. ``progress(description)`` gives a :data:`Progress` per group."""
    opened = open_groups(store, groups)
    ledger = prepare_out(out, store.url, force, export_job("pdebench", store.url, groups=groups))
    for g in opened:
        indices = np.flatnonzero(g.status() == fmt.OK)
        advance = (progress(f"{g.path} → pdebench") if progress else no_progress)(len(indices))
        data, sidecar = out / file_name(g), out / f"{g.path.replace('/', '_')}.json"
        if ledger.done(g.path, g, indices) and data.is_file() and sidecar.is_file():
            advance(len(indices))  # written before an interruption
            continue
        with h5py.File(data.with_name(data.name + PART), "w") as f:
            _write(f, g, indices, advance)
        sidecar.with_name(sidecar.name + PART).write_text(
            json.dumps(_sidecar(g, indices), indent=1)
        )
        for path in (data, sidecar):
            written(path.with_name(path.name + PART), path)
        ledger.record(g.path, g, indices)
    return out
