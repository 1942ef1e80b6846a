"""A group's write side: samples written whole, in x slabs, or appended, and the commit.

Concurrency: samples are chunked one per chunk in every per-sample array, so any number of
processes may :meth:`WritableGroup.write` different samples of one fixed-size group at once.
An appendable group (``n_samples=None``) has one writer at a time. A sample's ``status`` is
written after its data; a failed sample records its reason, never data. A large sample may be
written by several processes, each its own x slab of whole chunks
(:meth:`WritableGroup.write_slab`), then committed by one (:meth:`WritableGroup.commit`).

Speed: a write puts the fields while background threads put each record and the checksum and
moments, then status: a local store's files in the calling thread, other stores' keys in one
round of concurrent requests each (:mod:`pdeladder.dataset.chunks`, not zarr's array API,
whose fixed cost per call exceeds the I/O of a small chunk).
"""

import json
import os
from collections.abc import Callable
from concurrent import futures
from functools import cache
from typing import Any

import numpy as np
import zarr
from zarr.core.sync import sync

from pdeladder.dataset import chunks
from pdeladder.dataset import format as fmt
from pdeladder.dataset.format import FAILED, MISSING, OK
from pdeladder.dataset.group import Group, sample_checksum
from pdeladder.dataset.moments import merge_moments, normalisation
from pdeladder.errors import StoreError, UserInputError
from pdeladder.solvers.family import Sample


class WritableGroup(Group):
    """A group of a store opened for writing (``open_store(url, "a")``): the read side and
    the writes. Fields holding NaN or Inf are never stored: such a write is refused."""

    def write(self, index: int, sample: Sample) -> None:
        """Write ``sample`` at ``index``: data, parameters, seed, statistics, checksums and
        moments first, then status ok once they have all completed; a failed sample gets
        status failed and its reason. A sample that was written before is set back to missing
        first, so no reader trusts it while it is rewritten. Fields holding NaN or Inf are
        refused (UserInputError), after which the sample is missing."""
        self._check_write(sample)
        self._check_index(index)
        self._guarded_write(index, lambda: self._write(index, sample))

    def write_slab(self, index: int, lo: int, hi: int, fields: np.ndarray) -> None:
        """Write x rows ``[lo, hi)`` of sample ``index``: ``fields`` float32
        ``(T, C, hi - lo, Y, Z)``, whole chunks (``lo`` and ``hi`` on chunk boundaries, as
        :func:`pdeladder.slabs.slabs` cuts them), then those x blocks' checksum and moments chunks (a
        one-chunk sample, one slab: its record, with only those), so that a slab's digests
        are stored only once its fields are. Status is not touched.

        For K processes that each hold one x slab of a sample: every chunk of a slab, its
        digests included, is written by that slab's process alone. The protocol: one process
        calls :meth:`discard` (for a sample written before), then each process writes its
        slab, then, once all have returned, one process calls :meth:`commit`, the only step
        that marks the sample ok. A slab of a sample whose status is ok is refused (discard it
        first); fields holding NaN or Inf are refused before anything is written.
        """
        self._check_writable()
        self._check_index(index)
        spec = self.chunks["fields"]
        cx, X = spec.chunks[2], spec.shape[2]
        if not (0 <= lo < hi <= X and lo % cx == 0 and (hi % cx == 0 or hi == X)):
            raise UserInputError(
                f"{self.where(index)}: x slab [{lo}, {hi}) is not whole chunks of {cx} points "
                f"in [0, {X})"
            )
        T, C, _, Y, Z = self.sample_shape
        if fields.dtype != np.float32 or fields.shape != (T, C, hi - lo, Y, Z):
            raise UserInputError(
                f"{self.where(index)}: slab fields must be float32{(T, C, hi - lo, Y, Z)}, "
                f"got {fields.dtype}{fields.shape}"
            )
        (status,) = self._records(index, "status")
        if int(status) == OK:
            raise StoreError(
                f"{self.where(index)}: is committed (status ok); discard() it before writing "
                "its slabs again"
            )
        xblocks = range(lo // cx, -(-hi // cx))
        crcs, moments = self.digest(fields, spec.along(2, xblocks))
        if not np.isfinite(moments).all():
            raise UserInputError(f"{self.where(index)}: fields hold NaN/Inf; record a failure")

        def put() -> None:
            self._put(index, {"fields": fields}, xblocks)
            if self.blocked:
                self._put(
                    index, dict(zip(fmt.DIGEST_ARRAYS, (crcs, moments), strict=True)), xblocks
                )
            else:  # the record holds the digests until commit completes it
                self._put(index, {"record": self._record_bytes(None, crcs, moments)})

        self._guarded_write(index, put)

    @property
    def _landing(self) -> str:
        """The array whose chunks say that a sample's slabs have landed: its per-chunk
        checksums, or its record (one-chunk samples)."""
        return fmt.DIGEST_ARRAYS[0] if self.blocked else "record"

    def discard(self, index: int) -> None:
        """Set sample ``index`` back to missing, then remove its checksum chunks (its record
        where that holds them), so that no reader trusts it and :meth:`commit` waits until
        every slab is written anew."""
        self._check_writable()
        self._check_index(index)

        def discard() -> None:
            self._put(index, {"status": MISSING})
            chunks.delete(self._zstore, self.chunks[self._landing].keys(index))

        self._guarded_write(index, discard)

    def commit(self, index: int, sample: Sample) -> None:
        """Record sample ``index`` whose x slabs were written by :meth:`write_slab`: its
        parameters, seed, statistics and provenance from ``sample`` (with ``fields=None``: the
        fields are the slabs; in its record, with the checksum and moments merged from the
        slabs' digests), then, once those have landed, status ok. Raises
        StoreError, writing nothing, while the digests of any x block are missing (its slab
        has not landed). A failed ``sample`` is recorded as :meth:`write` records it."""
        if sample.fields is not None:
            raise UserInputError(
                f"{self.where(index)}: commit records a sample written in slabs; pass it "
                "with fields=None"
            )
        if not sample.ok:
            self.write(index, sample)
            return
        self._check_write(sample, with_fields=False)
        self._check_index(index)

        def commit() -> None:
            (status,) = self._records(index, "status")
            records = self._sample_records(sample, int(status))
            landed, records["record"] = self._landed_record(index, sample)
            if not all(landed):
                cx, X = self.chunks["fields"].chunks[2], self.sample_shape[2]
                rows = [
                    f"[{b * cx}, {min(X, (b + 1) * cx)})" for b, ok in enumerate(landed) if not ok
                ]
                raise StoreError(
                    f"{self.where(index)}: x rows {', '.join(rows)} have not landed (no checksum "
                    "chunk); status not written"
                )
            self._put_all(index, records)
            self._put(index, {"status": OK})

        self._guarded_write(index, commit)

    def _landed_record(self, index: int, sample: Sample) -> tuple[list[bool], np.ndarray]:
        """Whether each x block's digests have landed, and the record of ``sample`` with the
        sample's checksum and moments merged from them."""
        if not self.blocked:
            (record,) = self._records(index, "record")
            crc, moments = record["checksum"], record["moments"]
            landed = [bool(np.isfinite(moments).all())]
        else:
            sums, moms = (self.chunks[name] for name in fmt.DIGEST_ARRAYS)
            raw = chunks.get(self._zstore, [*sums.keys(index), *moms.keys(index)])
            BX = sums.grid[1]
            landed = [
                a is not None and b is not None for a, b in zip(raw[:BX], raw[BX:], strict=True)
            ]
            if not all(landed):
                return landed, np.empty(0, np.uint8)
            crcs = self._decode_record(index, fmt.DIGEST_ARRAYS[0], raw[:BX])
            parts = self._decode_record(index, fmt.DIGEST_ARRAYS[1], raw[BX:])
            crc, moments = self._whole(crcs, parts)
        return landed, self._record_bytes(sample, crc, moments)

    def _whole(self, crcs: np.ndarray, moments: np.ndarray) -> tuple[int, np.ndarray]:
        """A sample's checksum and ``(C, 3)`` moments from its chunks' ``(BT, BX)`` and
        ``(BT, BX, C, 3)``."""
        C = len(self.channel_names)
        return sample_checksum(crcs), merge_moments(np.reshape(moments, (-1, C, 3)))

    def _guarded_write(self, index: int, write: Callable[[], None]) -> None:
        try:
            write()
        except (StoreError, UserInputError):
            raise
        except Exception as err:
            raise StoreError(
                f"{self.where(index)}: write failed ({type(err).__name__}: {err}); the sample "
                "is not marked ok, write it again"
            ) from err

    def _encoded(
        self, index: int, values: dict[str, Any], xblocks: range | None = None
    ) -> dict[str, Any]:
        out = {}
        for name, value in values.items():
            spec = self.chunks[name]
            region = None if xblocks is None else spec.along(_X_BLOCK_AXIS[name], xblocks)
            out.update(zip(spec.keys(index, region), spec.encode(value, region), strict=True))
        return out

    def _put(self, index: int, values: dict[str, Any], xblocks: range | None = None) -> None:
        """Store sample ``index``'s ``values`` (of x blocks ``xblocks`` only, for ``fields``,
        ``chunk_checksum`` and ``chunk_moments``); only its status atomically: the other
        records count only once a later status write says ok (or failed)."""
        chunks.put(self._zstore, self._encoded(index, values, xblocks), atomic="status" in values)

    def _put_all(self, index: int, values: dict[str, Any]) -> None:
        """Store each of ``values`` on a thread of its own (each is a file or an object, and
        creating one costs about as much as writing a small sample's bytes)."""
        pool = _writers()
        jobs = [pool.submit(self._put, index, {name: value}) for name, value in values.items()]
        futures.wait(jobs)
        for job in jobs:
            job.result()  # the first error, if any

    def _sample_records(self, sample: Sample, before: int) -> dict[str, Any]:
        """The records of ``sample`` but its fields and its record (which holds the digests)
        (``before``: its status)."""
        provenance = json.dumps(sample.provenance, sort_keys=True, default=str)
        records: dict[str, Any] = {"provenance": provenance}
        if not sample.ok:
            records["reason"] = sample.stats.reason or "failed"
        elif before == FAILED:  # reason counts only where status is failed; tidy it anyway
            records["reason"] = ""
        return records

    def _write(self, index: int, sample: Sample) -> None:
        """Write the fields while background threads write each solver record and compute the
        checksums and moments, then write those; once all have landed, status. Every record is
        a file or an object of its own, and creating one costs about as much as writing a
        small sample's bytes, so they are created side by side."""
        (before,) = self._records(index, "status")
        before = int(before)
        if before != MISSING:
            self._put(index, {"status": MISSING})
        records = self._sample_records(sample, before)
        pool = _writers()
        side = [pool.submit(self._put, index, {name: value}) for name, value in records.items()]
        if sample.ok:
            side.append(pool.submit(self._put_digest, index, sample))
            try:
                self._put(index, {"fields": sample.fields})
            finally:
                futures.wait(side)  # nothing outlives a failed write
        else:
            side.append(pool.submit(self._put, index, {"record": self._record_bytes(sample)}))
            futures.wait(side)
        for job in side:
            job.result()  # the first error, if any
        self._put(index, {"status": OK if sample.ok else FAILED})

    def _put_digest(self, index: int, sample: Sample) -> None:
        """Store the checksums and moments of ``sample``'s fields as sample ``index`` (per
        chunk where the group keeps them so, and the sample's in its record, with its seed,
        parameters and statistics); refuse NaN/Inf."""
        crc, moments = self.digest(sample.fields)
        if not np.isfinite(moments).all():
            raise UserInputError(f"{self.where(index)}: fields hold NaN/Inf; record a failure")
        if self.blocked:
            self._put(index, dict(zip(fmt.DIGEST_ARRAYS, (crc, moments), strict=True)))
            crc, moments = self._whole(crc, moments)
        self._put(index, {"record": self._record_bytes(sample, crc, moments)})

    def _record_bytes(
        self, sample: Sample | None, crc: int | None = None, moments: np.ndarray | None = None
    ) -> np.ndarray:
        """A record ``(R,)`` uint8: ``sample``'s seed, parameters and statistics and
        the fields' checksum and ``(C, 3)`` moments, each left as never written (0xFF bytes)
        where None."""
        row = np.full(self.chunks["record"].shape, fmt.RECORD_FILL, np.uint8)
        record = row.view(self._record_dtype)
        if sample is not None:
            record["seed"] = sample.seed
            record["params"] = sample.params.vector()
            record["stats"] = [float(getattr(sample.stats, name)) for name in fmt.SOLVER_STATS]
        if crc is not None:
            record["checksum"], record["moments"] = crc, moments
        return row

    def append(self, sample: Sample) -> int:
        """Write ``sample`` at the end of an appendable group; returns its index."""
        if self.meta.n_samples is not None:
            raise StoreError(
                f"{self.where()}: has a fixed size of {self.meta.n_samples}; use write(index)"
            )
        self._check_write(sample)
        names = [spec.name for spec in fmt.array_specs(self.attrs, 0) if spec.per_sample]
        self._open(*names)
        n = self.n_samples
        resized = [
            self._async(spec.name).resize(spec.shape)
            for spec in fmt.array_specs(self.attrs, n + 1)
            if spec.per_sample
        ]

        def grow_and_write() -> None:
            sync(chunks.gather(*resized))
            self._write(n, sample)

        self._guarded_write(n, grow_and_write)
        return n

    def _check_writable(self) -> None:
        if self.store.read_only:
            raise StoreError(f"{self.store.url}: opened read-only; open it with mode='a' to write")

    def _check_write(self, sample: Sample, *, with_fields: bool = True) -> None:
        self._check_writable()
        if sample.family != self.family or sample.grid != self.grid:
            raise UserInputError(
                f"{self.where()}: sample of {sample.family} on {sample.grid} does not belong "
                f"to this group ({self.family} on {self.grid})"
            )
        if sample.params.names() != self.param_names:
            raise UserInputError(f"{self.where()}: parameters {sample.params.names()} differ")
        if sample.ok and with_fields:
            f = sample.fields
            if f is None or f.dtype != np.float32 or f.shape != self.sample_shape:
                got = None if f is None else f"{f.dtype}{f.shape}"
                raise UserInputError(
                    f"{self.where()}: fields must be float32{self.sample_shape}, got {got}"
                )

    def update_normalisation(self) -> dict[str, Any]:
        """Merge the per-sample moments and cache them in the ``normalization`` attribute
        (:func:`moments.normalisation`).

        Call once a stage is written (one caller at a time: it rewrites the group's attributes).
        """
        self._check_writable()
        status = self.status()
        cached = normalisation(self.channel_names, self.moments(status), status)
        self.node.update_attributes({"normalization": cached})
        self.attrs["normalization"] = cached
        return cached

    def _async(self, name: str) -> zarr.AsyncArray:
        """The asynchronous side of an array opened before (see :meth:`_open`): coroutines run
        on zarr's loop and cannot open arrays themselves."""
        return self._arrays[name].async_array

    def _open(self, *names: str) -> None:
        for name in names:
            self.array(name)


#: The axis of each x-split per-sample array that holds its x blocks (``fields``: points).
_X_BLOCK_AXIS = {"fields": 2, "chunk_checksum": 1, "chunk_moments": 1}


def _writers() -> futures.ThreadPoolExecutor:
    """The threads that write a sample's records and digest its fields while the fields are
    written (numpy, CRC-32C and file I/O release the GIL), shared by every writer of the
    process: enough for one sample's records at once. A forked child gets its own (a parent's
    pool has no threads in the child and would never run its jobs)."""
    return _writers_of(os.getpid())


@cache
def _writers_of(pid: int) -> futures.ThreadPoolExecutor:
    return futures.ThreadPoolExecutor(8, thread_name_prefix=f"pdeladder-write-{pid}")
