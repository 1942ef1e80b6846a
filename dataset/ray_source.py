"""Ray Data over a store: :class:`StoreDatasource` (Zarr v3; Ray's ``read_zarr`` reads only v2)
and :func:`iter_store_batches`, which turns a worker's share of a dataset into the batches of
:mod:`pdeladder.dataset.loader` (the same dict; one group per batch).

Read tasks run in Ray workers and re-open the store from its URL (so ``memory://`` stores,
which live in one process, are not for Ray). Each block holds samples of one group, as rows
``{"group": str, "index": int64, "fields": (T, C_group, X, Y, Z) float32}``; a block never
holds a whole array. In Ray Train, pass the dataset as ``datasets={"train": ds}`` and call
``iter_store_batches(ray.train.get_dataset_shard("train"), catalog, ...)`` in each worker:
Ray's streaming split gives every worker a disjoint share, Ray prefetches blocks in the
background, and a seeded shuffle buffer mixes them before bucketing.
"""

import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import ray.data
from ray.data.block import BlockAccessor, BlockMetadata
from ray.data.datasource import Datasource, ReadTask

from pdeladder.dataset.catalog import Catalog, SampleRef
from pdeladder.dataset.collate import Item, bucketed, collate, shuffled

#: Samples per block: small blocks keep memory bounded and let Ray balance the split.
BLOCK_SAMPLES = 8


class StoreDatasource(Datasource):
    """The ok samples of a :class:`Catalog` as a Ray Datasource."""

    def __init__(self, catalog: Catalog):
        super().__init__()
        self.catalog = catalog

    def _bytes(self, ref: SampleRef) -> int:
        entry = self.catalog.groups[ref.group]
        return 4 * entry.grid.snapshots * entry.channels * math.prod(entry.grid.shape)

    def estimate_inmemory_data_size(self) -> int:
        return sum(self._bytes(r) for r in self.catalog.refs())

    def get_read_tasks(
        self, parallelism: int, per_task_row_limit: int | None = None, data_context: Any = None
    ) -> list[ReadTask]:
        blocks: list[list[SampleRef]] = []
        for path, entry in self.catalog.groups.items():
            refs = entry.refs(path, entry.train)
            blocks += [refs[i : i + BLOCK_SAMPLES] for i in range(0, len(refs), BLOCK_SAMPLES)]
        tasks = max(1, min(parallelism, len(blocks)))
        return [
            ReadTask(
                _reader(self.catalog, blocks[t::tasks]),
                BlockMetadata(
                    num_rows=sum(len(b) for b in blocks[t::tasks]),
                    size_bytes=sum(self._bytes(r) for b in blocks[t::tasks] for r in b),
                    exec_stats=None,
                    input_files=None,
                ),
                per_task_row_limit=per_task_row_limit,
            )
            for t in range(tasks)
        ]


def _reader(catalog: Catalog, blocks: list[list[SampleRef]]):
    url, options = catalog.url, catalog.storage_options

    def read() -> Iterator[Any]:
        from pdeladder.dataset.group import read_samples
        from pdeladder.dataset.store import open_store

        store = open_store(url, storage_options=options)
        for block in blocks:
            group = store.group(block[0].group)
            fields = np.stack(read_samples([(group, r.index, r.checksum) for r in block]))
            yield BlockAccessor.batch_to_block(
                {
                    "group": np.array([r.group for r in block]),
                    "index": np.array([r.index for r in block], dtype=np.int64),
                    "fields": fields,
                }
            )

    return read


def read_store(catalog: Catalog) -> ray.data.Dataset:
    """A Ray Dataset of the catalog's samples, one row per sample."""
    return ray.data.read_datasource(StoreDatasource(catalog))


def iter_store_batches(
    share: Any,
    catalog: Catalog,
    *,
    batch_size: int,
    seed: int | None = 0,
    shuffle_buffer: int = 64,
) -> Iterator[dict]:
    """Batches (see :mod:`pdeladder.dataset.loader`) from ``share``, a Ray ``Dataset`` or a
    worker's ``DataIterator`` of one (Ray calls it a dataset shard); ``seed=None`` keeps the
    order Ray delivers."""
    refs = {(r.group, r.index): r for r in catalog.refs()}

    def items() -> Iterator[Item]:
        for block in share.iter_batches(batch_size=None, batch_format="numpy", prefetch_batches=2):
            for group, index, fields in zip(
                block["group"], block["index"], block["fields"], strict=True
            ):
                yield refs[(str(group), int(index))], np.asarray(fields, dtype=np.float32)

    stream = items() if seed is None else shuffled(items(), size=shuffle_buffer, seed=seed)
    for batch in bucketed(stream, batch_size):
        yield collate(batch, catalog)
