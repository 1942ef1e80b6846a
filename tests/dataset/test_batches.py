"""The trainer's batches from the loader: a pure function of the step (a resumed run reads
what an uninterrupted one would have), batch i of an epoch on data-parallel rank i mod dp,
one group per batch, the per-group held-out split, and x slabs read by domain ranks."""

import itertools

import pytest
import torch

from pdeladder.dataset import chunks as chunks_module
from pdeladder.dataset.catalog import Catalog
from pdeladder.dataset.loader import StoreDataset
from pdeladder.dataset.store import open_store
from pdeladder.errors import UserInputError
from pdeladder.slabs import DomainTiling
from pdeladder.trainer.distributed.collectives import DomainGroup

from .conftest import HEAT, array_sample

COARSE, FINE = HEAT.grid(2, 9, 3), HEAT.grid(2, 17, 3)


@pytest.fixture
def store(tmp_path) -> str:
    """Two heat groups, 7 and 5 samples, chunked in x (4 points a chunk)."""
    url = str(tmp_path / "store")
    s = open_store(url, mode="a")
    for grid, n in ((COARSE, 7), (FINE, 5)):
        g = s.require_group("s", HEAT, grid, n_samples=n, compression="none", chunk_x=4)
        for i in range(n):
            g.write(i, array_sample(grid, 10 * n + i))
    return url


def _key(batch) -> tuple[str, list[int]]:
    return batch["group"], batch["index"].tolist()


def _equal(a, b) -> bool:
    return _key(a) == _key(b) and all(
        torch.equal(a[k], b[k]) for k in a if isinstance(a[k], torch.Tensor)
    )


def test_a_resumed_run_reads_the_batches_of_an_uninterrupted_one(store):
    ds = StoreDataset(store, batch_size=2, seed=7)
    per_epoch = len(ds.plan(0))  # (4 + 3 batches of 7 and 5 samples)
    assert per_epoch == 7
    steps = 2 * per_epoch + 3  # across two epoch boundaries
    uninterrupted = list(itertools.islice(ds.batches(0), steps))
    for resume in (1, per_epoch, per_epoch + 4):
        again = StoreDataset(store, batch_size=2, seed=7)  # a restarted process
        resumed = list(itertools.islice(again.batches(resume), steps - resume))
        assert all(_equal(a, b) for a, b in zip(resumed, uninterrupted[resume:], strict=True))
    assert _equal(StoreDataset(store, batch_size=2, seed=7).batch(9), uninterrupted[9])
    first, second = ([_key(b) for b in uninterrupted[e * 7 : e * 7 + 7]] for e in (0, 1))
    assert first != second and sorted(first) != sorted(second)  # each epoch reshuffled
    seen = sorted((g, i) for g, idx in first for i in idx)
    assert len(seen) == len(set(seen)) == 12  # every sample once an epoch


def test_batch_i_of_an_epoch_goes_to_rank_i_mod_world(store):
    whole = StoreDataset(store, batch_size=2, seed=3)
    for world_size in (2, 3):
        for epoch in (0, 1):
            full = [(p, idx.tolist()) for p, idx in whole.plan(epoch)]
            per_rank = len(full) // world_size
            for rank in range(world_size):
                ds = StoreDataset(store, batch_size=2, seed=3, rank=rank, dp=world_size)
                mine = [(p, idx.tolist()) for p, idx in ds.plan(epoch)]
                assert mine == full[rank::world_size][:per_rank]  # the same count on every rank
    for batch in itertools.islice(whole.batches(0), 7):  # one group (one grid) per batch
        assert batch["fields"].shape[3] == (9 if batch["group"].endswith("n9_t3") else 17)


def test_held_out_samples_are_each_groups_last_and_never_trained_on(store):
    catalog = Catalog.build(store, held_out=0.3)
    tests = {p.split("/")[-1]: e.test.tolist() for p, e in catalog.groups.items()}
    assert tests == {"2d_n9_t3": [4, 5, 6], "2d_n17_t3": [3, 4]}
    ds = StoreDataset(catalog, batch_size=2, seed=0)
    trained = {(b["group"], i) for b in itertools.islice(ds.batches(0), 20) for i in b["index"]}
    held = {(p, int(i)) for p, e in catalog.groups.items() for i in e.test}
    assert trained and not trained & held
    shares = [StoreDataset(catalog, batch_size=2, rank=r, dp=2).held_out() for r in (0, 1)]
    assert [len(s) for s in shares] == [2, 2]  # 3 batches: rank 1 repeats one, weight 0
    assert [w for s in shares for _, w in s] == [1.0, 1.0, 1.0, 0.0]
    counted = {(b["group"], int(i)) for s in shares for b, w in s if w for i in b["index"]}
    assert counted == held


def test_domain_ranks_read_only_their_x_slab(store, monkeypatch):
    """Two and three x ranks (17 points over chunks of 4: uneven): each reads just the x chunks
    its slab meets (its rows plus the partial chunks at its ends), and the slabs put together
    are the whole batch."""
    total = [0]
    real = chunks_module._read_file

    def read_file(st, key):  # counts the fields bytes the local store reads
        found = real(st, key)
        if found is not None and "/fields/" in key:
            total[0] += len(found)
        return found

    monkeypatch.setattr(chunks_module, "_read_file", read_file)
    catalog = Catalog.build(store, groups=["s/heat/2d_n17_t3"])
    whole = StoreDataset(catalog, batch_size=2, seed=1).batch(0)
    column = 4 * FINE.snapshots * 4 * 17  # bytes of one chunk column: T, 4 x points, Y (C = 1)
    for k in (2, 3):
        parts = []
        for index in range(k):
            domain = DomainGroup(None, DomainTiling(x=k), tuple(range(k)), index)
            ds = StoreDataset(catalog, batch_size=2, seed=1, domain=domain)
            slab = domain.slab((FINE.snapshots, *FINE.shape))
            lo, hi = slab.lo[1], slab.hi[1]
            total[0] = 0
            parts.append(ds.batch(0))
            assert total[0] == 2 * (-(-hi // 4) - lo // 4) * column  # 2 samples a batch
            assert total[0] <= 2 * ((hi - lo) / 4 + 2) * column
        assert all(_key(p) == _key(whole) for p in parts)
        fields = torch.cat([p["fields"] for p in parts], dim=3)
        assert torch.equal(fields, whole["fields"])


def test_a_domain_that_splits_time_is_refused(tmp_path):
    """The loader reads x slabs only: a domain group that splits time is refused with a
    one-line error naming the group, before anything is read."""
    grid = HEAT.grid(2, 9, 5)
    g = open_store(str(tmp_path / "store"), mode="a").require_group("s", HEAT, grid, n_samples=1)
    g.write(0, array_sample(grid, 0))
    domain = DomainGroup(None, DomainTiling(t=2), (0, 1), 0)
    with pytest.raises(UserInputError, match=f"{g.path}: .*the domain splits time"):
        StoreDataset(str(tmp_path / "store"), batch_size=1, domain=domain)
