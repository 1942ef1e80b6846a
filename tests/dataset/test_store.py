"""The store API: round trips, group identity, failures, statistics, corruption, concurrency."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr
from typer.testing import CliRunner

from pdeladder.dataset import cli
from pdeladder.dataset import format as fmt
from pdeladder.dataset.format import FAILED, MISSING, OK
from pdeladder.dataset.group import read_samples, sample_checksum
from pdeladder.dataset.moments import mean_std, merge_moments, sample_moments
from pdeladder.dataset.provenance import checksum
from pdeladder.dataset.store import open_store
from pdeladder.dataset.verify import store_problems
from pdeladder.errors import FormatError, StoreError, UserInputError

from .conftest import GRID, HEAT, array_sample, failed_sample, stamp_version


def test_fixed_group_round_trip(store_url, heat_samples):
    store = open_store(store_url, mode="a", check_writable=True)
    group = store.require_group("s0", HEAT, GRID, n_samples=6, attrs={"config_hash": "abc"})
    assert group.status().tolist() == [MISSING] * 6
    for k, sample in enumerate(heat_samples):
        group.write(k + 1, sample)
    group.write(5, failed_sample())
    assert group.status().tolist() == [MISSING, OK, OK, OK, OK, FAILED]

    reread = open_store(store_url).group("s0/heat/2d_n9_t5")
    for k, sample in enumerate(heat_samples):
        np.testing.assert_array_equal(reread.read(k + 1), sample.fields)
        assert not reread.read(k + 1).flags.writeable
    info = reread.info(2)
    assert info["seed"] == 1 and info["params"]["diffusivity"] == pytest.approx(0.025)
    assert info["stats"]["dofs"] == 81 and info["stats"]["krylov_iterations"] > 0
    assert info["provenance"]["element"] == "P1"
    assert reread.checksums()[1] == checksum(heat_samples[0].fields)  # one chunk: its CRC
    assert reread.attrs["config_hash"] == "abc"
    assert reread.attrs["software"]["dolfinx"] and reread.attrs["software"]["petsc"]
    assert open_store(store_url).groups() == ["s0/heat/2d_n9_t5"]

    with pytest.raises(StoreError, match=r"sample 0: status is missing"):
        reread.read(0)
    with pytest.raises(StoreError, match=r"sample 5: status is failed \(Krylov solve diverged\)"):
        reread.read(5)
    assert reread.info(5)["reason"] == "Krylov solve diverged"


def test_group_identity(store_url):
    store = open_store(store_url, mode="a")
    store.require_group("s0", HEAT, GRID, n_samples=3, attrs={"config_hash": "abc"})
    store.require_group("s0", HEAT, GRID, n_samples=3, attrs={"config_hash": "abc"})  # no-op
    with pytest.raises(StoreError, match=r"n_samples: 3 != 4"):
        store.require_group("s0", HEAT, GRID, n_samples=4, attrs={"config_hash": "abc"})
    with pytest.raises(StoreError, match=r"config_hash: 'abc' != 'xyz'"):
        store.require_group("s0", HEAT, GRID, n_samples=3, attrs={"config_hash": "xyz"})
    with pytest.raises(UserInputError, match="reserved"):
        store.require_group("s1", HEAT, GRID, attrs={"family": "x"})
    with pytest.raises(StoreError, match="fixed size of 3"):
        store.group("s0/heat/2d_n9_t5").append(array_sample(GRID, 0))
    with pytest.raises(StoreError, match="read-only"):
        open_store(store_url).require_group("s0", HEAT, GRID, n_samples=3)


def test_appendable_group(store_url, heat_samples):
    store = open_store(store_url, mode="a")
    group = store.require_group("adhoc", HEAT, GRID)
    assert group.n_samples == 0
    assert [group.append(s) for s in heat_samples[:2]] == [0, 1]
    assert group.append(failed_sample()) == 2
    again = open_store(store_url, mode="a").require_group("adhoc", HEAT, GRID)
    assert again.append(heat_samples[2]) == 3
    assert again.status().tolist() == [OK, OK, FAILED, OK]
    np.testing.assert_array_equal(again.read(3), heat_samples[2].fields)


def test_rejects_samples_that_do_not_fit(store_url):
    group = open_store(store_url, mode="a").require_group("s0", HEAT, GRID, n_samples=2)
    other = HEAT.grid(2, 11, 5)
    with pytest.raises(UserInputError, match="does not belong"):
        group.write(0, array_sample(other, 0))
    bad = array_sample(GRID, 0)
    bad.fields[0, 0, 0, 0, 0] = np.nan
    with pytest.raises(UserInputError, match="NaN"):
        group.write(0, bad)
    with pytest.raises(UserInputError, match=r"index 2 outside \[0, 2\)"):
        group.write(2, array_sample(GRID, 0))
    assert group.status().tolist() == [MISSING, MISSING]


def test_normalisation_statistics_match_numpy(store_url, heat_samples):
    group = open_store(store_url, mode="a").require_group("s0", HEAT, GRID, n_samples=5)
    for k, sample in enumerate(heat_samples):
        group.write(k, sample)
    group.write(4, failed_sample())
    assert "normalization" not in group.attrs
    stats = group.update_normalisation()
    whole = np.stack([s.fields for s in heat_samples]).astype(np.float64)  # (N, T, C, X, Y, Z)
    assert stats["count"] == [whole.size]
    assert stats["mean"][0] == pytest.approx(whole.mean(), rel=1e-12)
    assert stats["std"][0] == pytest.approx(whole.std(), rel=1e-12)
    assert open_store(store_url).group(group.path).normalisation() == stats  # cached
    group.write(4, array_sample(GRID, 7))
    fresh = open_store(store_url).group(group.path).normalisation()  # stale cache is not used
    assert fresh["ok_samples"] == 5 and fresh["count"] == [whole.size * 5 / 4]


def test_chan_merge_is_exact_for_uneven_parts():
    rng = np.random.default_rng(0)
    data = rng.normal(3.0, 5.0, size=(1000, 2))
    parts = [data[:1], data[1:300], data[300:301], data[301:]]
    moments = np.stack([sample_moments(p.T[None, :, :, None, None]) for p in parts])
    mean, std = mean_std(merge_moments(moments))
    np.testing.assert_allclose(mean, data.mean(axis=0), rtol=1e-13)
    np.testing.assert_allclose(std, data.std(axis=0), rtol=1e-13)
    empty = merge_moments(np.zeros((0, 2, 3)))
    assert empty[:, 0].tolist() == [0.0, 0.0]


def _chunk(store_dir: Path, array: str, index: int) -> Path:
    """The (first) chunk file of sample ``index`` in ``array``."""
    folder = store_dir / "s0/heat/2d_n9_t5" / array
    return next(p for p in sorted(folder.glob(f"c.{index}*")) if p.name.split(".")[1] == str(index))


@pytest.mark.parametrize("compression", ["none", fmt.DEFAULT_COMPRESSION])
@pytest.mark.parametrize("damage", ["garbage", "truncated", "deleted"])
def test_corrupt_fields_chunk_names_the_sample(tmp_path, damage, compression):
    store = open_store(str(tmp_path), mode="a")
    group = store.require_group("s0", HEAT, GRID, n_samples=3, compression=compression)
    for k in range(3):
        group.write(k, array_sample(GRID, k))
    chunk = _chunk(tmp_path, "fields", 1)
    if damage == "garbage":
        chunk.write_bytes(b"\x01" * 64)
    elif damage == "truncated":
        chunk.write_bytes(chunk.read_bytes()[:-40])
    else:
        chunk.unlink()
    reread = open_store(str(tmp_path)).group("s0/heat/2d_n9_t5")
    named = r"s0/heat/2d_n9_t5 sample 1: .*(corrupt|checksum|missing)"
    with pytest.raises(StoreError, match=named):
        reread.read(1)
    checksums = reread.checksums()
    into = [np.empty((GRID.snapshots, 1, *GRID.shape), np.float32) for _ in range(2)]
    with pytest.raises(StoreError, match=named):  # the loaders' path: into given arrays
        read_samples([(reread, k, int(checksums[k])) for k in (2, 1)], out=into)
    np.testing.assert_array_equal(reread.read(2), array_sample(GRID, 2).fields)


@pytest.mark.parametrize("compression", ["none", fmt.DEFAULT_COMPRESSION])
def test_read_samples_into_given_arrays(store_url, compression):
    group = open_store(store_url, mode="a").require_group(
        "s0", HEAT, GRID, n_samples=3, compression=compression
    )
    for k in range(3):
        group.write(k, array_sample(GRID, k))
    checksums = group.checksums()
    into = [np.full((GRID.snapshots, 1, *GRID.shape), np.nan, np.float32) for _ in range(2)]
    got = read_samples([(group, k, int(checksums[k])) for k in (2, 0)], out=into)
    assert all(a is b for a, b in zip(got, into, strict=True))
    for arr, k in zip(into, (2, 0), strict=True):
        np.testing.assert_array_equal(arr, array_sample(GRID, k).fields)


def test_columns_read_what_zarr_reads(store_url, monkeypatch):
    """Every per-sample record array, read whole by ``Group.column`` (in rounds of 3 keys, on
    several threads for a local store), equals zarr's own read: fill values where a sample
    was never written, the reason of a failed one."""
    from pdeladder.dataset import chunks as chunks_module
    from pdeladder.dataset import group as group_module

    monkeypatch.setattr(group_module, "COLUMN_ROUND", 3)
    monkeypatch.setattr(chunks_module.os, "cpu_count", lambda: 3)
    group = open_store(store_url, mode="a").require_group("s0", HEAT, GRID, n_samples=10)
    for k in (0, 2, 3, 7, 8):
        group.write(k, array_sample(GRID, k))
    group.write(4, failed_sample())
    reread = open_store(store_url).group(group.path)
    for name in reread.chunks:
        if name == "fields":
            continue
        got, want = reread.column(name), reread.array(name)[:]
        assert got.shape == want.shape, name
        if got.dtype == object:
            assert [str(v) for v in got] == [str(v) for v in want], name
        else:
            assert got.dtype == want.dtype, name
            np.testing.assert_array_equal(got, want, err_msg=name)
    assert reread.status().tolist() == [
        OK,
        MISSING,
        OK,
        OK,
        FAILED,
        MISSING,
        MISSING,
        OK,
        OK,
        MISSING,
    ]
    assert reread.column("reason")[4] == "Krylov solve diverged"


def test_corrupt_record_chunk_names_the_sample(tmp_path):
    group = open_store(str(tmp_path), mode="a").require_group("s0", HEAT, GRID, n_samples=3)
    for k in range(3):
        group.write(k, array_sample(GRID, k))
    chunk = _chunk(tmp_path, "record", 2)
    chunk.write_bytes(chunk.read_bytes()[:-3])
    reread = open_store(str(tmp_path)).group("s0/heat/2d_n9_t5")
    with pytest.raises(
        StoreError, match=r"s0/heat/2d_n9_t5 sample 2: cannot read record .*corrupt"
    ):
        reread.params()
    with pytest.raises(StoreError, match=r"sample 2: cannot read record"):
        reread.info(2)
    assert reread.info(1)["seed"] == 1


def test_missing_status_chunk_reads_as_missing(tmp_path):
    group = open_store(str(tmp_path), mode="a").require_group("s0", HEAT, GRID, n_samples=2)
    group.write(0, array_sample(GRID, 0))
    _chunk(tmp_path, "status", 0).unlink()
    with pytest.raises(StoreError, match="sample 0: status is missing"):
        open_store(str(tmp_path)).group("s0/heat/2d_n9_t5").read(0)


def test_unusable_locations(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StoreError, match="cannot write under"):
        open_store(str(blocker / "store"), mode="a", check_writable=True)
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.txt").write_text("x")
    with pytest.raises(StoreError, match="not empty and is not a zarr store"):
        open_store(str(tmp_path / "notes"), mode="a", check_writable=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "notes"]
    with pytest.raises(StoreError, match="no store there"):
        open_store(str(tmp_path / "absent"))
    with pytest.raises(StoreError, match="no store there"):
        open_store("memory://pdeladder-test-absent")
    with pytest.raises(UserInputError, match="mode"):
        open_store(str(tmp_path), mode="w")


def test_refuses_newer_and_foreign_formats(tmp_path):
    zarr.open_group(
        str(tmp_path / "new"), mode="w", attributes={"format": "pdeladder", "format_version": 9}
    )
    with pytest.raises(FormatError, match="format version 9 is newer"):
        open_store(str(tmp_path / "new"))
    zarr.open_group(
        str(tmp_path / "old"), mode="w", attributes={"format": "pdeladder", "format_version": 1}
    )
    with pytest.raises(FormatError, match="format version 1 was written by an older pdeladder"):
        open_store(str(tmp_path / "old"))
    zarr.open_group(str(tmp_path / "other"), mode="w", attributes={"title": "x"}).create_group("g")
    with pytest.raises(FormatError, match="not a pdeladder store"):
        open_store(str(tmp_path / "other"), mode="a")


def test_xarray_sees_named_dimensions_and_units(store_url, heat_samples):
    group = open_store(store_url, mode="a").require_group("s0", HEAT, GRID, n_samples=2)
    group.write(0, heat_samples[0])
    ds = xr.open_zarr(store_url, group=group.path, consolidated=False)
    assert ds["fields"].dims == ("sample", "t", "channel", "x", "y", "z")
    assert ds["fields"].shape == (2, 5, 1, 9, 9, 1)
    np.testing.assert_allclose(ds["t"].values, [0, 0.25, 0.5, 0.75, 1.0])
    np.testing.assert_allclose(ds["x"].values, np.linspace(0, 1, 9))
    assert list(ds["channel"].values) == ["u"]
    assert list(ds["parameter"].values) == ["diffusivity", "ic_length_scale"]
    assert ds["t"].attrs["long_name"] == "time" and ds["x"].attrs["units"] == "m"
    assert ds["record"].dims == ("sample", "record_byte")
    fields = [f["name"] for f in ds["record"].attrs["record_fields"]]
    assert fields == ["seed", "params", "stats", "moments", "checksum"]
    records = ds["record"].values.view(fmt.record_dtype(group.attrs))[:, 0]
    assert records["seed"].tolist() == [heat_samples[0].seed, -1]  # -1: never written
    np.testing.assert_array_equal(records["params"][0], heat_samples[0].params.vector())
    assert np.isnan(records["params"][1]).all()
    np.testing.assert_array_equal(ds["fields"].isel(sample=0).values, heat_samples[0].fields)
    assert ds.attrs["family"] == "heat"


def test_open_group_decodes_the_records_into_variables(store_url, heat_samples):
    from pdeladder.dataset.view import open_group

    group = open_store(store_url, mode="a").require_group("s0", HEAT, GRID, n_samples=2)
    group.write(1, heat_samples[1])
    ds = open_group(store_url, group.path)
    assert "record" not in ds
    assert ds["params"].dims == ("sample", "parameter")
    assert ds["stats"].dims == ("sample", "stat") and ds["moments"].dims[:2] == (
        "sample",
        "channel",
    )
    assert ds["seed"].values.tolist() == [-1, heat_samples[1].seed]
    np.testing.assert_array_equal(
        ds["params"].sel(parameter="diffusivity").values[1], heat_samples[1].params.diffusivity
    )
    assert ds["stats"].sel(stat="steps").values[1] == heat_samples[1].stats.steps
    assert ds["checksum"].values[1] == group.checksums()[1]
    assert ds["status"].values.tolist() == [MISSING, OK]
    np.testing.assert_array_equal(ds["fields"].isel(sample=1).values, heat_samples[1].fields)


def test_s3_store_through_moto(s3_bucket, heat_samples):
    url = f"s3://{s3_bucket}/run1"
    store = open_store(url, mode="a", check_writable=True)
    group = store.require_group("s0", HEAT, GRID, n_samples=2)
    group.write(1, heat_samples[1])
    reread = open_store(url).group("s0/heat/2d_n9_t5")
    assert reread.status().tolist() == [MISSING, OK]
    np.testing.assert_array_equal(reread.read(1), heat_samples[1].fields)
    np.testing.assert_array_equal(reread.read_slab(1, "x", 2, 5), heat_samples[1].fields[:, :, 2:5])
    with pytest.raises(StoreError, match="not writable"):
        open_store("s3://pdeladder-no-such-bucket/x", mode="a", check_writable=True)
    with pytest.raises(StoreError, match="s3://pdeladder-no-such-bucket/x"):
        open_store("s3://pdeladder-no-such-bucket/x")


# A writer process that imports neither DOLFINx nor torch: the store needs a family's
# description (name, channels, parameters), not its solver, so a stand-in family serves.
_WRITER = textwrap.dedent(
    """
    import sys
    import numpy as np
    from pdeladder.dataset.store import open_store
    from pdeladder.solvers import Channel, Family, Parameters, Sample, SolveStats
    from pdeladder.solvers.family import parameter

    class ToyParams(Parameters):
        k: float = parameter(1.0, 0.0, 2.0, "1", "a coefficient")

    class Toy(Family):
        name, title, equation, boundary_conditions = "toy", "Toy", "u = k", "none"
        dims, Params, channels = (2,), ToyParams, (Channel("u", "value"),)

        def solve(self, *args):
            raise NotImplementedError

        residual = manufactured_error = solve

    assert "dolfinx" not in sys.modules and "torch" not in sys.modules
    grid = Toy.grid(2, 9, 5)
    url, first = sys.argv[1], int(sys.argv[2])
    group = open_store(url, mode="a").require_group("race", Toy, grid, n_samples=8)
    for k in range(first, 8, 2):
        f = np.random.default_rng(k).normal(size=(5, 1, 9, 9, 1)).astype(np.float32)
        group.write(k, Sample("toy", f, grid, Toy.parse_params(), k, SolveStats()))
    """
)


def test_concurrent_writers_race_to_create_and_fill_one_group(tmp_path):
    url = str(tmp_path / "store")
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, url, str(first)]) for first in (0, 1)]
    try:
        assert [p.wait(timeout=300) for p in procs] == [0, 0]
    finally:  # a writer that timed out is ended here, not left running past the test
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
    group = open_store(url).group("race/toy/2d_n9_t5")
    assert group.status().tolist() == [OK] * 8
    for k in range(8):
        expected = np.random.default_rng(k).normal(size=(5, 1, 9, 9, 1)).astype(np.float32)
        np.testing.assert_array_equal(group.read(k), expected)


@pytest.mark.parametrize("compression", ["none", "blosc-zstd", "zstd"])
def test_chunks_are_what_zarr_writes_and_reads(tmp_path, monkeypatch, compression):
    """A sample larger than the chunk target is split along time and x (the edge chunks
    padded, as zarr stores them): zarr reads what the store writes, each chunk's checksum and
    moments are those of its values, and a corrupt chunk names the sample."""
    monkeypatch.setattr(fmt, "CHUNK_TARGET_BYTES", 2 * 4 * 9 * 9)  # 2 of the 5 snapshots
    store = open_store(str(tmp_path), mode="a")
    group = store.require_group("s0", HEAT, GRID, n_samples=2, compression=compression)
    assert (group.attrs["chunk_time"], group.attrs["chunk_x"]) == (3, 6)
    assert group.chunks["fields"].grid == (2, 1, 2, 1, 1)
    samples = [array_sample(GRID, k) for k in range(2)]
    for k, s in enumerate(samples):
        group.write(k, s)
    plain = zarr.open_group(str(tmp_path), mode="r")[group.path]
    assert plain["fields"].chunks == (1, 3, 1, 6, 9, 1)
    blocks = [(slice(0, 3), slice(0, 6)), (slice(0, 3), slice(6, 9))]
    blocks += [(slice(3, 5), slice(0, 6)), (slice(3, 5), slice(6, 9))]
    for k, s in enumerate(samples):
        np.testing.assert_array_equal(plain["fields"][k], s.fields)
        np.testing.assert_array_equal(group.read(k), s.fields)
        record = plain["record"][k].view(fmt.record_dtype(group.attrs))[0]
        assert record["seed"] == k
        parts = [s.fields[t, :, x] for t, x in blocks]
        assert plain["chunk_checksum"][k].reshape(-1).tolist() == [checksum(p) for p in parts]
        np.testing.assert_array_equal(
            plain["chunk_moments"][k].reshape(4, 1, 3), [sample_moments(p) for p in parts]
        )
        assert group.checksums()[k] == sample_checksum(plain["chunk_checksum"][k])
        assert record["checksum"] == group.checksums()[k]
        np.testing.assert_allclose(record["moments"], sample_moments(s.fields), rtol=1e-12)
        assert json.loads(str(plain["provenance"][k])) == s.provenance
    np.testing.assert_allclose(
        group.moments(), sample_moments(np.concatenate([s.fields for s in samples])), rtol=1e-12
    )
    (tmp_path / group.path / "fields/c.1.1.0.1.0.0").write_bytes(b"\x07" * 40)
    with pytest.raises(StoreError, match=r"s0/heat/2d_n9_t5 sample 1: .*corrupt"):
        open_store(str(tmp_path)).group(group.path).read(1)
    verify_problems = store_problems(open_store(str(tmp_path)))[group.path]
    assert [p.path.endswith("sample 1") for p in verify_problems] == [True]


def test_sample_moments_are_exact_in_float64():
    rng = np.random.default_rng(1)
    fields = rng.normal(1e3, 1e-1, (7, 2, 40, 30, 1)).astype(np.float32)  # mean >> spread
    got = sample_moments(fields)
    for c in range(2):
        x = fields[:, c].astype(np.float64)
        assert got[c, 0] == x.size
        assert got[c, 1] == pytest.approx(x.mean(), rel=1e-15)
        assert got[c, 2] == pytest.approx(((x - x.mean()) ** 2).sum(), rel=1e-9)


def test_chunk_keys_are_flat(tmp_path):
    """Every chunk is a file of its array's folder (``record/c.1.0``), written in place but
    for status, replaced atomically (no temporary file is left)."""
    group = open_store(str(tmp_path), mode="a").require_group("s0", HEAT, GRID, n_samples=2)
    group.write(1, array_sample(GRID, 1))
    folder = tmp_path / group.path
    assert (folder / "record" / "c.1.0").is_file() and (folder / "status" / "c.1").is_file()
    assert not list(folder.rglob("c/*")) and not list(tmp_path.rglob("*.partial"))


def test_group_attributes_are_typed_and_checked_once_opened(tmp_path):
    """A group's attributes are read into a frozen, typed ``GroupMeta`` when it is opened; a
    damaged one (a resolution stored as a string) is one line naming it, not a traceback."""
    url = str(tmp_path)
    made = open_store(url, mode="a").require_group(
        "s0", HEAT, GRID, n_samples=2, attrs={"config_hash": "abc"}
    )
    meta = open_store(url).group(made.path).meta
    assert (meta.grid, meta.n_samples, meta.compression) == (GRID, 2, fmt.DEFAULT_COMPRESSION)
    assert meta.channels[0] == fmt.ChannelMeta("u", meta.channels[0].long_name, "1", "output")
    assert meta.param_names == HEAT.Params.names() and dict(meta.extra) == {"config_hash": "abc"}
    with pytest.raises(AttributeError):
        meta.n_samples = 3

    zarr.open_group(url, mode="r+", path=made.path).update_attributes({"resolution": "9"})
    with pytest.raises(FormatError) as err:
        open_store(url).group(made.path)
    assert str(err.value) == (
        f"{url}::{made.path}: attribute 'resolution' is '9' of type str, not int; the group's "
        "attributes are damaged: run `pdeladder store verify` on the store, or regenerate it"
    )
    result = CliRunner().invoke(cli.app, ["inspect", url])
    assert isinstance(result.exception, FormatError)


@pytest.mark.parametrize("where", ["channels", "parameters"])
def test_a_name_that_could_name_another_place_is_refused_when_a_group_opens(tmp_path, where):
    """A tampered channel or parameter name (one an export would take as an HDF5 path or a
    file name) is a damaged attribute: one line when the group opens, and `verify` lists it."""
    url = str(tmp_path)
    made = open_store(url, mode="a").require_group("s0", HEAT, GRID, n_samples=2)
    attrs = zarr.open_group(url, mode="r", path=made.path).attrs.asdict()
    entries = [dict(e) for e in attrs[where]]
    entries[0]["name"] = "../../../../x"
    zarr.open_group(url, mode="r+", path=made.path).update_attributes({where: entries})
    with pytest.raises(FormatError, match=r"name '../../../../x' is not a plain identifier"):
        open_store(url).group(made.path)
    assert any("not a plain identifier" in p for p in fmt.attr_problems({**attrs, where: entries}))


@pytest.mark.parametrize("version", [3, 4, 5, 6, 7])
def test_older_versions_are_refused_in_one_line(tmp_path, version):
    """A store, or one group of it, of an older format version is refused wherever it is
    opened (read, resumed, verified, shown), in one line that says how to regenerate it:
    no older layout is read, written or converted."""
    url = str(tmp_path / "store")
    group = open_store(url, mode="a").require_group("s0", HEAT, GRID, n_samples=2)
    group.write(0, array_sample(GRID, 0))
    expected = (
        f"{url}::{group.path}: format version {version} was written by an older pdeladder; "
        f"this one reads only version {fmt.FORMAT_VERSION}: regenerate the store with "
        "`pdeladder curriculum materialize`"
    )

    stamp_version(url, version, group.path)
    for open_group in (
        lambda: open_store(url).group(group.path),
        lambda: open_store(url, mode="a").group(group.path),
        lambda: open_store(url, mode="a").require_group("s0", HEAT, GRID, n_samples=2),
    ):
        with pytest.raises(FormatError) as err:
            open_group()
        assert str(err.value) == expected
    problems = store_problems(open_store(url))[group.path]
    where = f"{url}::{group.path}"
    assert [(p.path, p.message) for p in problems] == [(where, expected.removeprefix(f"{where}: "))]

    from pdeladder.dataset.view import open_group

    with pytest.raises(FormatError, match=f"format version {version} was written by an older"):
        open_group(url, group.path)

    stamp_version(url, version)
    for mode in ("r", "a"):
        with pytest.raises(FormatError) as err:
            open_store(url, mode=mode)
        assert str(err.value) == expected.replace(f"::{group.path}", "")
    result = CliRunner().invoke(cli.app, ["inspect", url])
    assert isinstance(result.exception, FormatError) and "\n" not in str(result.exception)


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_child_writes_after_its_parent(tmp_path):
    """The write threads of a parent that has written do not exist in a forked child: the
    child writes with threads of its own instead of waiting forever on the parent's."""
    import multiprocessing
    import threading
    from concurrent import futures

    from pdeladder.dataset import writer

    group = open_store(str(tmp_path), mode="a").require_group("s0", HEAT, GRID, n_samples=2)
    group.write(0, array_sample(GRID, 0))
    # as after a busy parent: every write thread started, and idle
    pool, everyone = writer._writers(), threading.Barrier(9)
    started = [pool.submit(everyone.wait, 30) for _ in range(8)]
    everyone.wait(30)
    futures.wait(started)

    child = multiprocessing.get_context("fork").Process(
        target=group.write, args=(1, array_sample(GRID, 1))
    )
    child.start()
    child.join(timeout=120)
    if child.is_alive():
        child.kill()
    assert child.exitcode == 0
    assert open_store(str(tmp_path)).group(group.path).status().tolist() == [OK, OK]
