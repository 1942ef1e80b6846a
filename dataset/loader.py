"""Streaming torch loader over a store: :class:`StoreDataset`, an ``IterableDataset`` of batches.

Pipeline: catalog (ok samples; status, checksums, moments, params read once) → shard by rank and
DataLoader worker → plan batches by grid → per sample (a job: one large sample, or several small
ones of a batch, ``JOB_BYTES``), in background threads running ``prefetch`` batches' samples
ahead (as many threads as cores for a local store, one per read up to 16 for a remote one): read
it straight into its slot of the batch array where that slot is contiguous, else into an array
the thread reuses (a local store's uncompressed chunks straight from the file, others decoded in
place), check its checksum, normalise it per channel with the store's statistics in place → once
a batch's samples are in, collate the rest around it. The consumer only takes finished batches;
the samples of one batch are read side by side, so even the first batch comes in a fraction of a
batch's read time. With ``prefetch=0`` the same jobs run in the consumer's thread instead. The
store's metadata, the threads and their arrays are kept across epochs (per process). Whole
arrays are never loaded; a corrupt chunk or a sample that is not ok raises a StoreError naming
it.

Each item is one batch, a dict::

    fields        (B, T, C, X, Y, Z) float32  normalised: (x - mean) / std; 0 in empty slots
    channel_mask  (B, C) bool     slot c holds a channel of the sample's family
    input_mask    (B, C) bool     slot c holds an input (coefficient) channel, not a prediction
    mean, std     (B, C) float32  per-slot statistics: physical = fields * std + mean
                                  (0 and 1 where unused or when normalize=False)
    params        (B, P) float32  parameter vectors in the family's order, 0-padded
    param_mask    (B, P) bool     parameter slot p is used by the sample's family
    family        list[str]       (B,) family names
    family_id     (B,) int64      index into ``dataset.families``
    t_end         (B,) float64    final time; snapshot k is at k * t_end / (T - 1)
    dim           int             spatial dimension of the batch (1: Y = Z = 1, 2: Z = 1)
    resolution    int             points per spatial axis, boundaries included
    group         list[str]       (B,) group path of each sample
    index         (B,) int64      sample index in its group

Every batch has one grid (dim, resolution, T); channel slots are ``dataset.channels`` (the
union of the families' channel names: a name always has the same slot), parameter slots are
``0 .. dataset.n_params - 1``. With a Grid built from ``(dim, resolution, T, t_end[b])`` a
family's residual applies to ``fields[b] * std[b] + mean[b]`` restricted to its slots.

Sharding: each (rank, worker) gets a disjoint share of every grid bucket, the same number of
samples per bucket, so ranks see the same number of batches (needed by DDP/FSDP). Use it with
``torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=k)`` and call
:meth:`StoreDataset.set_epoch` before each epoch to reshuffle.
"""

import math
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch.distributed as dist
from torch.utils.data import IterableDataset, get_worker_info

from pdeladder.dataset.catalog import Catalog, SampleRef
from pdeladder.dataset.chunks import is_local, read_threads
from pdeladder.dataset.collate import (
    ScratchArrays,
    batch_dict,
    batch_plan,
    fill,
    new_fields,
    prefetched,
    shard,
    slot_of,
)
from pdeladder.dataset.store import Group, read_samples
from pdeladder.errors import UserInputError

#: Batches whose samples are read ahead of the consumer. Two keep a consumer that computes
#: as long as a batch takes to read from waiting; more absorb uneven reads.
PREFETCH_BATCHES = 3
#: Bytes of fields one background job reads at least (several small samples of a batch, or
#: one large one): a job's hand-off between threads costs about 0.1 ms, as much as reading
#: a 64² sample, while a large sample is worth a job of its own.
JOB_BYTES = 1 << 20


class StoreDataset(IterableDataset):
    """Batches of a store's ok samples, streamed; see the module docstring for their layout.

    Args:
        source: store URL, or a :class:`Catalog` built with :meth:`Catalog.build`.
        batch_size: samples per batch (the last batch of each grid bucket may be smaller).
        groups: glob patterns of group paths to read (``["stage1/*"]``); all if None.
        seed: shuffle seed; None reads in store order.
        normalize: normalise channels with the store's mean and std.
        rank, world_size: this process's share; default from ``torch.distributed`` if
            initialised, else 0 and 1.
        prefetch: batches read ahead in background threads; 0 reads each batch in the
            consumer's thread when it is asked for (like a DataLoader with ``num_workers=0``):
            on machines where waking a thread costs more than reading a small batch (a
            shared 2-core VM), the faster way to read small samples, at the price of no
            reading while the consumer computes.
    """

    def __init__(
        self,
        source: str | Catalog,
        *,
        batch_size: int,
        groups: list[str] | None = None,
        seed: int | None = 0,
        normalize: bool = True,
        rank: int | None = None,
        world_size: int | None = None,
        prefetch: int = PREFETCH_BATCHES,
    ):
        if batch_size < 1:
            raise UserInputError(f"batch_size must be positive, got {batch_size}")
        if prefetch < 0:
            raise UserInputError(f"prefetch must be 0 or more, got {prefetch}")
        self.catalog = (
            source if isinstance(source, Catalog) else Catalog.build(source, groups=groups)
        )
        self.batch_size, self.seed, self.normalize = batch_size, seed, normalize
        initialised = dist.is_available() and dist.is_initialized()
        self.rank = rank if rank is not None else (dist.get_rank() if initialised else 0)
        self.world_size = world_size or (dist.get_world_size() if initialised else 1)
        self.epoch = 0
        self.prefetch = prefetch
        self._reader: _Reader | None = None

    def __getstate__(self) -> dict:
        return self.__dict__ | {"_reader": None}  # DataLoader workers open the store themselves

    @property
    def families(self) -> list[str]:
        return self.catalog.families

    @property
    def channels(self) -> list[str]:
        return self.catalog.channels

    @property
    def n_params(self) -> int:
        return self.catalog.n_params

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def samples(self) -> list[SampleRef]:
        """The samples this process (and DataLoader worker) reads in the current epoch."""
        info = get_worker_info()
        workers, worker = (1, 0) if info is None else (info.num_workers, info.id)
        return shard(
            self.catalog.refs,
            seed=self.seed,
            epoch=self.epoch,
            part=self.rank * workers + worker,
            parts=self.world_size * workers,
        )

    def __iter__(self):
        reader = self._process_reader()
        groups, scratch, catalog = reader.groups, reader.scratch, self.catalog

        def load(job: tuple[list[SampleRef], np.ndarray, range]) -> None:
            refs, fields, run = job
            groups_ = [groups[refs[b].group] for b in run]
            # straight into the batch where a sample's slot is contiguous, else via an array of
            # this thread's
            dests = [slot_of(fields, b, refs[b], catalog) for b in run]
            missing = [k for k, d in enumerate(dests) if d is None]
            taken = scratch.take([groups_[k].chunks["fields"].shape for k in missing])
            for k, array in zip(missing, taken, strict=True):
                dests[k] = array
            items = [
                (g, refs[b].index, refs[b].checksum) for g, b in zip(groups_, run, strict=True)
            ]
            for b, data in zip(run, read_samples(items, out=dests), strict=True):
                fill(fields, b, refs[b], data, catalog, normalize=self.normalize)

        def jobs() -> Iterator[tuple[list[SampleRef], np.ndarray, range]]:
            for refs in batch_plan(self.samples(), self.batch_size):
                shape = groups[refs[0].group].chunks["fields"].shape
                fields = new_fields(refs, catalog, shape)
                step = max(1, -(-JOB_BYTES // (4 * math.prod(shape))))
                yield from ((refs, fields, range(b, min(b + step, len(refs))))
                            for b in range(0, len(refs), step))  # fmt: skip

        # jobs ahead: prefetch batches of large samples, more of small ones (at most
        # prefetch * batch_size * JOB_BYTES bytes); none with prefetch 0
        done = (
            prefetched(load, jobs(), reader.depth, reader.pool)
            if self.prefetch
            else ((job, load(job)) for job in jobs())
        )
        for (refs, fields, run), _ in done:
            if run.stop == len(refs):  # the batch's samples are all in (jobs finish in order)
                yield batch_dict(refs, fields, catalog, normalize=self.normalize)

    def _process_reader(self) -> "_Reader":
        """This process's reader, made on its first epoch and kept for the next ones."""
        depth = self.prefetch * self.batch_size
        reader = self._reader
        if reader is None or reader.pid != os.getpid() or reader.depth != depth:
            store = self.catalog.open()
            groups = {p: store.group(p) for p in self.catalog.groups}
            threads = read_threads(depth, local=is_local(store.root.store))
            pool = ThreadPoolExecutor(threads, thread_name_prefix="pdeladder-loader")
            reader = self._reader = _Reader(os.getpid(), depth, groups, pool, ScratchArrays())
        return reader


@dataclass(frozen=True)
class _Reader:
    """What a process keeps across epochs: the opened groups (their metadata costs
    milliseconds to read, more than a small sample), the prefetch threads and the arrays they
    read into (already mapped: no page faults)."""

    pid: int
    depth: int  # jobs read ahead, which sizes the pool
    groups: dict[str, Group]
    pool: ThreadPoolExecutor
    scratch: ScratchArrays
