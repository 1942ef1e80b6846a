"""Streaming loaders: batches, slots and statistics of mixed families, sharding, errors; torch
and Ray."""

import gc
import threading
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from pdeladder.dataset import loader as loader_module
from pdeladder.dataset.catalog import Catalog
from pdeladder.dataset.loader import StoreDataset
from pdeladder.dataset.store import open_store
from pdeladder.errors import StoreError, UserInputError
from pdeladder.solvers import Sample, SolveStats, get_family
from pdeladder.trainer.processor import DataProcessor

from .conftest import GRID, HEAT, array_sample, failed_sample

ADV = get_family("advection_diffusion")
LINE = HEAT.grid(1, 9, 5)


def _adv_sample(seed: int) -> Sample:
    fields = np.random.default_rng(seed).normal(-2.0, 0.5, (5, 3, 9, 9, 1)).astype(np.float32)
    return Sample(ADV.name, fields, GRID, ADV.parse_params(), seed, SolveStats())


@pytest.fixture
def mixed_store(tmp_path, heat_samples) -> tuple[str, dict]:
    """heat 2D (4 real solves + 1 failure), advection-diffusion 2D (3), heat 1D (3 samples):
    two grid buckets, two families in one of them. Returns the URL and {(group, i): fields}."""
    url = str(tmp_path / "store")
    store = open_store(url, mode="a")
    data = {}
    heat2 = store.require_group("s0", HEAT, GRID, n_samples=5)
    for k, s in enumerate(heat_samples):
        heat2.write(k, s)
        data[(heat2.path, k)] = s.fields
    heat2.write(4, failed_sample())
    adv = store.require_group("s0", ADV, GRID, n_samples=3)
    heat1 = store.require_group("s1", HEAT, LINE)
    for k in range(3):
        adv.write(k, _adv_sample(k))
        data[(adv.path, k)] = _adv_sample(k).fields
        s = array_sample(LINE, 10 + k)
        data[(heat1.path, heat1.append(s))] = s.fields
    heat2.update_normalisation()  # cached for one group, merged on the fly for the others
    return url, data


def _seen(batches) -> list[tuple[str, int]]:
    return [(b["group"], int(i)) for b in batches for i in b["index"]]


def test_batches_restore_the_stored_samples(mixed_store):
    url, data = mixed_store
    ds = StoreDataset(url, batch_size=2, seed=3)
    layout = ds.catalog.layout
    assert layout.families == ["advection_diffusion", "heat"]
    assert layout.slots == ["u", "bx", "by"] and layout.n_params == 4
    batches = list(ds)
    assert sorted(_seen(batches)) == sorted(data)  # every ok sample once, the failure never
    heat_all = np.concatenate([f.ravel() for (g, _), f in data.items() if "heat" in g])
    heat = layout.families.index("heat")
    assert layout.normalisation["heat"]["mean"][0] == pytest.approx(heat_all.mean(), rel=1e-5)
    assert layout.normalisation["heat"]["std"][0] == pytest.approx(heat_all.std(), rel=1e-5)
    assert layout.normalisation["heat"]["std"][1:] == [1.0, 1.0]  # slots heat does not have
    for b in batches:
        B, C, T, X, Y, Z = b["fields"].shape
        assert C == 3 and T == 5 and (X, Y, Z) == ((9, 9, 1) if b["grid"].dim == 2 else (9, 1, 1))
        assert b["fields"].dtype == torch.float32 and b["family"].shape == (B,)
        dtypes = {k: v.dtype for k, v in b.items() if isinstance(v, torch.Tensor)}
        assert dtypes == {"fields": torch.float32, "present": torch.bool,
                          "predicted": torch.bool, "params": torch.float32,
                          "params_norm": torch.float32, "family": torch.int64,
                          "solved": torch.bool, "index": torch.int64}  # fmt: skip
        assert b["present"].shape == b["predicted"].shape == (B, C)
        assert isinstance(b["group"], str) and len(set(b["family"].tolist())) == 1  # one group
        assert b["solved"].all()
        for k in range(B):
            mask = b["present"][k]
            stored = data[(b["group"], int(b["index"][k]))]
            np.testing.assert_array_equal(b["fields"][k][mask].numpy(), stored.swapaxes(0, 1))
            assert not b["fields"][k][~mask].any()  # physical (C, T, X, Y, Z), zeros where absent
            if b["family"][k] == heat:
                assert mask.tolist() == [True, False, False]
                assert b["predicted"][k].tolist() == [True, False, False]
                assert b["params"][k, 2:].tolist() == [0.0, 0.0]  # padding
            else:
                assert b["predicted"][k].tolist() == [True, False, False]  # bx, by: inputs
                assert b["params"][k].tolist() == pytest.approx(ADV.parse_params().vector())
            assert b["params_norm"][k].abs().max() <= 1.0


def test_shards_are_disjoint_and_even(mixed_store):
    url, data = mixed_store
    catalog = Catalog.build(url)
    ranks = [list(StoreDataset(catalog, batch_size=2, rank=r, dp=2)) for r in (0, 1)]
    seen = [set(_seen(b)) for b in ranks]
    assert not seen[0] & seen[1]
    assert len(ranks[0]) == len(ranks[1])  # equal batch counts keep DDP ranks in step
    assert len(seen[0] | seen[1]) >= len(data) - 2  # at most world_size - 1 left out per bucket
    again = StoreDataset(catalog, batch_size=2, rank=0, dp=2)
    assert _seen(again) == _seen(ranks[0])  # deterministic
    again.set_epoch(1)
    assert _seen(again) != _seen(ranks[0])  # reshuffled per epoch


def test_epochs_reuse_the_reader_and_stopping_early_is_clean(mixed_store):
    """The opened store, threads and buffers of a process serve every epoch; a loop left after
    one batch leaves no read behind, and the next epoch delivers the same batches."""
    url, _ = mixed_store
    ds = StoreDataset(url, batch_size=2, seed=5)
    first = list(ds)
    reader = ds._reader
    stopped = iter(ds)
    next(stopped)
    stopped.close()
    again = list(ds)
    assert ds._reader is reader
    assert _seen(again) == _seen(first)
    for a, b in zip(again, first, strict=True):
        assert torch.equal(a["fields"], b["fields"]) and a["fields"] is not b["fields"]


def test_prefetch_zero_reads_the_same_batches_in_the_consumers_thread(mixed_store):
    url, _ = mixed_store
    background = list(StoreDataset(url, batch_size=2, seed=4))
    before = {t.name for t in threading.enumerate()}
    inline = list(StoreDataset(url, batch_size=2, seed=4, prefetch=0))
    assert not {t.name for t in threading.enumerate()} - before  # no thread was started
    assert _seen(inline) == _seen(background)
    for a, b in zip(inline, background, strict=True):
        assert torch.equal(a["fields"], b["fields"]) and torch.equal(a["params"], b["params"])
    with pytest.raises(UserInputError, match="prefetch must be 0 or more"):
        StoreDataset(url, batch_size=2, prefetch=-1)


def test_reader_threads_normalise_as_the_processor_does(mixed_store):
    """``normalise=True``: each batch's ``normalised`` is bitwise ``(fields - mean) / std`` with
    the layout's statistics and what the processor makes of its fields (two families, absent
    slots), and the processor takes it; its arrays are recycled once dropped, never shared by
    two live batches."""
    url, _ = mixed_store
    ds = StoreDataset(url, batch_size=2, seed=1, normalise=True)
    layout = ds.catalog.layout
    processor = DataProcessor(layout)
    held = list(ds) + list(ds)  # two epochs, all alive
    pointers = [b["normalised"].data_ptr() for b in held]
    assert len(set(pointers)) == len(pointers)
    for b in held:
        stats = layout.normalisation[layout.families[int(b["family"][0])]]
        mean, std = (torch.tensor(stats[k]).view(1, -1, 1, 1, 1, 1) for k in ("mean", "std"))
        assert torch.equal(b["normalised"], (b["fields"] - mean) / std)
        plain = {k: v for k, v in b.items() if k != "normalised"}
        assert torch.equal(processor.normalised(b), processor.normalised(plain))
        assert b["normalised"][:, ~b["present"][0]].eq(0).all()
    del held, b, plain
    gc.collect()
    assert {b["normalised"].data_ptr() for b in ds} & set(pointers)  # recycled


def test_dataloader_workers_split_a_rank(mixed_store, monkeypatch):
    url, data = mixed_store
    ds = StoreDataset(url, batch_size=2, seed=None)
    # one real spawned worker: the dataset pickles, re-opens the store and streams from there
    loader = DataLoader(ds, batch_size=None, num_workers=1, multiprocessing_context="spawn")
    assert sorted(_seen(loader)) == sorted(data)
    # the split between workers, in this process (a worker differs only in get_worker_info):
    # batch i of the rank's epoch to worker i mod 2
    parts = []
    for worker in (0, 1):
        info = SimpleNamespace(num_workers=2, id=worker)
        monkeypatch.setattr(loader_module, "get_worker_info", lambda info=info: info)
        parts.append(list(ds))
    assert not set(_seen(parts[0])) & set(_seen(parts[1]))
    assert len(parts[0]) == len(parts[1]) == 3  # 2 + 2 + 2 batches of 2 samples
    assert sorted(_seen(parts[0]) + _seen(parts[1])) == sorted(data)


def test_corrupt_chunk_stops_the_loader_naming_the_sample(mixed_store, tmp_path):
    url, _ = mixed_store
    chunk = next((tmp_path / "store/s0/heat/2d_n9_t5/fields").glob("c.2.*"))
    chunk.write_bytes(b"\x00" * 32)
    with pytest.raises(StoreError, match="s0/heat/2d_n9_t5 sample 2"):
        list(StoreDataset(url, batch_size=2))


# Ray Data's own DataContext() assigns its deprecated fields (use_push_based_shuffle,
# use_polars, ...) and warns about them from ray.data.context.
@pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context")
def test_ray_data_shards_stream_the_same_batches(ray_local, mixed_store):
    from pdeladder.dataset.ray_source import iter_store_batches, read_store

    url, data = mixed_store
    catalog = Catalog.build(url)
    splits = read_store(catalog).streaming_split(2, equal=False)
    out: list[list[dict]] = [[], []]

    def consume(rank: int) -> None:
        out[rank] = list(iter_store_batches(splits[rank], catalog, batch_size=2, seed=rank))

    threads = [threading.Thread(target=consume, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    seen = [_seen(b) for b in out]
    assert not set(seen[0]) & set(seen[1])
    assert sorted(seen[0] + seen[1]) == sorted(data)
    for b in out[0] + out[1]:
        assert isinstance(b["group"], str)  # one group per batch
        for k in range(len(b["index"])):
            mask = b["present"][k]
            stored = data[(b["group"], int(b["index"][k]))]
            np.testing.assert_array_equal(b["fields"][k][mask].numpy(), stored.swapaxes(0, 1))


def test_the_data_layer_loads_no_trainer_module(fresh_python):
    """``dataset/`` holds the slot layout and the normaliser that the trainer uses: streaming a
    normalised batch from a store imports nothing of ``pdeladder.trainer`` (fresh interpreter,
    so ``sys.modules`` starts empty)."""
    code = (
        "import sys\n"
        "from pdeladder.dataset.loader import StoreDataset\n"
        "from pdeladder.dataset.ray_source import read_store\n"
        "from pdeladder.dataset.slots import Normaliser, SlotLayout\n"
        "print(sorted(m for m in sys.modules if m.startswith('pdeladder.trainer')))\n"
    )
    assert fresh_python(code)[-1] == "[]"
