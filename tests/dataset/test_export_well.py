"""`pdeladder store export --format the-well`, read by The Well's own loader
(`the_well.data.WellDataset`, the `the-well` package) for every family in 1D and 2D, steady and
vector ones included: its windows, constant fields, scalars, grids and boundary codes equal the
store's values exactly, its z-score normalisation from `stats.yaml` matches statistics computed
here, and the rules of The Well's formatting and data checkers (its repository's
`scripts/check_thewell_formatting.py` and `check_thewell_data.py`) hold for every file."""

import json
import shutil

import h5py
import numpy as np
import pytest
import yaml
from the_well.data import WellDataset
from the_well.data.normalization import ZScoreNormalization

from pdeladder.dataset.catalog import split
from pdeladder.dataset.export.well import export_well
from pdeladder.dataset.store import open_store
from pdeladder.errors import PdeladderError
from pdeladder.solvers import family_names, get_family

from .conftest import GRID, HEAT, family_group

SAMPLES, HELD_OUT = 5, 0.4
#: The loader's names of a ``velocity`` t1 field's components → the store's channels.
VELOCITY = {"velocity_x": "u", "velocity_y": "v", "velocity_z": "w"}
SPLITS = ("train", "valid", "test")


def cases() -> list[tuple[str, int]]:
    return [(f, d) for f in family_names() for d in (1, 2) if d in get_family(f).dims]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Every case's group in one store (random fields), exported once: ``(store, out)``."""
    root = tmp_path_factory.mktemp("well")
    url = str(root / "s.zarr")
    for k, (family, dim) in enumerate(cases()):
        fam = get_family(family)
        family_group(
            url, family, fam.grid(dim, 9 if dim == 1 else 5, 1 if fam.steady else 3), SAMPLES, k
        )
    return open_store(url), export_well(open_store(url), root / "out", held_out=HELD_OUT)


def expected_splits() -> dict[str, np.ndarray]:
    train, held = split(np.arange(SAMPLES), HELD_OUT)
    return {"train": train, "valid": held[: len(held) // 2], "test": held[len(held) // 2 :]}


def channel(group, name: str) -> int:
    return group.channel_names.index(VELOCITY.get(name, name))


def space(u, dim: int):
    """``(..., X, Y, Z)`` → ``(..., *space)``: the unit axes dropped."""
    return u[(..., *[slice(None)] * dim, *[0] * (3 - dim))]


def as_numpy(t) -> np.ndarray:
    return t.detach().cpu().numpy()


@pytest.mark.parametrize(("family", "dim"), cases())
def test_well_dataset_reads_every_family_exactly(exported, family, dim):
    store, out = exported
    g = next(store.group(p) for p in store.groups() if p.startswith(f"s/{family}/{dim}d_"))
    steady = g.grid.snapshots == 1
    name = g.path.replace("/", "_")
    t = np.asarray(g.array("t")[:], np.float32)
    coords = [np.asarray(g.array(a)[:], np.float32) for a in "xyz"[:dim]]
    grid = np.stack(np.meshgrid(*coords, indexing="ij"), -1)
    for part, idx in expected_splits().items():
        ds = WellDataset(
            path=str(out / name),
            well_split_name=part,
            n_steps_input=1,
            n_steps_output=0 if steady else 1,
        )
        meta = ds.metadata
        variable = [n for order in range(3) for n in meta.field_names[order]]
        constant = [n for order in range(3) for n in meta.constant_field_names[order]]
        # every channel exactly once; a vector family's velocity as one t1 field
        assert sorted(channel(g, n) for n in variable + constant) == list(
            range(len(g.channel_names))
        )
        vector = family in ("burgers", "navier_stokes", "channel_flow", "channel_wake")
        velocity = [f"velocity_{a}" for a in "xyz"[:dim]] if vector else []
        assert (meta.constant_field_names if steady else meta.field_names)[1] == velocity
        assert meta.spatial_resolution == (g.grid.resolution,) * dim
        assert meta.scalar_names == [] and meta.constant_scalar_names == g.param_names
        windows = 1 if steady else g.grid.snapshots - 1
        assert len(ds) == len(idx) * windows
        for item in range(len(ds)):
            w = ds[item]
            i, k = int(idx[item // windows]), item % windows
            u = space(g.read(i), dim)  # (T, C, *space)
            if steady:
                assert "input_fields" not in w and "output_fields" not in w
            else:
                for c, n in enumerate(variable):
                    np.testing.assert_array_equal(
                        as_numpy(w["input_fields"][0, ..., c]), u[k, channel(g, n)]
                    )
                    np.testing.assert_array_equal(
                        as_numpy(w["output_fields"][0, ..., c]), u[k + 1, channel(g, n)]
                    )
                np.testing.assert_array_equal(
                    as_numpy(w["output_time_grid"]), t[k + 1 : k + 2] - t[k]
                )
            for c, n in enumerate(constant):
                np.testing.assert_array_equal(
                    as_numpy(w["constant_fields"][..., c]), u[0, channel(g, n)]
                )
            np.testing.assert_array_equal(
                as_numpy(w["constant_scalars"]), g.params()[i].astype(np.float32)
            )
            np.testing.assert_array_equal(as_numpy(w["space_grid"]), grid)
            assert (
                as_numpy(w["boundary_conditions"]) == 0
            ).all()  # WALL on both ends of every axis


def stat(stats: dict, key: str, name: str) -> float:
    """``stats.yaml``'s ``key`` of a loader field name (a velocity component's entry of the
    ``velocity`` list)."""
    if name in VELOCITY:
        return stats[key]["velocity"]["xyz".index(name[-1])]
    return stats[key][name]


@pytest.mark.parametrize("family", ["navier_stokes", "darcy", "advection_diffusion"])
def test_well_normalisation_uses_the_train_statistics(exported, family):
    """stats.yaml holds the train split's mean, std, rms and std of the time differences per
    field (computed here in float64 from the store), and The Well's z-score normalisation with
    it gives (x - mean) / std."""
    store, out = exported
    g = next(store.group(p) for p in store.groups() if p.startswith(f"s/{family}/2d_"))
    steady = g.grid.snapshots == 1
    name = g.path.replace("/", "_")
    train = [int(i) for i in expected_splits()["train"]]
    u = np.stack([space(g.read(i), 2) for i in train]).astype(np.float64)  # (n, T, C, X, Y)
    stats = yaml.safe_load((out / name / "stats.yaml").read_text())
    ds = WellDataset(
        path=str(out / name),
        well_split_name="train",
        normalization_path="stats.yaml",  # relative to path (the dataset's folder)
        n_steps_output=0 if steady else 1,
        use_normalization=True,
        normalization_type=ZScoreNormalization,
    )
    w, meta = ds[0], ds.metadata
    for key, names in (
        ("input_fields", meta.field_names),
        ("constant_fields", meta.constant_field_names),
    ):
        for c, n in enumerate(n for order in range(3) for n in names[order]):
            v = u[:, :, channel(g, n)]
            if key == "constant_fields":
                v = v[:, :1]  # stored once per trajectory
            else:
                assert stat(stats, "std_delta", n) == pytest.approx(np.diff(v, axis=1).std())
            assert stat(stats, "mean", n) == pytest.approx(v.mean())
            assert stat(stats, "std", n) == pytest.approx(v.std())
            assert stat(stats, "rms", n) == pytest.approx(np.sqrt((v**2).mean()))
            got = as_numpy(w[key][..., c])[0 if key == "input_fields" else ...]
            np.testing.assert_allclose(got, (v[0, 0] - v.mean()) / v.std(), rtol=1e-4, atol=1e-5)


# The rules of The Well's checkers, in this test's words: the formatting checker's (root
# attributes, dimensions, fields, scalars, boundary conditions) and the data checker's
# (upper-case boundary types, no NaN and no constant frame after the first in a time-varying
# field, per component).


def is_bool(value) -> bool:
    return isinstance(value, bool | np.bool_)


def is_names(value) -> bool:
    return isinstance(value, list | np.ndarray) and all(isinstance(v, str) for v in value)


def check_formatting(f: h5py.File) -> None:
    assert isinstance(int(f.attrs["n_spatial_dims"]), int) and f.attrs["n_spatial_dims"] > 0
    assert isinstance(f.attrs["n_trajectories"], int | np.integer)
    assert isinstance(f.attrs["dataset_name"], str) and isinstance(f.attrs["grid_type"], str)
    for p in f.attrs["simulation_parameters"]:
        assert p in f.attrs, f"listed simulation parameter {p} is no root attribute"
    dims = f["dimensions"]
    assert is_bool(dims["time"].attrs["sample_varying"])
    spatial = dims.attrs["spatial_dims"]
    assert is_names(spatial) and len(spatial) == f.attrs["n_spatial_dims"]
    for d in spatial:
        assert is_bool(dims[d].attrs["sample_varying"]) and is_bool(dims[d].attrs["time_varying"])
    for order in range(3):
        group = f[f"t{order}_fields"]
        assert is_names(group.attrs["field_names"])
        for n in group.attrs["field_names"]:
            ds, axis = group[n], 0
            assert is_bool(ds.attrs["sample_varying"]) and is_bool(ds.attrs["time_varying"])
            if ds.attrs["sample_varying"]:
                assert ds.shape[axis] == f.attrs["n_trajectories"]
                axis += 1
            if ds.attrs["time_varying"]:
                assert ds.shape[axis] == dims["time"].shape[-1]
                axis += 1
            varying = ds.attrs["dim_varying"]
            assert len(varying) == len(spatial) and all(is_bool(v) for v in varying)
            for d, v in zip(spatial, varying, strict=True):
                if v:
                    assert ds.shape[axis] == dims[d].shape[-1]
                    axis += 1
    scalars = f["scalars"]
    assert is_names(scalars.attrs["field_names"])
    for n in scalars.attrs["field_names"]:
        a = scalars[n].attrs
        assert is_bool(a["sample_varying"]) and is_bool(a["time_varying"])
        assert scalars[n].ndim == a["sample_varying"] + a["time_varying"]
    for bc in f["boundary_conditions"].values():
        a = bc.attrs
        assert {"bc_type", "associated_fields"} <= set(a)
        assert is_bool(a["sample_varying"]) and is_bool(a["time_varying"])
        lead = a["sample_varying"] + a["time_varying"]
        assert is_names(a["associated_dims"]) and len(a["associated_dims"]) > 0
        for j, d in enumerate(a["associated_dims"]):
            assert d in spatial and bc["mask"].shape[lead + j] == dims[d].shape[-1]


def check_data(f: h5py.File) -> None:
    for bc in f["boundary_conditions"].values():
        assert bc.attrs["bc_type"] == bc.attrs["bc_type"].upper()
    assert len(f["dimensions"].attrs["spatial_dims"]) == f.attrs["n_spatial_dims"]
    dim = int(f.attrs["n_spatial_dims"])
    for order in range(3):
        for n, ds in f[f"t{order}_fields"].items():
            if not ds.attrs["time_varying"]:
                continue
            for traj in range(ds.shape[0]):
                for k in range(ds.shape[1]):
                    frame = ds[traj, k].reshape(*ds.shape[2 : 2 + dim], -1)
                    for comp in np.moveaxis(frame, -1, 0):
                        assert not np.isnan(comp).any(), f"{n}: NaN in trajectory {traj} step {k}"
                        assert k == 0 or not (comp == comp.flat[0]).all(), (
                            f"{n}: constant frame in trajectory {traj} step {k}"
                        )


def well_files(out):
    return sorted(out.glob("*/data/*/*.hdf5"))


def test_well_checkers_rules_hold_for_every_file(exported):
    store, out = exported
    files = well_files(out)
    assert len(files) == len(cases()) * len(SPLITS)
    for path in files:
        with h5py.File(path, "r") as f:
            check_formatting(f)
            check_data(f)
            # the parameters with one value in the group (all but the first) are root attributes
            g = store.group(f["pdeladder"].attrs["group_path"])
            assert list(f.attrs["simulation_parameters"]) == g.param_names[1:]
            for j, p in enumerate(g.param_names[1:], 1):
                assert f.attrs[p] == g.params()[0, j]
            # what the way back needs
            idx = f["pdeladder/sample_index"][:]
            np.testing.assert_array_equal(idx, expected_splits()[path.parent.name])
            np.testing.assert_array_equal(f["pdeladder/seed"][:], 10 + idx)
            assert list(f["pdeladder"].attrs["channel_names"]) == g.channel_names
            assert json.loads(f["pdeladder"].attrs["group_attrs"]) == g.attrs


def test_well_export_of_real_solves(heat_samples, tmp_path):
    """Real solves (four 2D heat samples, different diffusivities) hold The Well's checker rules
    (no constant frame, no NaN) and The Well's loader reads their last window exactly."""
    url = str(tmp_path / "s.zarr")
    g = open_store(url, "a").require_group("s", HEAT, GRID, n_samples=len(heat_samples))
    for i, sample in enumerate(heat_samples):
        g.write(i, sample)
    out = export_well(open_store(url), tmp_path / "well", held_out=0.5)
    for path in well_files(out):
        with h5py.File(path, "r") as f:
            check_formatting(f)
            check_data(f)
            assert list(f.attrs["simulation_parameters"]) == ["ic_length_scale"]
    ds = WellDataset(path=str(out / g.path.replace("/", "_")), well_split_name="train")
    w, (train, _) = ds[len(ds) - 1], split(np.arange(len(heat_samples)), 0.5)
    u = space(heat_samples[train[-1]].fields, 2)  # (T, C, X, Y)
    np.testing.assert_array_equal(as_numpy(w["input_fields"][0, ..., 0]), u[-2, 0])
    np.testing.assert_array_equal(as_numpy(w["output_fields"][0, ..., 0]), u[-1, 0])


def test_well_checkers_rules_catch_broken_files(exported, tmp_path):
    """The ported rules fail on a listed parameter that is no root attribute, a NaN and a
    constant frame."""
    _, out = exported
    path = next(p for p in well_files(out) if "heat_2d" in str(p) and p.parent.name == "train")
    breaks = {
        "parameter": lambda f: f.attrs.__delitem__(f.attrs["simulation_parameters"][0]),
        "nan": lambda f: f["t0_fields/u"].__setitem__((0, 1, 0, 0), np.nan),
        "constant": lambda f: f["t0_fields/u"].__setitem__((1, 2), 0.5),
    }
    for what, damage in breaks.items():
        broken = tmp_path / f"{what}.hdf5"
        shutil.copy(path, broken)
        with h5py.File(broken, "r+") as f:
            damage(f)
        with h5py.File(broken, "r") as f, pytest.raises(AssertionError):
            check_formatting(f)
            check_data(f)


def test_well_refuses_unknown_group_and_writes_nothing(tmp_path):
    url = str(tmp_path / "s.zarr")
    family_group(url, "heat", get_family("heat").grid(1, 9, 3))
    with pytest.raises(PdeladderError, match="no group"):
        export_well(open_store(url), tmp_path / "w", groups=["s/heat/1d_n9_t5"])
    assert not (tmp_path / "w").exists()
