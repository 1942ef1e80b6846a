"""The pieces a loader is made of: shard → read (prefetched) → normalise → bucket → collate.

Both loaders (:mod:`pdeladder.dataset.loader` for torch, :mod:`pdeladder.dataset.ray_source`
for Ray Data) use these functions, so they batch identically; the batch layout is documented in
:mod:`pdeladder.dataset.loader`.
"""

import threading
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from concurrent import futures

import numpy as np
import torch

from pdeladder.dataset.catalog import Catalog, SampleRef
from pdeladder.dataset.chunks import read_threads

Item = tuple[SampleRef, np.ndarray]  # a sample and its fields, float32 (T, C_group, X, Y, Z)


def shard(
    refs: list[SampleRef], *, seed: int | None, epoch: int, part: int, parts: int
) -> list[SampleRef]:
    """The samples of ``part`` out of ``parts`` for ``epoch``, disjoint across parts.

    A part is one (rank, DataLoader worker) pair. Within each grid bucket the samples are
    permuted (seeded by ``(seed, epoch)``, the same in every part), cut to a multiple of
    ``parts`` (at most ``parts - 1`` left out per epoch, different ones each epoch) and dealt
    round-robin, so every part gets as many samples of each bucket, hence as many batches. The
    part's list is permuted again so that buckets interleave. ``seed=None`` keeps store order.
    """
    if not 0 <= part < parts:
        raise ValueError(f"part {part} outside [0, {parts})")
    rng = None if seed is None else np.random.default_rng([seed, epoch])
    mine: list[SampleRef] = []
    for key in sorted({r.bucket for r in refs}):
        bucket = [r for r in refs if r.bucket == key]
        order = np.arange(len(bucket)) if rng is None else rng.permutation(len(bucket))
        keep = len(bucket) - len(bucket) % parts
        mine += [bucket[i] for i in order[:keep][part::parts]]
    if seed is not None:
        mine = [mine[i] for i in np.random.default_rng([seed, epoch, part]).permutation(len(mine))]
    return mine


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


class ScratchArrays(threading.local):
    """Float32 arrays that each thread reuses from one batch to the next, to read samples into:
    memory that is already mapped costs no page faults, and on a busy machine the faults of a
    fresh multi-megabyte array cost more than reading it from the page cache.

    ``take(shapes)`` returns one array per shape; they stay this thread's until its next call.
    """

    def __init__(self) -> None:
        self.pools: dict[tuple[int, ...], list[np.ndarray]] = {}

    def take(self, shapes: Iterable[tuple[int, ...]]) -> list[np.ndarray]:
        used: Counter[tuple[int, ...]] = Counter()
        out = []
        for shape in shapes:
            pool = self.pools.setdefault(shape, [])
            if used[shape] == len(pool):
                pool.append(np.empty(shape, dtype=np.float32))
            out.append(pool[used[shape]])
            used[shape] += 1
        return out


def batch_plan(refs: Iterable[SampleRef], batch_size: int) -> list[list[SampleRef]]:
    """The batches :func:`bucketed` makes, decided from the refs alone (a ref knows its grid),
    so that whole batches can be read ahead."""
    return [[ref for ref, _ in batch] for batch in bucketed(((r, None) for r in refs), batch_size)]


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
    """Group items by grid ``(dim, resolution, T)`` into lists of ``batch_size``; the
    remainders come last, in bucket order."""
    open_: dict[tuple[int, int, int], list[Item]] = {}
    for item in items:
        bucket = open_.setdefault(item[0].bucket, [])
        bucket.append(item)
        if len(bucket) == batch_size:
            yield open_.pop(item[0].bucket)
    for key in sorted(open_):
        yield open_[key]


def collate(items: list[Item], catalog: Catalog, *, normalize: bool) -> dict:
    """One batch of a single grid shape as the dict documented in :mod:`pdeladder.dataset.loader`."""
    refs = [ref for ref, _ in items]
    fields = new_fields(refs, catalog, items[0][1].shape)
    for b, (_, data) in enumerate(items):
        fill(fields, b, refs[b], data, catalog, normalize=normalize)
    return batch_dict(refs, fields, catalog, normalize=normalize)


def new_fields(refs: list[SampleRef], catalog: Catalog, shape: tuple[int, ...]) -> np.ndarray:
    """The fields array of a batch of ``refs``, samples of ``shape`` ``(T, C_group, X, Y, Z)``:
    float32 ``(B, T, C, X, Y, Z)``, zeros where a family leaves channel slots empty (every
    other value is written by :func:`fill`)."""
    T, _, X, Y, Z = shape
    full = all(catalog.rows(ref.group).full for ref in refs)
    return (np.empty if full else np.zeros)(
        (len(refs), T, len(catalog.channels), X, Y, Z), dtype=np.float32
    )


def slot_of(fields: np.ndarray, b: int, ref: SampleRef, catalog: Catalog) -> np.ndarray | None:
    """Sample ``ref``'s slot ``b`` of a batch's ``fields`` as a C-contiguous view
    ``(T, C_group, X, Y, Z)`` to read the sample into (then :func:`fill` normalises it in
    place), or None where the slot is not contiguous (a family filling some channel slots)."""
    row = catalog.rows(ref.group)
    if not isinstance(row.slots, slice):
        return None
    view = fields[b, :, row.slots]
    return view if view.flags.c_contiguous else None


def fill(
    fields: np.ndarray,
    b: int,
    ref: SampleRef,
    data: np.ndarray,
    catalog: Catalog,
    *,
    normalize: bool,
) -> None:
    """Put sample ``ref``'s ``data`` ``(T, C_group, X, Y, Z)`` into slot ``b`` of a batch's
    ``fields``, normalised per channel: straight into the batch where the group's slots are a
    range (a view; in place where ``data`` is that view), else via one temporary scattered
    into the slots."""
    lay, row = catalog.groups[ref.group], catalog.rows(ref.group)
    ranged = isinstance(row.slots, slice)
    out = fields[b, :, row.slots] if ranged else np.empty_like(data)
    if normalize:
        per_channel = (1, -1, 1, 1, 1)
        np.subtract(data, lay.mean.reshape(per_channel), out=out)
        np.divide(out, lay.std.reshape(per_channel), out=out)
    else:
        out[...] = data
    if not ranged:
        fields[b][:, row.slots] = out


def batch_dict(
    refs: list[SampleRef], fields: np.ndarray, catalog: Catalog, *, normalize: bool
) -> dict:
    """The batch of ``refs`` around its filled ``fields``, as documented in
    :mod:`pdeladder.dataset.loader`."""
    B, C, P = len(refs), len(catalog.channels), catalog.n_params
    layouts = [catalog.groups[ref.group] for ref in refs]
    rows = [catalog.rows(ref.group) for ref in refs]
    params = np.zeros((B, P), dtype=np.float32)
    for b, (ref, lay) in enumerate(zip(refs, layouts, strict=True)):
        params[b, : lay.n_params] = catalog.params[ref.group][ref.index]
    if normalize:
        mean, std = np.stack([r.mean for r in rows]), np.stack([r.std for r in rows])
    else:
        mean, std = np.zeros((B, C), dtype=np.float32), np.ones((B, C), dtype=np.float32)
    dim, resolution, _ = refs[0].bucket
    return {
        "fields": torch.from_numpy(fields),
        "channel_mask": torch.from_numpy(np.stack([r.channel_mask for r in rows])),
        "input_mask": torch.from_numpy(np.stack([r.input_mask for r in rows])),
        "mean": torch.from_numpy(mean),
        "std": torch.from_numpy(std),
        "params": torch.from_numpy(params),
        "param_mask": torch.from_numpy(np.stack([r.param_mask for r in rows])),
        "family": [lay.family for lay in layouts],
        "family_id": torch.tensor([lay.family_id for lay in layouts]),
        "t_end": torch.tensor([lay.t_end for lay in layouts], dtype=torch.float64),
        "dim": dim,
        "resolution": resolution,
        "group": [ref.group for ref in refs],
        "index": torch.tensor([ref.index for ref in refs]),
    }
