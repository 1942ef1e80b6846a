"""The pieces a loader is made of: plan batches (a pure function of the epoch) → read
(prefetched) → collate into the batch dict of :meth:`FamilySlots.batch`.

Both loaders (:mod:`pdeladder.dataset.loader` for torch, :mod:`pdeladder.dataset.ray_source`
for Ray Data) use these functions, and so do the batches made without a store (the unsolved
draws of self-improvement, ``predict``): every batch is the one dict documented in
:mod:`pdeladder.dataset.loader`.
"""

import math
import threading
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from pdeladder.dataset.catalog import Catalog, SampleRef
from pdeladder.dataset.chunks import read_threads
from pdeladder.dataset.slots import SlotLayout
from pdeladder.errors import UserInputError
from pdeladder.solvers.grid import Grid
from pdeladder.solvers.registry import get_family

Item = tuple[SampleRef, np.ndarray]  # a sample and its fields, float32 (T, C_group, X, Y, Z)
Planned = tuple[str, np.ndarray]  # a batch to read: group path, ascending sample indices


def epoch_plan(
    catalog: Catalog, *, batch_size: int, seed: int | None, epoch: int, rank: int, dp: int
) -> list[Planned]:
    """Rank ``rank``'s training batches of ``epoch``, out of ``dp`` data-parallel ranks.

    Each group's training samples are permuted (seeded by ``(seed, epoch)``) and cut into
    batches of ``batch_size`` (one group per batch); the batches of all groups are permuted
    together, repeated to a multiple of ``dp`` (at least one batch per rank) and batch ``i``
    goes to rank ``i mod dp``, so every rank gets as many. ``seed=None`` keeps store order.
    """
    rng = None if seed is None else np.random.default_rng([seed, epoch])
    plan: list[Planned] = []
    for path, entry in catalog.groups.items():
        perm = entry.train if rng is None else rng.permutation(entry.train)
        plan += [(path, perm[i : i + batch_size]) for i in range(0, len(perm), batch_size)]
    if not plan:
        raise UserInputError(f"{catalog.url}: no training samples in groups {list(catalog.groups)}")
    if rng is not None:
        plan = [plan[i] for i in rng.permutation(len(plan))]
    per_rank = max(1, len(plan) // dp)
    plan = (plan * math.ceil(per_rank * dp / len(plan)))[: per_rank * dp]
    return [(path, np.sort(idx)) for path, idx in plan[rank::dp]]


def held_out_plan(
    catalog: Catalog, *, batch_size: int, rank: int, dp: int
) -> list[tuple[Planned, float]]:
    """Rank ``rank``'s share of the held-out batches, as (batch, weight) pairs. Every rank
    gets the same number (FSDP runs collectives in each forward): ranks short of batches
    repeat one with weight 0."""
    plan = [
        (path, e.test[i : i + batch_size])
        for path, e in catalog.groups.items()
        for i in range(0, len(e.test), batch_size)
    ]
    if not plan:
        return []
    mine = plan[rank::dp]
    filler = mine[0] if mine else plan[0]
    return [(p, 1.0) for p in mine] + [(filler, 0.0)] * (math.ceil(len(plan) / dp) - len(mine))


def prefetched[Job, Result](
    read: Callable[[Job], Result],
    jobs: Iterable[Job],
    depth: int,
    pool: futures.ThreadPoolExecutor | None = None,
) -> Iterator[tuple[Job, Result]]:
    """``(job, read(job))`` in order, with up to ``depth`` reads running ahead in background
    threads: ``pool``'s (at least ``depth`` of them, reused across loops), else threads of
    the loop's own. A read's error is raised where its result would have been yielded.
    Leaving the loop early waits for the reads in flight (at most ``depth``), so no read
    outlives it."""
    if pool is None:
        with futures.ThreadPoolExecutor(max_workers=read_threads(depth)) as own:
            yield from prefetched(read, jobs, depth, own)
        return
    window: deque = deque()
    try:
        for job in jobs:
            window.append((job, pool.submit(read, job)))
            if len(window) > depth:
                done, fut = window.popleft()
                yield done, fut.result()
        while window:
            done, fut = window.popleft()
            yield done, fut.result()
    finally:
        for _, fut in window:
            fut.cancel()
        futures.wait([fut for _, fut in window])


def shuffled(items: Iterable[Item], *, size: int, seed: int) -> Iterator[Item]:
    """A seeded shuffle buffer of ``size`` items, for streams that cannot be permuted upfront."""
    rng = np.random.default_rng(seed)
    buf: list[Item] = []
    for item in items:
        buf.append(item)
        if len(buf) >= size:
            yield buf.pop(int(rng.integers(len(buf))))
    while buf:
        yield buf.pop(int(rng.integers(len(buf))))


def bucketed(items: Iterable[Item], batch_size: int) -> Iterator[list[Item]]:
    """Group items by group path into lists of ``batch_size`` (one group per batch); the
    remainders come last, in path order."""
    open_: dict[str, list[Item]] = {}
    for item in items:
        bucket = open_.setdefault(item[0].group, [])
        bucket.append(item)
        if len(bucket) == batch_size:
            yield open_.pop(item[0].group)
    for key in sorted(open_):
        yield open_[key]


def slots(layout: SlotLayout, family: str, dim: int) -> slice | list[int]:
    """The channel slots of ``family``'s channels at ``dim``, in its channel order: a slice
    where they form a range (a batch's rows of them are then a view)."""
    idx = layout.slot_indices(get_family(family), dim)
    ranged = idx == list(range(idx[0], idx[0] + len(idx)))
    return slice(idx[0], idx[0] + len(idx)) if ranged else idx


class RecycledArrays:
    """Float32 arrays recycled once dropped: an array that :meth:`take` hands out returns to
    the pool when the last tensor or view of it is gone. Memory that the CPU writes is then
    already mapped: the page faults of a fresh array made writing it about 9x slower (64²,
    measured), more than reading the same bytes from the page cache on a busy machine.

    One rule for every lifetime: the loader's batches' ``normalised`` arrays live as long as
    the consumer keeps the batch, a reader thread's scratch arrays (samples not read straight
    into their slot of the batch) until that read returns. Up to ``keep`` free arrays of each
    shape are kept; ``None`` keeps every one given back, for arrays whose number in use is
    bounded (the scratch: threads × samples a job). Thread-safe; an array is never handed out twice
    while in use."""

    def __init__(self, keep: int | None = None):
        self.keep = keep
        self._free: dict[tuple[int, ...], list[np.ndarray]] = {}
        self._lock = threading.Lock()

    def take(self, shape: tuple[int, ...]) -> np.ndarray:
        """A float32 array of ``shape`` with arbitrary values, this caller's until dropped."""
        with self._lock:
            free = self._free.get(shape)
            base = free.pop() if free else None
        if base is None:
            base = np.empty(shape, np.float32)
        view = base.view()  # what the caller holds: the base comes back once it dies
        weakref.finalize(view, self._give_back, base)
        return view

    def _give_back(self, base: np.ndarray) -> None:
        with self._lock:
            free = self._free.setdefault(base.shape, [])
            if self.keep is None or len(free) < self.keep:
                free.append(base)


def new_fields(layout: SlotLayout, family: str, dim: int, shape: tuple[int, ...]) -> np.ndarray:
    """A batch's fields array for ``B`` samples of ``family`` stacked as the store holds them,
    ``(B, T, C_f, X, Y, Z)``: float32 ``(B, C, T, X, Y, Z)``, zeros in the slots the family
    leaves empty (its own are for the caller to fill, each sample transposed)."""
    B, T, C_f, *space = shape
    full = C_f == len(layout.slots)
    return (np.empty if full else np.zeros)((B, len(layout.slots), T, *space), np.float32)


def collate(items: list[Item], catalog: Catalog) -> dict[str, Any]:
    """The batch of ``items``, samples of one group (as :func:`bucketed` makes them)."""
    path = items[0][0].group
    entry = catalog.groups[path]
    index = np.array([ref.index for ref, _ in items])
    fields = np.stack([data for _, data in items])
    return make_batch(
        catalog.layout,
        entry.family,
        entry.grid,
        fields,
        entry.params[index],
        solved=True,
        params_norm=entry.params_norm[index],
        group=path,
        index=index,
    )


def make_batch(
    layout: SlotLayout,
    family: str,
    grid: Grid,
    fields: np.ndarray,
    params: np.ndarray,
    *,
    solved: bool,
    params_norm: np.ndarray | None = None,
    group: str | None = None,
    index: np.ndarray | None = None,
) -> dict[str, Any]:
    """The batch of one family's physical fields, samples in the store's order stacked
    ``(B, T, C_f, X, Y, Z)`` (the whole grid, or one rank's slab of it), and ``(B, P_f)``
    params: :meth:`FamilySlots.batch` of them in slots, ``(B, C, T, X, Y, Z)``
    (``params_norm`` computed unless given)."""
    family_slots = FamilySlots.of(layout, family, grid.dim)
    slotted = new_fields(layout, family, grid.dim, fields.shape)
    slotted[:, family_slots.where] = fields.swapaxes(1, 2)
    if params_norm is None:
        params_norm = layout.normalise_params(get_family(family), params)
    return family_slots.batch(
        grid, slotted, params, params_norm, solved=solved, group=group, index=index
    )


@dataclass(frozen=True)
class FamilySlots:
    """What every batch of one family at one dimension shares in ``layout``, made once (a
    loader keeps one per group): its channel slots (:func:`slots`), ``present`` and
    ``predicted`` ``(C,)`` masks, family id and the layout's parameter slots."""

    family: str
    where: slice | list[int]
    present: np.ndarray
    predicted: np.ndarray
    family_id: int
    n_params: int

    @classmethod
    def of(cls, layout: SlotLayout, family: str, dim: int) -> "FamilySlots":
        present, predicted = layout.roles(get_family(family), dim)
        where = slots(layout, family, dim)
        return cls(family, where, present, predicted, layout.family_id(family), layout.n_params)

    def batch(
        self,
        grid: Grid,
        fields: np.ndarray,
        params: np.ndarray,
        params_norm: np.ndarray,
        *,
        solved: bool,
        group: str | None = None,
        index: np.ndarray | None = None,
        normalised: np.ndarray | None = None,
    ) -> dict[str, Any]:
        """The batch dict documented in :mod:`pdeladder.dataset.loader` around ``fields``
        ``(B, C, T, X, Y, Z)``, already in these slots, and ``params`` ``(B, P_f)`` with their
        :meth:`~pdeladder.dataset.slots.SlotLayout.normalise_params`, of samples ``index`` of
        ``group`` (None and -1 for samples not from a store); with ``normalised`` (``fields``
        normalised, same shape) under that key too."""
        b = fields.shape[0]
        padded = np.zeros((b, max(self.n_params, params.shape[1])), np.float32)
        padded[:, : params.shape[1]] = params
        index = np.full(b, -1) if index is None else index
        return {
            "fields": torch.from_numpy(fields),
            "present": torch.from_numpy(np.repeat(self.present[None], b, 0)),
            "predicted": torch.from_numpy(np.repeat(self.predicted[None], b, 0)),
            "params": torch.from_numpy(padded),
            "params_norm": torch.from_numpy(params_norm),
            "family": torch.from_numpy(np.full(b, self.family_id, np.int64)),
            "solved": torch.from_numpy(np.full(b, solved)),
            "grid": grid,
            "group": group,
            "index": torch.from_numpy(np.asarray(index, np.int64)),
        } | ({} if normalised is None else {"normalised": torch.from_numpy(normalised)})
