"""Samples split into time and x chunks, read and written in slabs."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import xarray as xr
from zarr.storage import FsspecStore

from pdeladder.dataset import chunks as chunks_module
from pdeladder.dataset.format import MISSING, OK
from pdeladder.dataset.loader import StoreDataset
from pdeladder.dataset.plot import plot_sample
from pdeladder.dataset.store import open_store
from pdeladder.dataset.verify import store_problems, verify
from pdeladder.errors import StoreError, UserInputError
from pdeladder.slabs import slabs as chunk_slabs

from .conftest import GRID, HEAT, array_sample

BIG = HEAT.grid(2, 17, 9)  # (T, C, X, Y, Z) = (9, 1, 17, 17, 1): uneven in t and x


def _even(n: int, k: int) -> list[tuple[int, int]]:
    """The split of a domain rank: as even as the axis allows, not chunk-aligned."""
    return [(r * n // k, (r + 1) * n // k) for r in range(k)]


def _count_field_bytes(monkeypatch, url: str) -> list[int]:
    """Bytes of ``fields`` chunks the store hands out from now on (the local store's file
    reads, or the fsspec store's ``get``), in a one-element list."""
    total = [0]
    if url.startswith("memory://"):
        real = FsspecStore.get

        async def get(self, key, *args, **kwargs):
            found = await real(self, key, *args, **kwargs)
            if found is not None and "/fields/" in key:
                total[0] += len(found)
            return found

        monkeypatch.setattr(FsspecStore, "get", get)
    else:
        real = chunks_module._read_file

        def read_file(store, key):
            found = real(store, key)
            if found is not None and "/fields/" in key:
                total[0] += len(found)
            return found

        monkeypatch.setattr(chunks_module, "_read_file", read_file)
    return total


@pytest.mark.parametrize("axis", ["t", "x"])
@pytest.mark.parametrize("chunking", [(9, 1), (2, 4)], ids=["x-only", "t-and-x"])
def test_slabs_read_only_their_chunks(store_url, monkeypatch, axis, chunking):
    """k = 2 and 4 slabs, split evenly (17 x points over 4: 4, 4, 4, 5) and along chunk
    boundaries: each reads exactly the chunks it intersects, at most its share of the stored
    sample plus one layer of chunks across the split axis (the partial chunks at its ends), and
    the slabs put together are the sample, bit for bit."""
    ct, cx = chunking
    group = open_store(store_url, mode="a").require_group(
        "s0", HEAT, BIG, n_samples=2, compression="none", chunk_time=ct, chunk_x=cx
    )
    sample = array_sample(BIG, 3)
    group.write(1, sample)
    whole = group.read(1)
    a, c = (0, ct) if axis == "t" else (2, cx)
    n, grid = whole.shape[a], group.chunks["fields"].grid
    chunk = 4 * ct * cx * 17  # bytes of one stored chunk (C = 1, Y = 17, Z = 1; edges padded)
    layer = chunk * grid[2 if axis == "t" else 0]  # the chunks of one block on the axis
    stored = chunk * grid[0] * grid[2]  # the sample as stored, its edge chunks padded
    counted = _count_field_bytes(monkeypatch, store_url)
    for k in (2, 4):
        cuts = [_even(n, k)] + ([chunk_slabs(n, cx, k)] if axis == "x" else [])
        for cut in cuts:
            parts = []
            for lo, hi in cut:
                counted[0] = 0
                parts.append(group.read_slab(1, axis, lo, hi))
                assert counted[0] == (-(-hi // c) - lo // c) * layer  # the chunks it meets
                assert counted[0] <= stored / k + layer, (k, lo, hi)
            assert parts[0].flags.c_contiguous and parts[0].flags.writeable
            np.testing.assert_array_equal(np.concatenate(parts, axis=a), whole)


def test_slab_reads_check_what_they_read(tmp_path):
    url = str(tmp_path / "store")
    group = open_store(url, mode="a").require_group("s0", HEAT, BIG, n_samples=2, chunk_x=4)
    sample = array_sample(BIG, 0)
    group.write(0, sample)
    (tmp_path / "store" / group.path / "fields" / "c.0.0.0.3.0.0").write_bytes(b"\x05" * 64)
    reread = open_store(url).group(group.path)
    np.testing.assert_array_equal(reread.read_slab(0, "x", 0, 12), sample.fields[:, :, :12])
    with pytest.raises(StoreError, match=r"sample 0: .*corrupt"):
        reread.read_slab(0, "x", 10, 14)
    with pytest.raises(StoreError, match=r"sample 0: .*corrupt"):
        reread.read_slab(0, "t", 0, 1)
    with pytest.raises(StoreError, match=r"sample 1: status is missing"):
        reread.read_slab(1, "x", 0, 4)
    with pytest.raises(UserInputError, match=r"x slab \[4, 18\) outside \[0, 17\)"):
        reread.read_slab(0, "x", 4, 18)
    with pytest.raises(UserInputError, match="slab axis must be 't' or 'x'"):
        reread.read_slab(0, "y", 0, 1)


# One process of a sample's K writers: it opens the group (made by the parent), writes its x
# slab of a seeded sample and nothing else; it imports neither DOLFINx nor torch.
_SLAB_WRITER = textwrap.dedent(
    """
    import sys
    import numpy as np
    from pdeladder.dataset.store import open_store

    url, path, lo, hi = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    group = open_store(url, mode="a").group(path)
    fields = np.random.default_rng(7).normal(size=group.sample_shape).astype(np.float32)
    group.write_slab(0, lo, hi, np.ascontiguousarray(fields[:, :, lo:hi]))
    assert "dolfinx" not in sys.modules and "torch" not in sys.modules
    """
)


def _write_slabs(url: str, path: str, cuts: list[tuple[int, int]]) -> None:
    procs = [
        subprocess.Popen([sys.executable, "-c", _SLAB_WRITER, url, path, str(lo), str(hi)])
        for lo, hi in cuts
    ]
    try:
        assert [p.wait(timeout=300) for p in procs] == [0] * len(procs)
    finally:  # a writer that timed out is ended here, not left running past the test
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()


def test_two_processes_write_one_sample_in_slabs(tmp_path):
    """Two writer processes each write their x slab of one sample (whole chunks, their own
    digests); status is written by the commit alone, which refuses while a slab is missing."""
    url = str(tmp_path / "store")
    group = open_store(url, mode="a").require_group("s0", HEAT, BIG, n_samples=1, chunk_x=4)
    cuts = chunk_slabs(17, 4, 2)
    assert cuts == [(0, 12), (12, 17)]
    fields = np.random.default_rng(7).normal(size=group.sample_shape).astype(np.float32)
    record = array_sample(BIG, 5)
    record.fields = None

    _write_slabs(url, group.path, cuts[:1])
    with pytest.raises(StoreError, match=r"x rows \[12, 16\), \[16, 17\) have not landed"):
        group.commit(0, record)
    assert group.status().tolist() == [MISSING]
    _write_slabs(url, group.path, cuts[1:])
    group.commit(0, record)

    reread = open_store(url).group(group.path)
    assert reread.status().tolist() == [OK] and reread.info(0)["seed"] == 5
    np.testing.assert_array_equal(reread.read(0), fields)
    np.testing.assert_array_equal(reread.read_slab(0, "x", 12, 17), fields[:, :, 12:])
    assert store_problems(reread.store) == {group.path: []}
    np.testing.assert_allclose(
        reread.normalisation()["mean"], [fields.astype(np.float64).mean()], rtol=1e-12
    )

    with pytest.raises(StoreError, match=r"committed \(status ok\); discard\(\) it"):
        group.write_slab(0, 0, 12, fields[:, :, :12])
    group.discard(0)  # a rewrite: nothing is trusted, and the commit waits for every slab
    with pytest.raises(StoreError, match=r"x rows \[0, 4\), .* have not landed"):
        group.commit(0, record)
    with pytest.raises(UserInputError, match=r"x slab \[2, 12\) is not whole chunks of 4"):
        group.write_slab(0, 2, 12, fields[:, :, 2:12])
    bad = fields[:, :, :12].copy()
    bad[0, 0, 0, 0, 0] = np.inf
    with pytest.raises(UserInputError, match="NaN/Inf"):
        group.write_slab(0, 0, 12, bad)
    with pytest.raises(UserInputError, match="fields=None"):
        group.commit(0, array_sample(BIG, 5))


def test_slab_writes_and_commit_on_every_store(store_url):
    """The slab writer's steps on a local and a memory store: slabs in any order, the commit
    once both landed, a discard that the next commit waits on."""
    group = open_store(store_url, mode="a").require_group("s0", HEAT, BIG, n_samples=2, chunk_x=3)
    fields = array_sample(BIG, 1).fields
    record = array_sample(BIG, 1)
    record.fields = None
    for lo, hi in reversed(chunk_slabs(17, 3, 2)):  # [(0, 9), (9, 17)]
        group.write_slab(1, lo, hi, np.ascontiguousarray(fields[:, :, lo:hi]))
    group.commit(1, record)
    reread = open_store(store_url).group(group.path)
    np.testing.assert_array_equal(reread.read(1), fields)
    assert store_problems(reread.store)[group.path][0].path.endswith("sample 0")
    group.discard(1)
    assert open_store(store_url).group(group.path).status().tolist() == [MISSING, MISSING]
    with pytest.raises(StoreError, match=r"x rows \[0, 3\), .*\[15, 17\) have not landed"):
        group.commit(1, record)


def test_samples_in_chunks_read_everywhere(tmp_path):
    """A group split into time and x chunks passes verify, and xarray, ``store plot`` and the
    loader read its samples as stored."""
    url = str(tmp_path / "store")
    group = open_store(url, mode="a").require_group(
        "s0", HEAT, BIG, n_samples=3, chunk_time=2, chunk_x=4
    )
    samples = [array_sample(BIG, k) for k in range(3)]
    for k, s in enumerate(samples):
        group.write(k, s)
    assert group.chunks["fields"].blocks == 5 * 5
    verify(url)
    ds = xr.open_zarr(url, group=group.path, consolidated=False)
    assert ds["chunk_checksum"].dims == ("sample", "t_block", "x_block")
    np.testing.assert_array_equal(ds["fields"].isel(sample=2).values, samples[2].fields)
    assert plot_sample(group, 1, tmp_path / "pic.png").read_bytes()[:4] == b"\x89PNG"
    batches = list(StoreDataset(url, batch_size=2, seed=None, prefetch=1))
    got = {int(i): b["fields"][j].numpy() for b in batches for j, i in enumerate(b["index"])}
    for k, s in enumerate(samples):
        np.testing.assert_array_equal(got[k], s.fields.swapaxes(0, 1))


def test_a_sample_is_four_files_and_one_slab_of_one_chunk_commits(tmp_path):
    """A one-chunk sample is its fields, its record (seed, parameters, statistics,
    checksum, moments), its provenance and its status; written as the single slab of one
    writer, its record holds the digests until the commit completes it."""
    url = str(tmp_path / "store")
    group = open_store(url, mode="a").require_group("s0", HEAT, GRID, n_samples=2)
    assert not group.blocked
    sample = array_sample(GRID, 3)
    before = set((tmp_path / "store").rglob("c.*"))
    group.write(0, sample)
    written = sorted(
        str(p.relative_to(tmp_path / "store" / group.path))
        for p in set((tmp_path / "store").rglob("c.*")) - before
    )
    assert written == ["fields/c.0.0.0.0.0.0", "provenance/c.0", "record/c.0.0", "status/c.0"]

    record = array_sample(GRID, 4)
    record.fields = None
    with pytest.raises(StoreError, match=r"x rows \[0, 9\) have not landed"):
        group.commit(1, record)
    group.write_slab(1, 0, 9, array_sample(GRID, 4).fields)
    assert group.status().tolist() == [OK, MISSING] and group.column("seed")[1] == -1
    group.commit(1, record)
    reread = open_store(url).group(group.path)
    assert reread.info(1)["seed"] == 4 and reread.status().tolist() == [OK, OK]
    np.testing.assert_array_equal(reread.read(1), array_sample(GRID, 4).fields)
    assert store_problems(reread.store) == {group.path: []}
    group.discard(1)
    with pytest.raises(StoreError, match="have not landed"):
        group.commit(1, record)
