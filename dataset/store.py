"""Zarr v3 stores of solver samples, through fsspec URLs (paths, ``file://``, ``memory://``, ``s3://``).

A store holds one group per (stage, family, dimension, resolution, snapshots); the arrays of a
group are listed in :mod:`pdeladder.dataset.format` and ``docs/format.md``.

Concurrency: samples are chunked one per chunk in every per-sample array, so any number of
processes may :meth:`Group.write` different samples of one fixed-size group at once. Group
creation is race-safe: every writer creates the same deterministic metadata and tolerates
finding it already there. An appendable group (``n_samples=None``) has one writer at a time.
A sample's ``status`` is written after its data; a failed sample records its reason, never data.

Example::

    store = open_store("s3://bucket/run", mode="a", check_writable=True)
    group = store.require_group("stage0", get_family("heat"), grid, n_samples=64)
    group.write(3, sample)
    fields = group.read(3)  # float32 (T, C, X, Y, Z)

Speed: a sample's chunks are written and read as store keys (:mod:`pdeladder.dataset.chunks`),
not through zarr's array API, whose fixed cost per call exceeds the I/O of a small chunk. A
write puts the fields while background threads put each record and the checksum and moments,
then status: a local store's files in the calling thread, other stores' keys in
one round of concurrent requests each.
:func:`read_samples` reads the chunks of several samples in one call, and
:meth:`Group.column` a record array of every sample (status, checksums, parameters, moments:
what catalogs, ``verify`` and resuming campaigns read).
"""

import json
import os
import uuid
import zlib
from collections.abc import Callable, Coroutine, Sequence
from concurrent import futures
from functools import cache, cached_property
from pathlib import Path
from typing import Any, Literal

import fsspec
import numpy as np
import zarr
import zarr.api.asynchronous
import zarr.errors
from zarr.core.sync import sync as _zarr_sync
from zarr.storage import FsspecStore, LocalStore

from pdeladder.dataset import chunks
from pdeladder.dataset import format as fmt
from pdeladder.dataset.chunks import SampleChunks
from pdeladder.dataset.format import FAILED, MISSING, OK, STATUS_NAMES
from pdeladder.dataset.moments import mean_std, merge_moments, sample_moments
from pdeladder.dataset.provenance import checksum, software_versions
from pdeladder.errors import StoreError, UserInputError
from pdeladder.solvers.family import Family, Sample
from pdeladder.solvers.grid import Grid

__all__ = [
    "FAILED",
    "MISSING",
    "OK",
    "STATUS_NAMES",
    "Group",
    "Store",
    "absolute_url",
    "open_store",
    "read_samples",
]

ROOT_ATTRS = {"format": fmt.FORMAT_NAME, "format_version": fmt.FORMAT_VERSION}
_ARRAY_CONFIG = {"write_empty_chunks": True}  # a written sample always has its chunks on disk
#: Keys :meth:`Group.column` requests at once from a remote store, and reads at least per
#: thread from a local one.
COLUMN_ROUND = 256


def _run[T](coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on zarr's own event loop (where its stores' connections live), from any
    thread but that loop's; one round trip however many requests the coroutine gathers."""
    return _zarr_sync(coro)


def _protocol(url: str) -> tuple[str, str]:
    protocol, path = fsspec.core.split_protocol(url)
    return protocol or "file", path


def absolute_url(url: str) -> str:
    """``url`` as other processes must see it: a local path (plain or ``file://``) made
    absolute, since Ray actors and Ray Train workers run in working directories of their own;
    any other URL unchanged."""
    protocol, path = _protocol(url)
    return os.path.abspath(path) if protocol == "file" else url


def _zarr_store(url: str, read_only: bool, storage_options: dict | None) -> Any:
    protocol, path = _protocol(url)
    try:
        if protocol == "file":
            return LocalStore(path, read_only=read_only)
        return FsspecStore.from_url(url, storage_options=storage_options, read_only=read_only)
    except ImportError as err:
        raise StoreError(
            f"{url}: no filesystem for {protocol}:// ({err.name} is missing)"
        ) from None
    except Exception as err:
        raise StoreError(f"{url}: cannot open ({type(err).__name__}: {err})") from None


def _check_writable(url: str, storage_options: dict | None) -> None:
    """Fail with a one-line StoreError if ``url`` cannot be written; create nothing."""
    protocol, path = _protocol(url)
    if protocol == "memory":
        return
    if protocol == "file":
        p = Path(path).absolute()
        if p.exists() and not p.is_dir():
            raise StoreError(f"{url}: exists and is not a directory")
        if p.is_dir() and any(p.iterdir()) and not (p / "zarr.json").exists():
            raise StoreError(f"{url}: directory is not empty and is not a zarr store")
        existing = next(a for a in (p, *p.parents) if a.exists())
        if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
            raise StoreError(f"{url}: cannot write under {existing}")
        return
    try:  # object stores: write a probe object and remove it
        fs = fsspec.filesystem(protocol, **(storage_options or {}))
        probe = f"{path.rstrip('/')}/.pdeladder-write-probe-{uuid.uuid4().hex}"
        fs.pipe_file(probe, b"")
        fs.rm_file(probe)
    except Exception as err:
        raise StoreError(f"{url}: not writable ({type(err).__name__}: {err})") from None


def open_store(
    url: str,
    mode: Literal["r", "a"] = "r",
    *,
    check_writable: bool = False,
    storage_options: dict[str, Any] | None = None,
) -> "Store":
    """Open (``"r"``) or open-or-create (``"a"``) the store at ``url``.

    ``check_writable`` fails fast, before anything is created, when the location cannot be
    written. ``storage_options`` go to the fsspec filesystem (e.g. ``endpoint_url`` for S3).
    """
    if mode not in ("r", "a"):
        raise UserInputError(f"store mode must be 'r' or 'a', not {mode!r}")
    if check_writable:
        if mode != "a":
            raise UserInputError("check_writable needs mode='a'")
        _check_writable(url, storage_options)
    zstore = _zarr_store(url, mode == "r", storage_options)
    attributes = ROOT_ATTRS if mode == "a" else None
    try:
        try:
            root = zarr.open_group(zstore, mode=mode, attributes=attributes)
        except zarr.errors.ContainsGroupError:  # created by another writer since zarr looked
            root = zarr.open_group(zstore, mode=mode, attributes=attributes)
    except (FileNotFoundError, zarr.errors.NodeNotFoundError):
        raise StoreError(f"{url}: no store there") from None
    except zarr.errors.ContainsArrayError:
        raise StoreError(f"{url}: holds a zarr array, not a store") from None
    except Exception as err:
        raise StoreError(f"{url}: cannot open ({type(err).__name__}: {err})") from None
    attrs = dict(root.attrs)
    if mode == "a" and "format" not in attrs and not any(True for _ in root.keys()):
        root.update_attributes(ROOT_ATTRS)
        attrs = ROOT_ATTRS
    fmt.check_version(attrs, url)
    return Store(url, root, read_only=mode == "r")


def group_metadata(
    stage: str,
    family: Family,
    grid: Grid,
    n_samples: int | None,
    attrs: dict[str, Any] | None,
    compression: str,
) -> dict[str, Any]:
    """The deterministic attributes of a group (``software`` aside, equal for every writer)."""
    if not stage or "/" in stage or stage.startswith("."):
        raise UserInputError(f"stage name must be non-empty without '/', got {stage!r}")
    if n_samples is not None and n_samples < 1:
        raise UserInputError(f"n_samples must be positive, got {n_samples}")
    if compression not in fmt.COMPRESSIONS:
        raise UserInputError(
            f"unknown compression {compression!r}; available: {', '.join(fmt.COMPRESSIONS)}"
        )
    channels = family.channels_for(grid.dim)
    meta: dict[str, Any] = {
        **ROOT_ATTRS,
        "stage": stage,
        "family": family.name,
        "title": family.title,
        "equation": family.equation,
        "boundary_conditions": family.boundary_conditions,
        "steady": family.steady,
        "dim": grid.dim,
        "resolution": grid.resolution,
        "snapshots": grid.snapshots,
        "t_end": grid.t_end,
        "channels": [
            {"name": c.name, "long_name": c.long_name, "units": c.units, "role": c.role}
            for c in channels
        ],
        "parameters": [
            {k: p[k] for k in ("name", "units", "low", "high", "description")}
            for p in family.Params.describe()
        ],
        "n_samples": n_samples,
        "chunk_time": fmt.chunk_time(grid.snapshots, len(channels), grid.shape),
        "compression": compression,
        "software": software_versions(),
    }
    extra = dict(attrs or {})
    if clash := sorted(set(extra) & set(meta)):
        raise UserInputError(f"attrs may not set reserved group attributes: {', '.join(clash)}")
    try:
        meta.update(json.loads(json.dumps(extra)))
    except (TypeError, ValueError) as err:
        raise UserInputError(f"attrs must be JSON values: {err}") from None
    return meta


def _identity(meta: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in meta.items() if k not in fmt.MUTABLE_ATTRS + fmt.STORAGE_ATTRS}


class Store:
    """A pdeladder store: groups of samples under one zarr root."""

    def __init__(self, url: str, root: zarr.Group, *, read_only: bool):
        self.url, self.root, self.read_only = url, root, read_only

    def __repr__(self) -> str:
        return f"Store({self.url!r}, read_only={self.read_only})"

    def groups(self) -> list[str]:
        """Paths ``stage/family/{dim}d_n{res}_t{T}`` of the sample groups, sorted."""
        out = []
        for stage, sg in self.root.groups():
            for family, fg in sg.groups():
                out += [f"{stage}/{family}/{name}" for name, _ in fg.groups()]
        return sorted(out)

    def group(self, path: str) -> "Group":
        """The group at ``path`` (one of :meth:`groups`)."""
        try:
            node = self.root[path]
        except KeyError:
            raise StoreError(f"{self.url}: no group {path!r}") from None
        if not isinstance(node, zarr.Group):
            raise StoreError(f"{self.url}: {path!r} is an array, not a group")
        return Group(self, path, node)

    def require_group(
        self,
        stage: str,
        family: Family,
        grid: Grid,
        n_samples: int | None = None,
        attrs: dict[str, Any] | None = None,
        *,
        compression: str = fmt.DEFAULT_COMPRESSION,
    ) -> "Group":
        """Open the group of ``(stage, family, grid)``, creating it if absent.

        ``n_samples=None`` makes an appendable group; ``n_samples=N`` a fixed one with every
        sample missing. Re-opening with the same configuration is a no-op; a different one
        (family, grid, N, attrs such as ``config_hash``) is a :class:`StoreError`. A group that
        exists keeps the storage it was made with (``compression``, format version, time
        chunking: ``format.STORAGE_ATTRS``), whatever ``compression`` says.
        """
        if self.read_only:
            raise StoreError(f"{self.url}: opened read-only; open it with mode='a' to write")
        meta = group_metadata(stage, family, grid, n_samples, attrs, compression)
        path = fmt.group_path(stage, family.name, grid.dim, grid.resolution, grid.snapshots)
        try:
            node = self.root.create_group(path, attributes=meta)
        except (zarr.errors.ContainsGroupError, zarr.errors.ContainsArrayAndGroupError):
            node = self.root[path]
            old, new = _identity(dict(node.attrs)), _identity(meta)
            if old != new:
                keys = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
                diff = "; ".join(f"{k}: {old.get(k)!r} != {new.get(k)!r}" for k in keys)
                raise StoreError(
                    f"{self.url}: group {path} exists with another configuration ({diff})"
                ) from None
            fmt.check_version(dict(node.attrs), f"{self.url}::{path}")
            meta = dict(node.attrs)  # stored as it was made (fmt.STORAGE_ATTRS)
        except Exception as err:
            raise StoreError(f"{self.url}: cannot create group {path} ({err})") from None
        n = 0 if n_samples is None else n_samples
        specs = fmt.layout(meta, n)

        async def require_arrays() -> list[zarr.Array]:
            anode = await zarr.api.asynchronous.open_group(
                store=node.store, path=node.path, mode="r+"
            )
            return await chunks.gather(*(_require_array(anode, spec, meta) for spec in specs))

        try:
            arrays = _run(require_arrays())
        except Exception as err:
            raise StoreError(f"{self.url}: cannot create the arrays of {path} ({err})") from err
        return Group(
            self, path, node, arrays={s.name: a for s, a in zip(specs, arrays, strict=True)}
        )


async def _require_array(
    node: zarr.AsyncGroup, spec: fmt.ArraySpec, meta: dict[str, Any]
) -> zarr.Array:
    """Create one array of a group unless it exists (identical metadata from every writer);
    the array, opened."""
    dtype = str if spec.dtype == "str" else spec.dtype
    try:
        arr = await node.create_array(
            spec.name,
            shape=spec.shape,
            dtype=dtype,
            chunks=spec.chunks,
            fill_value=spec.fill_value,
            compressors=fmt.COMPRESSIONS[spec.compression] or None,
            dimension_names=spec.dims,
            attributes=spec.attrs,
            chunk_key_encoding={"name": "default", "separator": spec.separator},
            config=_ARRAY_CONFIG,
        )
    except (zarr.errors.ContainsArrayError, zarr.errors.ContainsArrayAndGroupError):
        found = await node.getitem(spec.name)
        if not isinstance(found, zarr.AsyncArray):
            raise StoreError(f"{spec.name!r} is a group, not an array") from None
        return zarr.Array(found)
    if not spec.per_sample:
        await arr.setitem(slice(None), fmt.coordinate_values(meta)[spec.name])
    return zarr.Array(arr)


class Group:
    """One group of samples; see the module docstring for the concurrency rules."""

    def __init__(
        self,
        store: Store,
        path: str,
        node: zarr.Group,
        *,
        arrays: dict[str, zarr.Array] | None = None,
    ):
        self.store, self.path, self.node = store, path, node
        self.attrs: dict[str, Any] = dict(node.attrs)
        fmt.check_version(self.attrs, f"{store.url}::{path}")
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

    def _async(self, name: str) -> zarr.AsyncArray:
        """The asynchronous side of an array opened before (see :meth:`_open`): coroutines run
        on zarr's loop and cannot open arrays themselves."""
        return self._arrays[name].async_array

    def _open(self, *names: str) -> None:
        for name in names:
            self.array(name)

    def where(self, index: int | None = None) -> str:
        """``url::group[index]``: how errors name a sample."""
        base = f"{self.store.url}::{self.path}"
        return base if index is None else f"{base} sample {index}"

    # -- description ---------------------------------------------------------------------------

    @property
    def family(self) -> str:
        return self.attrs["family"]

    @cached_property
    def grid(self) -> Grid:
        a = self.attrs
        return Grid(a["dim"], a["resolution"], a["snapshots"], float(a["t_end"]))

    @property
    def channel_names(self) -> list[str]:
        return [c["name"] for c in self.attrs["channels"]]

    @property
    def param_names(self) -> list[str]:
        return [p["name"] for p in self.attrs["parameters"]]

    @property
    def n_samples(self) -> int:
        return self.array("status").shape[0]

    @property
    def sample_shape(self) -> tuple[int, int, int, int, int]:
        """``(T, C, X, Y, Z)`` of one sample."""
        return (self.grid.snapshots, len(self.channel_names), *self.grid.shape)

    # -- reading -------------------------------------------------------------------------------

    def status(self) -> np.ndarray:
        """``(N,)`` uint8: MISSING (0), OK (1) or FAILED (2) per sample."""
        return self.column("status")

    def checksums(self) -> np.ndarray:
        """``(N,)`` uint32 CRC-32C of each sample's fields (0 where not ok)."""
        return self.column("checksum")

    def params(self) -> np.ndarray:
        """``(N, P)`` float64 parameter vectors (NaN where never written)."""
        return self.column("params")

    def column(self, name: str) -> np.ndarray:
        """Every sample's value of the per-sample record array ``name`` (all but ``fields``),
        ``(N, ...)`` as zarr would return it: the fill value where a sample never wrote it.

        Read chunk by chunk as store keys (zarr's array API costs about half a millisecond
        per chunk, and these arrays have one chunk per sample): a local store's files on as
        many threads as cores, other stores' keys in rounds of ``COLUMN_ROUND`` concurrent
        requests. Raises StoreError naming the first sample whose chunk does not decode.
        """
        if name == "fields":
            raise ValueError("fields are read sample by sample: read_samples")
        spec = self.chunks[name]
        n = self.n_samples
        out = np.full((n, *spec.shape), spec.fill, dtype=spec.dtype or object)
        keys = [spec.keys(i)[0] for i in range(n)]

        def read(part: range) -> None:
            found = chunks.get(self._zstore, keys[part.start : part.stop])
            for i, raw in zip(part, found, strict=True):
                if raw is not None:
                    out[i] = self._decode_record(i, name, raw)

        if chunks.is_local(self._zstore):
            threads = chunks.read_threads(-(-n // COLUMN_ROUND))
            parts = [range(k * n // threads, (k + 1) * n // threads) for k in range(threads)]
            if threads > 1:
                with futures.ThreadPoolExecutor(threads) as pool:
                    list(pool.map(read, parts))
            else:
                read(range(n))
        else:
            for start in range(0, n, COLUMN_ROUND):
                read(range(start, min(start + COLUMN_ROUND, n)))
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
        if int(status) != OK:
            why = f" ({reason})" if int(status) == FAILED else ""
            raise StoreError(f"{self.where(index)}: status is {STATUS_NAMES[int(status)]}{why}")
        return self.read_fields(index, int(crc))

    def read_fields(self, index: int, expected_checksum: int) -> np.ndarray:
        """Read sample ``index``'s fields and check them against ``expected_checksum``; for
        callers that already hold the group's status and checksums (the loaders)."""
        return read_samples([(self, index, expected_checksum)])[0]

    @cached_property
    def chunks(self) -> dict[str, SampleChunks]:
        """Per-sample arrays by name: how one sample's chunks are keyed and encoded."""
        return {
            spec.name: SampleChunks.of(self.node.path, spec)
            for spec in fmt.layout(self.attrs, 0)
            if spec.per_sample
        }

    @property
    def _zstore(self) -> Any:
        return self.node.store

    def _records(self, index: int, *names: str) -> list[Any]:
        """Sample ``index``'s values of one-chunk per-sample arrays (fill where never written)."""
        raw = chunks.get(self._zstore, [self.chunks[name].keys(index)[0] for name in names])
        return [
            self.chunks[name].fill if r is None else self._decode_record(index, name, r)
            for name, r in zip(names, raw, strict=True)
        ]

    def _decode_record(self, index: int, name: str, raw: Any) -> Any:
        try:
            return self.chunks[name].decode([raw])
        except Exception as err:
            raise StoreError(
                f"{self.where(index)}: cannot read {name} ({type(err).__name__}: {err}); its "
                "chunk is corrupt or truncated"
            ) from err

    def _decode_fields(
        self, index: int, raw: list[Any], expected_checksum: int, out: np.ndarray | None = None
    ) -> np.ndarray:
        """Sample ``index``'s fields from its chunks' bytes (into ``out`` when given), checked
        against its checksum."""
        if any(r is None for r in raw):
            raise StoreError(
                f"{self.where(index)}: a chunk of its fields is missing; rewrite the sample"
            )
        try:
            data = self.chunks["fields"].decode(raw, out)
        except Exception as err:
            raise self._unreadable(index, err) from err
        return self._verified(index, data, expected_checksum)

    def _read_fields_into(self, index: int, out: np.ndarray, expected_checksum: int) -> np.ndarray:
        """Sample ``index``'s fields read straight into ``out`` (see :func:`chunks.read_into`),
        checked against its checksum."""
        (key,) = self.chunks["fields"].keys(index)
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
        if checksum(data) != expected_checksum:
            raise StoreError(
                f"{self.where(index)}: fields do not match their checksum (a chunk is corrupt "
                "or missing); rewrite the sample"
            )
        return data

    def _check_index(self, index: int) -> None:
        n = self.n_samples
        if not 0 <= index < n:
            raise UserInputError(f"{self.where()}: sample index {index} outside [0, {n})")

    # -- writing -------------------------------------------------------------------------------

    def write(self, index: int, sample: Sample) -> None:
        """Write ``sample`` at ``index``: data, parameters, seed, statistics, checksum and
        moments first, then status ok once they have all completed; a failed sample gets
        status failed and its reason. A sample that was written before is set back to missing
        first, so no reader trusts it while it is rewritten. Fields holding NaN or Inf are
        refused (UserInputError), after which the sample is missing."""
        self._check_write(sample)
        self._check_index(index)
        self._guarded_write(index, lambda: self._write(index, sample))

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

    def _encoded(self, index: int, values: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for name, value in values.items():
            spec = self.chunks[name]
            out.update(zip(spec.keys(index), spec.encode(value), strict=True))
        return out

    def _put(self, index: int, values: dict[str, Any]) -> None:
        """Store sample ``index``'s ``values``; only its status atomically: the other records
        count only once a later status write says ok (or failed)."""
        chunks.put(self._zstore, self._encoded(index, values), atomic="status" in values)

    def _write(self, index: int, sample: Sample) -> None:
        """Write the fields while background threads write each solver record and compute the
        checksum and moments, then write those; once all have landed, status. Every record is
        a file or an object of its own, and creating one costs about as much as writing a
        small sample's bytes, so they are created side by side."""
        status = self.chunks["status"]
        (raw,) = chunks.get(self._zstore, status.keys(index))
        before = MISSING if raw is None else int(status.decode([raw]))
        if before != MISSING:
            self._put(index, {"status": MISSING})
        records = {
            "params": sample.params.vector(),
            "seed": sample.seed,
            "stats": [float(getattr(sample.stats, name)) for name in fmt.SOLVER_STATS],
            "provenance": json.dumps(sample.provenance, sort_keys=True, default=str),
        }
        if not sample.ok:
            records["reason"] = sample.stats.reason or "failed"
        elif before == FAILED:  # reason counts only where status is failed; tidy it anyway
            records["reason"] = ""
        pool = _writers()
        side = [pool.submit(self._put, index, {name: value}) for name, value in records.items()]
        if sample.ok:
            side.append(pool.submit(self._put_digest, index, sample.fields))
            try:
                self._put(index, {"fields": sample.fields})
            finally:
                futures.wait(side)  # nothing outlives a failed write
        else:
            futures.wait(side)
        for job in side:
            job.result()  # the first error, if any
        self._put(index, {"status": OK if sample.ok else FAILED})

    def _put_digest(self, index: int, fields: np.ndarray) -> None:
        """Store the checksum and moments of sample ``index``'s ``fields``; refuse NaN/Inf."""
        crc, moments = checksum(fields), sample_moments(fields)
        if not np.isfinite(moments).all():
            raise UserInputError(f"{self.where(index)}: fields hold NaN/Inf; record a failure")
        self._put(index, {"checksum": crc, "moments": moments})

    def append(self, sample: Sample) -> int:
        """Write ``sample`` at the end of an appendable group; returns its index."""
        if self.attrs["n_samples"] is not None:
            raise StoreError(
                f"{self.where()}: has a fixed size of {self.attrs['n_samples']}; use write(index)"
            )
        self._check_write(sample)
        names = [spec.name for spec in fmt.layout(self.attrs, 0) if spec.per_sample]
        self._open(*names)
        n = self.n_samples
        resized = [
            self._async(spec.name).resize(spec.shape)
            for spec in fmt.layout(self.attrs, n + 1)
            if spec.per_sample
        ]

        def grow_and_write() -> None:
            _run(chunks.gather(*resized))
            self._write(n, sample)

        self._guarded_write(n, grow_and_write)
        return n

    def _check_write(self, sample: Sample) -> None:
        if self.store.read_only:
            raise StoreError(f"{self.store.url}: opened read-only; open it with mode='a' to write")
        if sample.family != self.family or sample.grid != self.grid:
            raise UserInputError(
                f"{self.where()}: sample of {sample.family} on {sample.grid} does not belong "
                f"to this group ({self.family} on {self.grid})"
            )
        if sample.params.names() != self.param_names:
            raise UserInputError(f"{self.where()}: parameters {sample.params.names()} differ")
        if sample.ok:
            f = sample.fields
            if f is None or f.dtype != np.float32 or f.shape != self.sample_shape:
                got = None if f is None else f"{f.dtype}{f.shape}"
                raise UserInputError(
                    f"{self.where()}: fields must be float32{self.sample_shape}, got {got}"
                )

    # -- normalisation statistics --------------------------------------------------------------

    def moments(self, status: np.ndarray | None = None) -> np.ndarray:
        """``(C, 3)`` merged ``(count, mean, M2)`` per channel over the ok samples
        (``status``: the group's :meth:`status`, when the caller has read it already)."""
        status = self.status() if status is None else status
        return merge_moments(self.column("moments")[status == OK])

    def update_stats(self) -> dict[str, Any]:
        """Merge the per-sample moments and cache them in the ``normalization`` attribute.

        Call once a stage is written (one caller at a time: it rewrites the group's attributes).
        """
        if self.store.read_only:
            raise StoreError(f"{self.store.url}: opened read-only; open it with mode='a' to write")
        stats = self._compute_stats()
        self.node.update_attributes({"normalization": stats})
        self.attrs["normalization"] = stats
        return stats

    def normalization(self, status: np.ndarray | None = None) -> dict[str, Any]:
        """``{"count", "mean", "std", "m2": [C], "ok_samples", "status_crc"}``: the cached
        statistics when they describe the current ok samples, else freshly merged ones
        (``status``: the group's :meth:`status`, when the caller has read it already)."""
        cached = self.attrs.get("normalization")
        status = self.status() if status is None else status
        if cached and cached.get("status_crc") == zlib.crc32(status.tobytes()):
            return cached
        return self._compute_stats(status)

    def _compute_stats(self, status: np.ndarray | None = None) -> dict[str, Any]:
        status = self.status() if status is None else status
        merged = self.moments(status)
        mean, std = mean_std(merged)
        return {
            "channels": self.channel_names,
            "count": merged[:, 0].tolist(),
            "mean": mean.tolist(),
            "std": std.tolist(),
            "m2": merged[:, 2].tolist(),
            "ok_samples": int((status == OK).sum()),
            "status_crc": zlib.crc32(status.tobytes()),
        }


def _writers() -> futures.ThreadPoolExecutor:
    """The threads that write a sample's records and digest its fields while the fields are
    written (numpy, CRC-32C and file I/O release the GIL), shared by every writer of the
    process: enough for one sample's records at once. A forked child gets its own (a parent's
    pool has no threads in the child and would never run its jobs)."""
    return _writers_of(os.getpid())


@cache
def _writers_of(pid: int) -> futures.ThreadPoolExecutor:
    return futures.ThreadPoolExecutor(8, thread_name_prefix=f"pdeladder-write-{pid}")


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
    store = items[0][0]._zstore
    dests = [None] * len(items) if out is None else list(out)
    direct = [
        d is not None and g.chunks["fields"].reads_into(store)
        for (g, _, _), d in zip(items, dests, strict=True)
    ]
    keys = [group.chunks["fields"].keys(index) for group, index, _ in items]
    found = iter(
        chunks.get(store, [k for ks, d in zip(keys, direct, strict=True) if not d for k in ks])
    )
    fields = [
        group._read_fields_into(index, dest, expected)
        if d
        else group._decode_fields(index, [next(found) for _ in ks], expected, dest)
        for (group, index, expected), ks, dest, d in zip(items, keys, dests, direct, strict=True)
    ]
    if out is None:
        for f in fields:
            f.flags.writeable = False  # may be a view of the bytes read, shared by nothing else
    return fields
