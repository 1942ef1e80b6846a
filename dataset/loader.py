"""Streaming torch loader over a store: :class:`StoreDataset`, the one way batches of solver
samples are read (training, held-out scores, evaluation, benchmarks).

Pipeline: catalog (ok samples split per group into training and held-out; status, checksums,
params and the slot layout read once) → plan the batches (a pure function of the epoch,
:func:`~pdeladder.dataset.collate.epoch_plan`: one group per batch, batch ``i`` of an epoch to
data-parallel rank ``i mod dp``) → per sample (a job: one large sample, or several small
ones of a batch, ``JOB_BYTES``), in background threads running ``prefetch`` batches' samples
ahead (as many threads as cores for a local store, one per read up to 16 for a remote one):
read it straight into its slot of the batch array where that slot's bytes are the sample's
(a slice of slots, and one channel or one snapshot), else into an array the thread reuses and
from there, transposed, into its slot (a local store's uncompressed chunks straight from the
file, others decoded in place), checking its checksum → once a batch's samples are in, collate the rest
around it. The consumer only takes finished batches; the samples of one batch are read side
by side, so even the first batch comes in a fraction of a batch's read time. With
``prefetch=0`` the same jobs run in the consumer's thread instead. The store's metadata, the
threads and their arrays are kept across epochs (per process). Whole arrays are never loaded;
a corrupt chunk or a sample that is not ok raises a StoreError naming it.

With a ``domain`` group that splits x, every rank of the group gets the group's batches but
reads only its own x slab of each sample (:meth:`~pdeladder.dataset.group.Group.read_slab`:
about ``1/k`` of the sample plus at most one chunk), never the whole sample.

Each item is one batch, a dict (every sample in it of one group, so of one family and grid)::

    fields      float32 (B, C, T, X, Y, Z)  physical units, in the layout's channel slots
                                            (zeros where absent); x is this rank's slab with a
                                            domain group; for unsolved draws only snapshot 0
                                            is meaningful
    present     bool    (B, C)              slots the sample's family has
    predicted   bool    (B, C)              slots the model predicts (present, role output)
    params      float32 (B, P)              physical parameters in the family's order, padded
    params_norm float32 (B, n_params)       the same in [-1, 1] (SlotLayout.normalise_params)
    family      int64   (B,)                family ids (SlotLayout.families)
    solved      bool    (B,)                whether ``fields`` hold a solver trajectory
    grid        Grid                        the shared (global) grid
    group       str | None                  the samples' group path (None: not from a store)
    index       int64   (B,)                sample indices in the group (-1: not from a store)

With ``normalise=True`` a batch also holds

    normalised  float32 (B, C, T, X, Y, Z)  ``fields`` normalised (0 where absent)

made in the reader threads, each job's samples right after their read, so that the consumer
does not pay that pass. Either way one :class:`~pdeladder.dataset.slots.Normaliser` normalises
(the layout's normalisation, from the store's moments:
:func:`~pdeladder.dataset.moments.family_normalisation`): the trainer's data processor takes
the loader's ``normalised`` where the batch holds it.

Training reads batches by step (:meth:`StoreDataset.batch`, :meth:`StoreDataset.batches`), so
a resumed run sees exactly the batches it would have seen. As an ``IterableDataset`` it yields
the current epoch's batches of this rank, split between DataLoader workers: use it with
``torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=k)`` and call
:meth:`StoreDataset.set_epoch` before each epoch to reshuffle.
"""

import itertools
import math
import os
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import IterableDataset, get_worker_info

from pdeladder.dataset.catalog import Catalog
from pdeladder.dataset.chunks import is_local, read_threads
from pdeladder.dataset.collate import (
    FamilySlots,
    Planned,
    RecycledArrays,
    epoch_plan,
    held_out_plan,
    new_fields,
    prefetched,
)
from pdeladder.dataset.group import Group, read_samples
from pdeladder.dataset.slots import Normaliser
from pdeladder.errors import UserInputError

#: Batches whose samples are read ahead of the consumer. Two keep a consumer that computes
#: as long as a batch takes to read from waiting; more absorb uneven reads.
PREFETCH_BATCHES = 3
#: Bytes of fields one background job reads at least (several small samples of a batch, or
#: one large one): a job's hand-off between threads costs about 0.1 ms, as much as reading
#: a 64² sample, while a large sample is worth a job of its own.
JOB_BYTES = 1 << 20

#: group, indices, the batch's fields, its normalised fields (None: not asked for), samples
Job = tuple[str, np.ndarray, np.ndarray, np.ndarray | None, range]


class Box(Protocol):
    """A rank's slab, the box ``[lo, hi)`` of a global ``(T, X, Y, Z)`` grid."""

    @property
    def lo(self) -> tuple[int, ...]: ...
    @property
    def hi(self) -> tuple[int, ...]: ...


class DomainRanks(Protocol):
    """What the loader needs of the ranks that share each sample (the trainer's domain group
    is one): how many they are, and this rank's box of a ``(T, X, Y, Z)`` grid."""

    @property
    def size(self) -> int: ...
    def slab(self, shape: tuple[int, ...]) -> Box: ...


class StoreDataset(IterableDataset):
    """Batches of a store's ok samples, streamed; see the module docstring for their layout.

    Args:
        source: store URL, or a :class:`Catalog` built with :meth:`Catalog.build` (for a
            model's layout or a held-out split).
        batch_size: samples per batch (a group's last batch of an epoch may be smaller).
        groups: glob patterns of group paths to read (``["stage1/*"]``) when ``source`` is a
            URL; all if None.
        seed: shuffle seed; None reads in store order.
        rank, dp: this data-parallel rank and the number of data-parallel ranks; default from
            ``torch.distributed`` if initialised, else 0 and 1.
        prefetch: batches read ahead in background threads; 0 reads each batch in the
            consumer's thread when it is asked for (like a DataLoader with ``num_workers=0``):
            on machines where waking a thread costs more than reading a small batch (a
            shared 2-core VM), the faster way to read small samples, at the price of no
            reading while the consumer computes.
        domain: the ranks that share each sample, this one among them (x splits only): read
            only this rank's slabs.
        normalise: also hand each batch's fields normalised, made in the reader threads (for
            a consumer on the CPU; one on a GPU normalises there, instead of moving twice the
            bytes).
    """

    def __init__(
        self,
        source: str | Catalog,
        *,
        batch_size: int,
        groups: list[str] | None = None,
        seed: int | None = 0,
        rank: int | None = None,
        dp: int | None = None,
        prefetch: int = PREFETCH_BATCHES,
        domain: DomainRanks | None = None,
        normalise: bool = False,
    ):
        if batch_size < 1:
            raise UserInputError(f"batch_size must be positive, got {batch_size}")
        if prefetch < 0:
            raise UserInputError(f"prefetch must be 0 or more, got {prefetch}")
        self.catalog = (
            source if isinstance(source, Catalog) else Catalog.build(source, groups=groups)
        )
        if domain is not None:
            for path, entry in self.catalog.groups.items():
                T = entry.grid.snapshots
                slab = domain.slab((T, *entry.grid.shape))
                if (slab.lo[0], slab.hi[0]) != (0, T):
                    raise UserInputError(
                        f"{path}: the loader reads x slabs; the domain splits time"
                    )
        self.batch_size, self.seed, self.prefetch = batch_size, seed, prefetch
        initialised = dist.is_available() and dist.is_initialized()
        self.rank = rank if rank is not None else (dist.get_rank() if initialised else 0)
        self.dp = dp or (dist.get_world_size() if initialised else 1)
        self.domain = domain if domain is not None and domain.size > 1 else None
        self.epoch = 0
        self.normaliser = Normaliser(self.catalog.layout) if normalise else None
        self._plans: dict[int, list[Planned]] = {}
        self._reader: _Reader | None = None

    def __getstate__(self) -> dict:
        return self.__dict__ | {"_reader": None}  # DataLoader workers open the store themselves

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def plan(self, epoch: int) -> list[Planned]:
        """This rank's batches of ``epoch`` (:func:`~pdeladder.dataset.collate.epoch_plan`)."""
        if epoch not in self._plans:
            self._plans = {
                epoch: epoch_plan(
                    self.catalog,
                    batch_size=self.batch_size,
                    seed=self.seed,
                    epoch=epoch,
                    rank=self.rank,
                    dp=self.dp,
                )
            }
        return self._plans[epoch]

    def planned(self, step: int) -> Planned:
        """The batch of ``step``: epochs of ``len(plan(0))`` steps, each reshuffled."""
        per_epoch = len(self.plan(0))
        return self.plan(step // per_epoch)[step % per_epoch]

    def batch(self, step: int) -> dict[str, Any]:
        """This rank's training batch at ``step``, a pure function of the step."""
        return next(self._stream([self.planned(step)], ahead=False))

    def batches(self, start: int) -> Iterator[dict[str, Any]]:
        """``batch(start), batch(start + 1), ...``, read ahead in background threads so that
        a training step rarely waits for the store."""
        return self._stream((self.planned(s) for s in itertools.count(start)), ahead=True)

    def load(self, path: str, indices: np.ndarray) -> dict[str, Any]:
        """The batch of samples ``indices`` of group ``path``."""
        return next(self._stream([(path, np.asarray(indices))], ahead=False))

    def held_out(self) -> list[tuple[dict[str, Any], float]]:
        """This rank's share of the held-out batches, as (batch, weight) pairs
        (:func:`~pdeladder.dataset.collate.held_out_plan`)."""
        plan = held_out_plan(self.catalog, batch_size=self.batch_size, rank=self.rank, dp=self.dp)
        batches = self._stream([p for p, _ in plan], ahead=True)
        return [(b, w) for b, (_, w) in zip(batches, plan, strict=True)]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        info = get_worker_info()
        workers, worker = (1, 0) if info is None else (info.num_workers, info.id)
        return self._stream(self.plan(self.epoch)[worker::workers], ahead=True)

    def _stream(self, plan: Iterable[Planned], *, ahead: bool) -> Iterator[dict[str, Any]]:
        """The batches of ``plan``, read ahead in the background threads when ``ahead``."""
        reader = self._process_reader()
        layout, entries = self.catalog.layout, self.catalog.groups

        def jobs() -> Iterator[Job]:
            for path, indices in plan:
                entry = entries[path]
                shape = (len(indices), *self._sample_shape(reader.groups[path]))
                # fresh: files read into fresh arrays faster than into recycled ones (measured)
                fields = new_fields(layout, entry.family, entry.grid.dim, shape)
                norm = None if self.normaliser is None else reader.normalised.take(fields.shape)
                step = max(1, -(-JOB_BYTES // (4 * max(1, math.prod(shape[1:])))))
                yield from ((path, indices, fields, norm, range(b, min(b + step, len(indices))))
                            for b in range(0, len(indices), step))  # fmt: skip

        # jobs ahead: prefetch batches of large samples, more of small ones (at most
        # prefetch * batch_size * JOB_BYTES bytes); none with prefetch 0
        done = (
            prefetched(lambda job: self._read(reader, job), jobs(), reader.depth, reader.pool)
            if ahead and self.prefetch
            else ((job, self._read(reader, job)) for job in jobs())
        )
        for (path, indices, fields, norm, run), _ in done:
            if run.stop == len(indices):  # the batch's samples are all in (jobs finish in order)
                entry = entries[path]
                yield reader.slots[path].batch(
                    entry.grid,
                    fields,
                    entry.params[indices],
                    entry.params_norm[indices],
                    solved=True,
                    group=path,
                    index=indices,
                    normalised=norm,
                )

    def _x_range(self, group: Group) -> tuple[int, int] | None:
        """This rank's x rows ``[lo, hi)`` of the group's samples; None: the whole sample."""
        if self.domain is None:
            return None
        grid = group.grid
        slab = self.domain.slab((grid.snapshots, *grid.shape))
        return slab.lo[1], slab.hi[1]

    def _sample_shape(self, group: Group) -> tuple[int, ...]:
        """``(T, C_f, X, Y, Z)`` of what this rank reads of one of the group's samples."""
        T, C, X, Y, Z = group.chunks["fields"].shape
        rows = self._x_range(group)
        return (T, C, X, Y, Z) if rows is None else (T, C, rows[1] - rows[0], Y, Z)

    def _read(self, reader: "_Reader", job: Job) -> None:
        """Read samples ``run`` of a batch into their slots of its ``fields``, and normalise
        them into its ``normalised`` where asked for."""
        self._read_fields(reader, job)
        path, _, fields, norm, run = job
        if norm is not None:  # while the samples' values are still in the cache
            self.normaliser.apply(
                torch.from_numpy(fields[run.start : run.stop]),
                *reader.statistics[path],
                out=torch.from_numpy(norm[run.start : run.stop]),
            )

    def _read_fields(self, reader: "_Reader", job: Job) -> None:
        """Read samples ``run`` of a batch into their slots of its ``fields``."""
        path, indices, fields, _, run = job
        group, entry = reader.groups[path], self.catalog.groups[path]
        where = reader.slots[path].where
        rows = self._x_range(group)
        if rows is not None:
            if rows[1] > rows[0]:
                for b in run:
                    fields[b][where] = group.read_slab(int(indices[b]), "x", *rows).swapaxes(0, 1)
            return
        # a sample (T, C_f, X, Y, Z) straight into its slot (C_f, T, X, Y, Z) where their bytes
        # are the same (a slice of slots, and C_f or T is 1), else via an array of this thread's
        shape = group.chunks["fields"].shape
        direct = isinstance(where, slice) and 1 in shape[:2]
        dests = [fields[b, where].reshape(shape) if direct else None for b in run]
        missing = [k for k, d in enumerate(dests) if d is None]
        for k in missing:
            dests[k] = reader.scratch.take(shape)
        items = [(group, int(indices[b]), int(entry.checksums[indices[b]])) for b in run]
        read_samples(items, out=dests)
        for k in missing:
            fields[run[k]][where] = dests[k].swapaxes(0, 1)

    def _process_reader(self) -> "_Reader":
        """This process's reader, made on its first epoch and kept for the next ones."""
        depth = self.prefetch * self.batch_size
        reader = self._reader
        if reader is None or reader.pid != os.getpid() or reader.depth != depth:
            store = self.catalog.open()
            groups = {p: store.group(p) for p in self.catalog.groups}
            threads = read_threads(depth, local=is_local(store.root.store))
            pool = ThreadPoolExecutor(threads, thread_name_prefix="pdeladder-loader")
            layout, statistics = self.catalog.layout, {}
            family_slots = {  # made once, as the statistics: a batch's own would cost 0.1 ms
                path: FamilySlots.of(layout, entry.family, entry.grid.dim)
                for path, entry in self.catalog.groups.items()
            }
            for path, fs in family_slots.items():
                if self.normaliser is not None:
                    statistics[path] = self.normaliser.statistics(
                        torch.tensor([fs.family_id]), torch.from_numpy(fs.present[None])
                    )
            normalised = RecycledArrays(keep=2 * self.prefetch + 4)
            reader = self._reader = _Reader(
                os.getpid(),
                depth,
                groups,
                pool,
                RecycledArrays(),
                normalised,
                family_slots,
                statistics,
            )
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
    scratch: RecycledArrays  # the threads' arrays for samples not read straight into their slot
    normalised: RecycledArrays  # the batches' normalised arrays
    slots: dict[str, FamilySlots]  # per group: what its batches share
    statistics: dict[str, tuple[torch.Tensor, torch.Tensor]]  # per group, normalising: mean, std
