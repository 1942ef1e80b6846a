"""A group's read side: its description, its per-sample records and its samples' fields.

A group holds the samples of one (stage, family, dimension, resolution, snapshots); its arrays
are listed in :mod:`pdeladder.dataset.format` and ``docs/format.md``. Every read trusts a
sample only when its ``status`` says ok, and checks its fields against the checksum recorded
for them: a corrupt, truncated or missing chunk is a :class:`StoreError` naming the sample.
The write side is :class:`~pdeladder.dataset.writer.WritableGroup`.

Speed: a sample's chunks are read as store keys (:mod:`pdeladder.dataset.chunks`), not through
zarr's array API, whose fixed cost per call exceeds the I/O of a small chunk.
:func:`read_samples` reads the fields of several samples in one call, and :meth:`Group.column`
a record array of every sample (status, checksums, parameters, moments: what catalogs,
``verify`` and resuming campaigns read).
"""

import json
from collections.abc import Sequence
from concurrent import futures
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal

import google_crc32c
import numpy as np
import zarr

from pdeladder.dataset import chunks
from pdeladder.dataset import format as fmt
from pdeladder.dataset import moments as mom
from pdeladder.dataset.chunks import Region, SampleChunks
from pdeladder.dataset.format import FAILED, MISSING, OK, STATUS_NAMES
from pdeladder.dataset.moments import merge_moments, sample_moments
from pdeladder.dataset.provenance import checksum
from pdeladder.errors import FormatError, StoreError, UserInputError
from pdeladder.solvers.grid import Grid

if TYPE_CHECKING:
    from pdeladder.dataset.store import Store

#: Keys :meth:`Group.column` requests at once from a remote store, and reads at least per
#: thread from a local one.
COLUMN_ROUND = 256


class Group:
    """One group of samples, read side; see the module docstring."""

    def __init__(
        self,
        store: "Store",
        path: str,
        node: zarr.Group,
        *,
        arrays: dict[str, zarr.Array] | None = None,
    ):
        self.store, self.path, self.node = store, path, node
        #: The attributes as stored (JSON values).
        self.attrs: dict[str, Any] = dict(node.attrs)
        #: The same, typed and checked (FormatError, one line, when they are not the format's).
        self.meta = fmt.GroupMeta.of(self.attrs, f"{store.url}::{path}")
        self._arrays: dict[str, zarr.Array] = dict(arrays or {})

    def __repr__(self) -> str:
        return f"Group({self.store.url!r}, {self.path!r})"

    def array(self, name: str) -> zarr.Array:
        """The zarr array ``name`` of this group (opened once)."""
        if name not in self._arrays:
            try:
                self._arrays[name] = self.node[name]
            except KeyError:
                raise StoreError(
                    f"{self.store.url}::{self.path}: array {name!r} is missing"
                ) from None
        return self._arrays[name]

    def where(self, index: int | None = None) -> str:
        """``url::group[index]``: how errors name a sample."""
        base = f"{self.store.url}::{self.path}"
        return base if index is None else f"{base} sample {index}"

    # -- description ---------------------------------------------------------------------------

    @property
    def family(self) -> str:
        return self.meta.family

    @property
    def grid(self) -> Grid:
        return self.meta.grid

    @property
    def channel_names(self) -> list[str]:
        return self.meta.channel_names

    @property
    def param_names(self) -> list[str]:
        return self.meta.param_names

    @property
    def n_samples(self) -> int:
        """Samples the group's arrays hold (at most :data:`format.MAX_SAMPLES`: more is a
        damaged group, refused in one line before any column is read)."""
        n = self.array("status").shape[0]
        if n > fmt.MAX_SAMPLES:
            raise FormatError(
                f"{self.where()}: its status array holds {n} samples, more than a group may "
                f"({fmt.MAX_SAMPLES}); the group is damaged: run `pdeladder store verify` on "
                "the store, or regenerate it"
            )
        return n

    @property
    def sample_shape(self) -> tuple[int, int, int, int, int]:
        """``(T, C, X, Y, Z)`` of one sample."""
        return (self.grid.snapshots, len(self.channel_names), *self.grid.shape)

    # -- reading -------------------------------------------------------------------------------

    @cached_property
    def blocked(self) -> bool:
        """Whether this group's samples have several ``fields`` chunks, and so a checksum and
        moments per chunk (``chunk_checksum``, ``chunk_moments``) beside the sample's in its
        record (:func:`format.blocked`)."""
        return fmt.blocked(self.attrs)

    def status(self) -> np.ndarray:
        """``(N,)`` uint8: MISSING (0), OK (1) or FAILED (2) per sample."""
        return self.column("status")

    def checksums(self, status: np.ndarray | None = None) -> np.ndarray:
        """``(N,)`` uint32: each ok sample's checksum as :func:`read_samples` checks a whole
        sample against it (0 where not ok; only ok samples' records are read): the CRC-32C of
        its fields, or of its chunks' checksums when it has several (:func:`sample_checksum`),
        as its record holds it. ``status``: the group's :meth:`status`, when the caller has
        read it already."""
        ok = (self.status() if status is None else status) == OK
        return np.where(ok, self.column("checksum", where=ok), 0).astype(np.uint32)

    def params(self) -> np.ndarray:
        """``(N, P)`` float64 parameter vectors (NaN where never written)."""
        return self.column("params")

    def column(self, name: str, where: np.ndarray | None = None) -> np.ndarray:
        """Every sample's value of the per-sample array ``name`` (all but ``fields``), or of
        the ``record`` field ``name`` (``seed``, ``params``, ``stats``, ``checksum``,
        ``moments``), ``(N, ...)`` as zarr would return it: the fill value
        where a sample never wrote it (a record's: NaN, seed -1), and where ``where``
        (``(N,)`` bool) is False, whose chunks are not read at all (a reader trusts nothing
        of a sample whose status is not ok: ``where=status == OK``).

        Read chunk by chunk as store keys (zarr's array API costs about half a millisecond
        per chunk, and these arrays have one chunk per sample, or per x block): a local
        store's files on as many threads as cores, other stores' keys in rounds of
        ``COLUMN_ROUND`` concurrent requests. Raises StoreError naming the first sample
        whose chunk does not decode.
        """
        if name == "fields":
            raise ValueError("fields are read sample by sample: read_samples")
        if name in self._record_names:
            rows = self.column("record", where).view(self._record_dtype)[:, 0]
            return np.ascontiguousarray(rows[name])
        spec = self.chunks[name]
        n, per = self.n_samples, spec.blocks
        out = np.full((n, *spec.shape), spec.fill, dtype=spec.dtype or object)
        wanted = np.arange(n) if where is None else np.flatnonzero(where)
        keys = [key for i in wanted.tolist() for key in spec.keys(i)]

        def read(part: range) -> None:
            found = chunks.get(self._zstore, keys[part.start * per : part.stop * per])
            for j, i in enumerate(wanted[part.start : part.stop].tolist()):
                raw = found[j * per : (j + 1) * per]
                if any(r is not None for r in raw):
                    out[i] = self._decode_record(i, name, raw)

        m = len(wanted)
        if chunks.is_local(self._zstore):
            threads = chunks.read_threads(-(-m * per // COLUMN_ROUND))
            parts = [range(k * m // threads, (k + 1) * m // threads) for k in range(threads)]
            if threads > 1:
                with futures.ThreadPoolExecutor(threads) as pool:
                    list(pool.map(read, parts))
            else:
                read(range(m))
        else:
            step = max(1, COLUMN_ROUND // per)
            for start in range(0, m, step):
                read(range(start, min(start + step, m)))
        return out

    def info(self, index: int) -> dict[str, Any]:
        """Everything recorded about one sample except its fields."""
        self._check_index(index)
        names = ("status", "reason", "seed", "params", "stats", "checksum", "provenance")
        status, reason, seed, params, stats, crc, prov = self._records(index, *names)
        status = int(status)
        out = {
            "index": index,
            "status": STATUS_NAMES[status],
            "reason": str(reason) if status == FAILED else "",
            "seed": int(seed),
            "params": dict(zip(self.param_names, np.asarray(params).tolist(), strict=True)),
            "stats": {
                k: int(v) if dtype.startswith("int") and np.isfinite(v) else float(v)
                for (k, (dtype, _, _)), v in zip(
                    fmt.SOLVER_STATS.items(), np.asarray(stats).tolist(), strict=True
                )
            },
            "checksum": int(crc),
        }
        out["provenance"] = json.loads(prov) if prov else {}
        return out

    def read(self, index: int) -> np.ndarray:
        """The fields of sample ``index``, float32 ``(T, C, X, Y, Z)``, read-only.

        Raises StoreError naming the sample unless its status is ok and its chunks decode to
        the recorded checksum.
        """
        self._check_index(index)
        status, crc, reason = self._records(index, "status", "checksum", "reason")
        self._check_ok(index, int(status), reason)
        return self.read_fields(index, int(crc))

    def read_fields(self, index: int, expected_checksum: int) -> np.ndarray:
        """Read sample ``index``'s fields and check them against ``expected_checksum`` (one of
        :meth:`checksums`); for callers that already hold the group's status and checksums
        (the loaders)."""
        return read_samples([(self, index, expected_checksum)])[0]

    def read_slab(self, index: int, axis: Literal["t", "x"], lo: int, hi: int) -> np.ndarray:
        """Rows ``[lo, hi)`` of time or x of sample ``index``: float32 ``(hi - lo, C, X, Y, Z)``
        for ``axis="t"``, ``(T, C, hi - lo, Y, Z)`` for ``axis="x"``; C-contiguous, writable,
        shared with nothing. What a domain rank reads instead of the whole sample.

        A sample of several chunks: it reads the sample's status, the checksum chunks of the
        x blocks it touches and only the ``fields`` chunks that intersect the slab: the slab's
        rows plus at most one partial chunk at either end (none when ``lo`` and ``hi`` are
        chunk boundaries, as :func:`pdeladder.slabs.slabs` cuts them); each chunk read is checked
        against its own checksum. A one-chunk sample is read whole and checked, then cut.
        Raises StoreError naming the sample unless its status is ok and every chunk read
        matches its checksum.
        """
        self._check_index(index)
        if axis not in ("t", "x"):
            raise UserInputError(f"{self.where()}: slab axis must be 't' or 'x', not {axis!r}")
        spec = self.chunks["fields"]
        a = 0 if axis == "t" else 2
        n, c = spec.shape[a], spec.chunks[a]
        if not 0 <= lo < hi <= n:
            raise UserInputError(f"{self.where(index)}: {axis} slab [{lo}, {hi}) outside [0, {n})")
        rows = [slice(None)] * len(spec.shape)
        if not self.blocked:
            rows[a] = slice(lo, hi)
            return np.array(self.read(index)[tuple(rows)])
        region = spec.along(a, range(lo // c, -(-hi // c)))
        sums = self.chunks[fmt.DIGEST_ARRAYS[0]]
        sum_region = sums.along(1, region[2])
        sum_keys = sums.keys(index, sum_region)
        keys = [*self.chunks["status"].keys(index), *sum_keys, *spec.keys(index, region)]
        raw = chunks.get(self._zstore, keys)
        status = MISSING if raw[0] is None else int(self._decode_record(index, "status", raw[:1]))
        if status != OK:
            self._check_ok(index, status, *self._records(index, "reason"))
        split = 1 + len(sum_keys)
        stored = sums.decode(raw[1:split], region=sum_region)[region[0].start : region[0].stop]
        data = self.decode_fields(index, raw[split:], None, region=region)
        found = np.array([checksum(data[p]) for p in spec.block_slices(region)], np.uint32)
        bad = np.argwhere(found.reshape(stored.shape) != stored)
        if bad.size:
            tb, xb = (int(v) for v in bad[0])
            raise StoreError(
                f"{self.where(index)}: fields chunk (t block {region[0].start + tb}, x block "
                f"{region[2].start + xb}) does not match its checksum (corrupt or missing); "
                "rewrite the sample"
            )
        start = region[a].start * c
        rows[a] = slice(lo - start, hi - start)
        return np.ascontiguousarray(data[tuple(rows)])

    def digest(self, fields: np.ndarray, region: Region | None = None) -> tuple[Any, np.ndarray]:
        """The checksum and moments of ``fields`` as this group stores them. A one-chunk
        sample: its CRC-32C (int) and ``(C, 3)`` moments. A :attr:`blocked` one: those of each
        chunk of ``region`` (default the whole sample; ``fields`` its values, shaped as its
        ``extent``), ``(BT', BX')`` uint32 and ``(BT', BX', C, 3)`` float64, each over the
        chunk's values without padding."""
        mask = mom.mask_channel(self.channel_names)  # moments inside the domain
        with np.errstate(invalid="ignore", over="ignore"):  # NaN/Inf show in the moments
            if not self.blocked:
                return checksum(fields), sample_moments(fields, mask)
            spec = self.chunks["fields"]
            region = spec.whole if region is None else region
            parts = spec.block_slices(region)
            size = (len(region[0]), len(region[2]))
            crcs = np.array([checksum(fields[p]) for p in parts], np.uint32).reshape(size)
            moments = np.stack([sample_moments(fields[p], mask) for p in parts])
        return crcs, moments.reshape(*size, *moments.shape[1:])

    def block_moments(self, where: np.ndarray | None = None) -> np.ndarray:
        """``(N, K, C, 3)`` stored ``(count, mean, M2)`` per channel of each sample's ``K``
        parts (its chunks where the group keeps moments per chunk, ``K = BT * BX``; the whole
        sample otherwise, ``K = 1``), which merge into the sample's (:func:`merge_moments`).
        ``where``: as for :meth:`column`."""
        stored = self.column(fmt.DIGEST_ARRAYS[1] if self.blocked else "moments", where=where)
        return stored.reshape(len(stored), -1, *stored.shape[-2:])

    def _check_ok(self, index: int, status: int, reason: Any) -> None:
        if status != OK:
            why = f" ({reason})" if status == FAILED else ""
            raise StoreError(f"{self.where(index)}: status is {STATUS_NAMES[status]}{why}")

    @cached_property
    def chunks(self) -> dict[str, SampleChunks]:
        """Per-sample arrays by name: how one sample's chunks are keyed and encoded."""
        return {
            spec.name: SampleChunks.of(self.node.path, spec)
            for spec in fmt.array_specs(self.attrs, 0)
            if spec.per_sample
        }

    @cached_property
    def _reads_into(self) -> bool:
        """Whether samples are read straight into arrays (:meth:`SampleChunks.reads_into`)."""
        return self.chunks["fields"].reads_into(self._zstore)

    @cached_property
    def _field_blocks(self) -> list[tuple[slice, ...]]:
        """The chunks of a sample whose checksums :meth:`checksums` combines: each ``fields``
        chunk (one for most samples)."""
        return self.chunks["fields"].block_slices()

    @property
    def _zstore(self) -> Any:
        return self.node.store

    @cached_property
    def _record_dtype(self) -> np.dtype:
        return fmt.record_dtype(self.attrs)

    @cached_property
    def _record_names(self) -> frozenset[str]:
        """The names :meth:`column` and :meth:`_records` take from ``record``."""
        return frozenset(self._record_dtype.names)

    def _records(self, index: int, *names: str) -> list[Any]:
        """Sample ``index``'s values of the per-sample record arrays (or ``record`` fields)
        ``names`` (the fill value where never written)."""
        arrays = list(dict.fromkeys("record" if n in self._record_names else n for n in names))
        keys = [self.chunks[name].keys(index) for name in arrays]
        raw = iter(chunks.get(self._zstore, [key for ks in keys for key in ks]))
        found = {}
        for name, ks in zip(arrays, keys, strict=True):
            got = [next(raw) for _ in ks]
            if name == "record":
                found[name] = self._record(index, got[0])
            elif all(r is None for r in got):
                found[name] = self.chunks[name].fill
            else:
                found[name] = self._decode_record(index, name, got)
        return [found["record"][n] if n in self._record_names else found[n] for n in names]

    def _record(self, index: int, raw: Any) -> np.void:
        """Sample ``index``'s ``record`` (a structured scalar) from its chunk's bytes (None:
        never written, which reads as the fill)."""
        spec = self.chunks["record"]
        if raw is None:
            row = np.full(spec.shape, fmt.RECORD_FILL, np.uint8)
        else:
            row = np.ascontiguousarray(self._decode_record(index, "record", [raw]))
        return row.view(self._record_dtype)[0]

    def _decode_record(self, index: int, name: str, raw: list[Any]) -> Any:
        try:
            return self.chunks[name].decode(raw)
        except Exception as err:
            raise StoreError(
                f"{self.where(index)}: cannot read {name} ({type(err).__name__}: {err}); its "
                "chunk is corrupt or truncated"
            ) from err

    def decode_fields(
        self,
        index: int,
        raw: list[Any],
        expected_checksum: int | None,
        out: np.ndarray | None = None,
        region: Region | None = None,
    ) -> np.ndarray:
        """Sample ``index``'s fields (of ``region``) from its chunks' bytes (into ``out`` when
        given), checked against its checksum unless ``expected_checksum`` is None."""
        if any(r is None for r in raw):
            raise StoreError(
                f"{self.where(index)}: a chunk of its fields is missing; rewrite the sample"
            )
        try:
            data = self.chunks["fields"].decode(raw, out, region)
        except Exception as err:
            raise self._unreadable(index, err) from err
        return data if expected_checksum is None else self._verified(index, data, expected_checksum)

    def read_fields_into(
        self, index: int, out: np.ndarray, expected_checksum: int, key: str | None = None
    ) -> np.ndarray:
        """Sample ``index``'s fields read straight into ``out`` (see :func:`chunks.read_into`),
        checked against its checksum; ``key``: its one ``fields`` chunk's, if known."""
        (key,) = self.chunks["fields"].keys(index) if key is None else (key,)
        try:
            found = chunks.read_into(self._zstore, key, out)
        except Exception as err:
            raise self._unreadable(index, err) from err
        if not found:
            raise StoreError(
                f"{self.where(index)}: a chunk of its fields is missing; rewrite the sample"
            )
        return self._verified(index, out, expected_checksum)

    def _unreadable(self, index: int, err: Exception) -> StoreError:
        return StoreError(
            f"{self.where(index)}: cannot read fields ({type(err).__name__}: {err}); a chunk is "
            "corrupt or truncated"
        )

    def _verified(self, index: int, data: np.ndarray, expected_checksum: int) -> np.ndarray:
        parts = self._field_blocks
        if len(parts) == 1:  # one chunk: the CRC of the fields
            found = checksum(data)
        else:
            found = sample_checksum(np.array([checksum(data[p]) for p in parts], np.uint32))
        if found != expected_checksum:
            raise StoreError(
                f"{self.where(index)}: fields do not match their checksum (a chunk is corrupt "
                "or missing); rewrite the sample"
            )
        return data

    def _check_index(self, index: int) -> None:
        n = self.n_samples
        if not 0 <= index < n:
            raise UserInputError(f"{self.where()}: sample index {index} outside [0, {n})")

    # -- normalisation statistics --------------------------------------------------------------

    def moments(self, status: np.ndarray | None = None) -> np.ndarray:
        """``(C, 3)`` merged ``(count, mean, M2)`` per channel over the ok samples
        (``status``: the group's :meth:`status`, when the caller has read it already)."""
        status = self.status() if status is None else status
        ok = status == OK
        return merge_moments(self.block_moments(where=ok)[ok])

    def normalisation(self, status: np.ndarray | None = None) -> dict[str, Any]:
        """The group's normalisation statistics (:func:`moments.normalisation`): the cached
        ones (the ``normalization`` attribute) when they describe the current ok samples,
        else freshly merged ones (``status``: the group's :meth:`status`, when the caller
        has read it already)."""
        status = self.status() if status is None else status
        cached = self.attrs.get("normalization")
        if mom.describes(cached, status):
            return cached
        return mom.normalisation(self.channel_names, self.moments(status), status)


def sample_checksum(chunk_checksums: np.ndarray) -> int:
    """The checksum of a whole sample from its chunks' checksums ``(BT, BX)``: the one chunk's
    (the CRC-32C of the fields) when it has one, else the CRC-32C of them as uint32
    little-endian C-order bytes."""
    crcs = np.ascontiguousarray(chunk_checksums, "<u4")
    return int(crcs.reshape(-1)[0]) if crcs.size == 1 else google_crc32c.value(crcs.tobytes())


def read_samples(
    items: Sequence[tuple[Group, int, int]], out: Sequence[np.ndarray] | None = None
) -> list[np.ndarray]:
    """The fields of several samples ``(group, index, expected checksum)`` of one store, each
    checked against its checksum; float32 ``(T, C, X, Y, Z)`` each, in order.

    With ``out`` (one writable C-contiguous float32 array of each sample's shape), the fields
    are decoded into those arrays, and a local store's uncompressed samples are read into them
    with no buffer in between: arrays reused across batches cost no page faults, fresh ones do.
    Without ``out`` the arrays are read-only (an uncompressed single-chunk sample is a view of
    the bytes read, not a copy), whatever the store returned.

    Reads in the calling thread for local stores, and in one round of concurrent requests for
    others. Raises StoreError naming the first sample that cannot be read or fails its
    checksum.
    """
    if not items:
        return []
    store = items[0][0].node.store
    dests = [None] * len(items) if out is None else list(out)
    direct = [d is not None and g._reads_into for (g, _, _), d in zip(items, dests, strict=True)]
    keys = [group.chunks["fields"].keys(index) for group, index, _ in items]
    found = iter(
        chunks.get(store, [k for ks, d in zip(keys, direct, strict=True) if not d for k in ks])
    )
    fields = [
        group.read_fields_into(index, dest, expected, ks[0])
        if d
        else group.decode_fields(index, [next(found) for _ in ks], expected, dest)
        for (group, index, expected), ks, dest, d in zip(items, keys, dests, direct, strict=True)
    ]
    if out is None:
        for f in fields:
            f.flags.writeable = False  # may be a view of the bytes read, shared by nothing else
    return fields
