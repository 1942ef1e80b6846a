"""Groups as The Well's datasets (its ``docs/data_format.md``): one dataset per group,
``OUT/<name>/data/{train,valid,test}/<name>.hdf5`` and ``OUT/<name>/stats.yaml``.

- ``<name>``: the group path with ``/`` as ``_`` (``s1_heat_2d_n33_t11``).
- Split: the trainer's held-out rule (:func:`pdeladder.dataset.catalog.split` on the ok
  samples, in index order): its training part is ``train``; its held-out part is halved,
  the first half ``valid``, the rest ``test`` (an empty split writes no file).
- Each file: root attributes ``dataset_name``, ``grid_type = "cartesian"``,
  ``n_spatial_dims``, ``n_trajectories``, ``simulation_parameters`` (the names of the parameters
  with one value over the group's ok samples, each also a root attribute holding that value, as
  The Well's checker requires of a listed name); ``scalars`` (every parameter, sample-varying
  ``(n,)``); ``dimensions`` (``time``, and ``x``/``y``/``z`` of the group's dimension in
  metres: unit axes dropped); ``boundary_conditions`` (one ``WALL`` or ``PERIODIC`` condition
  per axis from the family's description, masks true at both ends for walls);
  ``t0_fields`` (scalar channels, ``(n, T, *space)``; input coefficient channels, constant in
  time, and every channel of a steady group (``T = 1``) as time-constant ``(n, *space)``
  fields), ``t1_fields`` (the velocity components of a
  family, as one ``(n, T, *space, dim)`` field named ``velocity``; ``(n, *space, dim)`` in a
  steady group), ``t2_fields`` (empty);
  float32 throughout.
- ``pdeladder/`` (ignored by The Well): ``sample_index`` and ``seed`` per trajectory, the
  group's path and channel names, and its attributes as JSON (``group_attrs``): what a
  lossless way back needs.
- ``stats.yaml``: ``mean``, ``std``, ``rms`` and their ``*_delta`` (of consecutive snapshots) per
  field over the ``train`` files, float64 accumulation, one sample at a time.
"""

import json
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import yaml

from pdeladder.dataset import format as fmt
from pdeladder.dataset.catalog import split
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
from pdeladder.errors import UserInputError

AXES = ("x", "y", "z")


def dataset_name(group: Group) -> str:
    return group.path.replace("/", "_")


def velocity_channels(group: Group) -> list[int]:
    """Channel indices of the family's velocity components along x, y, ... (``dim`` of them),
    or none (then every channel is a scalar field)."""
    comps: dict[str, int] = {}
    for i, c in enumerate(group.attrs["channels"]):
        words = c["long_name"].replace("-", " ").split()
        axis = [w for w in words if w in AXES]
        if "velocity" in words and axis and c.get("role", "output") == "output":
            comps.setdefault(axis[0], i)
    dim = group.grid.dim
    picked = [comps.get(a) for a in AXES[:dim]]
    return [] if None in picked else [int(i) for i in picked if i is not None]


def well_fields(group: Group) -> dict[str, Any]:
    """Which channels become which Well fields: ``t0`` (name, channel, time-varying) and ``t1``
    (channels of ``velocity``)."""
    vel = velocity_channels(group)
    t0 = [
        (c["name"], i, c.get("role", "output") == "output" and group.grid.snapshots > 1)
        for i, c in enumerate(group.attrs["channels"])
        if i not in vel
    ]
    return {"t0": t0, "t1": {"velocity": vel} if vel else {}}


def splits(group: Group, held_out: float) -> dict[str, np.ndarray]:

    ok = np.flatnonzero(group.status() == fmt.OK)
    train, test = split(ok, held_out)
    half = len(test) // 2
    return {"train": train, "valid": test[:half], "test": test[half:]}


def _space(group: Group) -> tuple[int, ...]:
    return group.grid.shape[: group.grid.dim]


def fixed_parameters(group: Group) -> dict[str, float]:
    """The parameters with one value over the group's ok samples: ``{name: value}``."""
    values = group.params()[group.status() == fmt.OK]
    return {
        name: float(v[0])
        for name, v in zip(group.param_names, values.T, strict=True)
        if len(v) and (v == v[0]).all()
    }


def _write_file(path: Path, group: Group, indices: np.ndarray, advance) -> None:
    grid, dim = group.grid, group.grid.dim
    space, T, n = _space(group), grid.snapshots, len(indices)
    named = well_fields(group)
    names = group.param_names
    params = group.params()[indices] if len(names) else np.zeros((n, 0))
    fixed = fixed_parameters(group)
    with h5py.File(path, "w") as f:
        f.attrs.update(
            dataset_name=dataset_name(group),
            grid_type="cartesian",
            n_spatial_dims=dim,
            n_trajectories=n,
            simulation_parameters=list(fixed),
            **fixed,
        )
        d = f.create_group("dimensions")
        d.attrs["spatial_dims"] = list(AXES[:dim])
        t = d.create_dataset("time", data=np.asarray(group.array("t")[:], np.float32))
        t.attrs.update(sample_varying=False, time_varying=True)
        for i, a in enumerate(AXES[:dim]):
            ds = d.create_dataset(a, data=grid.axis(i).astype(np.float32))
            ds.attrs.update(sample_varying=False, time_varying=False)
        b = f.create_group("boundary_conditions")
        kind = "PERIODIC" if "periodic" in group.attrs["boundary_conditions"].lower() else "WALL"
        for a, m in zip(AXES[:dim], space, strict=True):
            bc = b.create_group(f"{a}_{kind.lower()}")
            bc.attrs.update(
                associated_dims=[a],
                associated_fields=[],
                bc_type=kind,
                sample_varying=False,
                time_varying=False,
            )
            mask = np.zeros(m, bool)
            if kind == "WALL":
                mask[[0, -1]] = True
            bc.create_dataset("mask", data=mask)
        s = f.create_group("scalars")
        s.attrs["field_names"] = names
        for j, name in enumerate(names):
            ds = s.create_dataset(name, data=params[:, j].astype(np.float32))
            ds.attrs.update(sample_varying=True, time_varying=False)
        t0 = f.create_group("t0_fields")
        t0.attrs["field_names"] = [name for name, _, _ in named["t0"]]
        out0 = {}
        for name, _, varying in named["t0"]:
            shape = (n, T, *space) if varying else (n, *space)
            out0[name] = t0.create_dataset(name, shape=shape, dtype=np.float32)
            out0[name].attrs.update(
                dim_varying=[True] * dim, sample_varying=True, time_varying=varying
            )
        t1 = f.create_group("t1_fields")
        t1.attrs["field_names"] = list(named["t1"])
        out1 = {}
        for name in named["t1"]:
            shape = (n, T, *space, dim) if T > 1 else (n, *space, dim)
            out1[name] = t1.create_dataset(name, shape=shape, dtype=np.float32)
            out1[name].attrs.update(
                dim_varying=[True] * dim, sample_varying=True, time_varying=T > 1
            )
        f.create_group("t2_fields").attrs["field_names"] = []
        p = f.create_group("pdeladder")
        p.attrs.update(
            group_path=group.path,
            channel_names=group.channel_names,
            group_attrs=json.dumps(group.attrs),
        )
        p.create_dataset("sample_index", data=np.asarray(indices, np.int64))
        p.create_dataset("seed", data=group.column("seed")[indices])
        for row, i in enumerate(indices):
            u = spatial(group.read(int(i)), dim)  # (T, C, *space): one sample in memory
            for name, c, varying in named["t0"]:
                out0[name][row] = u[:, c] if varying else u[0, c]
            for name, chans in named["t1"].items():
                out1[name][row] = np.stack([u[:, c] if T > 1 else u[0, c] for c in chans], -1)
            advance(1)


def _stats_yaml(files: list[Path]) -> dict[str, dict[str, Any]]:
    """The Well's ``stats.yaml`` of the fields in ``files`` (float64 sums, sample by sample)."""
    acc: dict[str, list] = {}
    for path in files:
        with h5py.File(path, "r") as f:
            for kind in ("t0_fields", "t1_fields"):
                for name in f[kind].attrs["field_names"]:
                    ds = f[kind][name]
                    vector = kind == "t1_fields"
                    for row in range(ds.shape[0]):
                        v = np.asarray(ds[row], np.float64)
                        axes = tuple(range(v.ndim - 1)) if vector else None
                        a = acc.setdefault(name, [0.0, 0.0, 0, 0.0, 0.0, 0])
                        a[0] += v.sum(axes)
                        a[1] += (v**2).sum(axes)
                        a[2] += v.size // (v.shape[-1] if vector else 1)
                        if ds.attrs["time_varying"] and v.shape[0] > 1:
                            dv = np.diff(v, axis=0)
                            a[3] += dv.sum(axes)
                            a[4] += (dv**2).sum(axes)
                            a[5] += dv.size // (dv.shape[-1] if vector else 1)
    out: dict[str, dict[str, Any]] = {k: {} for k in ("mean", "std", "rms")}
    out.update({f"{k}_delta": {} for k in ("mean", "std", "rms")})

    def put(key: str, name: str, value) -> None:
        out[key][name] = np.asarray(value).tolist()

    for name, (s, sq, n, ds, dsq, dn) in acc.items():
        mean = s / n
        put("mean", name, mean)
        put("rms", name, np.sqrt(sq / n))
        put("std", name, np.sqrt(np.maximum(sq / n - mean**2, 0)))
        if dn:
            dm = ds / dn
            put("mean_delta", name, dm)
            put("rms_delta", name, np.sqrt(dsq / dn))
            put("std_delta", name, np.sqrt(np.maximum(dsq / dn - dm**2, 0)))
    return out


def export_well(
    store: Store,
    out: Path,
    *,
    groups: list[str] | None = None,
    held_out: float = 0.1,
    force: bool = False,
    progress=None,
) -> Path:
    """Write ``groups`` (default all) of ``store`` as Well datasets under ``out``; returns
    ``out``. ``progress(description)`` gives a :data:`Progress` per group."""
    if not 0 <= held_out < 1:
        raise UserInputError(f"--held-out {held_out}: must be in [0, 1)")
    opened = open_groups(store, groups)
    job = export_job("the-well", store.url, groups=groups, held_out=held_out)
    ledger = prepare_out(out, store.url, force, job)
    for g in opened:
        name = dataset_name(g)
        parts = splits(g, held_out)
        samples = np.sort(np.concatenate(list(parts.values())))
        advance = (progress(f"{g.path} → the-well") if progress else no_progress)(len(samples))
        if ledger.done(g.path, g, samples) and (out / name).is_dir():
            advance(len(samples))  # written before an interruption
            continue
        part, train = out / (name + PART), []
        for split_name, idx in parts.items():
            folder = part / "data" / split_name
            folder.mkdir(parents=True)
            if len(idx):
                path = folder / f"{name}.hdf5"
                _write_file(path, g, idx, advance)
                if split_name == "train":
                    train.append(path)
        (part / "stats.yaml").write_text(yaml.safe_dump(_stats_yaml(train), sort_keys=False))
        written(part, out / name)
        ledger.record(g.path, g, samples)
    return out
