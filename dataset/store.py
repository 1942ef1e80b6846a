"""Zarr v3 stores of solver samples, through fsspec URLs (paths, ``file://``, ``memory://``, ``s3://``).

A store holds one group per (stage, family, dimension, resolution, snapshots); the arrays of a
group are listed in :mod:`pdeladder.dataset.format` and ``docs/format.md``.

Concurrency: samples are chunked one per chunk in every per-sample array, so any number of
processes may :meth:`Group.write` different samples of one fixed-size group at once. Group
creation is race-safe: every writer creates the same deterministic metadata and tolerates
finding it already there. An appendable group (``n_samples=None``) has one writer at a time.
A sample's ``status`` is written after its data; a failed sample records its reason, never data.
A large sample may be written by several processes, each its own x slab of whole chunks
(:meth:`Group.write_slab`), then committed by one (:meth:`Group.commit`), and read in time or x
slabs (:meth:`Group.read_slab`), each chunk read checked against its own checksum.

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
import google_crc32c
import numpy as np
import zarr
import zarr.api.asynchronous
import zarr.errors
from zarr.core.sync import sync as _zarr_sync
from zarr.storage import FsspecStore, LocalStore

from pdeladder.dataset import chunks
from pdeladder.dataset import format as fmt
from pdeladder.dataset.chunks import Region, SampleChunks
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
    "sample_checksum",
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
        if not existing.is_dir() or (existing == p and not os.access(p, os.W_OK | os.X_OK)):
            raise StoreError(f"{url}: cannot write under {existing}")
        if existing != p:  # its folder is to be made: try (root passes os.access even on /proc)
            probe = existing / f".pdeladder-write-probe-{uuid.uuid4().hex}"
            try:
                probe.mkdir()
                probe.rmdir()
            except OSError as err:
                reason = f"making a folder in {existing} fails ({err.strerror})"
                raise StoreError(f"{url}: cannot create it: {reason}") from None
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
    chunking: tuple[int | None, int | None] = (None, None),
) -> dict[str, Any]:
    """The deterministic attributes of a group (``software`` aside, equal for every writer).

    ``chunking``: ``(chunk_time, chunk_x)`` of ``fields``, each None for
    :func:`format.chunking`'s choice."""
    if not stage or "/" in stage or stage.startswith("."):
        raise UserInputError(f"stage name must be non-empty without '/', got {stage!r}")
    if n_samples is not None and n_samples < 1:
        raise UserInputError(f"n_samples must be positive, got {n_samples}")
    if compression not in fmt.COMPRESSIONS:
        raise UserInputError(
            f"unknown compression {compression!r}; available: {', '.join(fmt.COMPRESSIONS)}"
        )
    channels = family.channels_for(grid.dim)
    auto = fmt.chunking(grid.snapshots, len(channels), grid.shape)
    chunk_time, chunk_x = (a if c is None else c for c, a in zip(chunking, auto, strict=True))
    for name, value, most in (
        ("chunk_time", chunk_time, grid.snapshots),
        ("chunk_x", chunk_x, grid.shape[0]),
    ):
        if not (isinstance(value, int) and 1 <= value <= most):
            raise UserInputError(f"{name} must be an integer in 1..{most}, got {value!r}")
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
        "chunk_time": chunk_time,
        "chunk_x": chunk_x,
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
        chunk_time: int | None = None,
        chunk_x: int | None = None,
    ) -> "Group":
        """Open the group of ``(stage, family, grid)``, creating it if absent.

        ``n_samples=None`` makes an appendable group; ``n_samples=N`` a fixed one with every
        sample missing. Re-opening with the same configuration is a no-op; a different one
        (family, grid, N, attrs such as ``config_hash``) is a :class:`StoreError`. A group that
        exists keeps the storage it was made with (``compression``, format version, time
        chunking: ``format.STORAGE_ATTRS``), whatever ``compression`` says.

        ``chunk_time`` and ``chunk_x`` (snapshots and x points per ``fields`` chunk) default to
        :func:`format.chunking`'s choice: one chunk per sample unless it is large. Samples
        that K processes write in x slabs (:meth:`Group.write_slab`) need at least K x chunks.
        """
        if self.read_only:
            raise StoreError(f"{self.url}: opened read-only; open it with mode='a' to write")
        meta = group_metadata(
            stage, family, grid, n_samples, attrs, compression, (chunk_time, chunk_x)
        )
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

    @property
    def blocked(self) -> bool:
        """Whether this group keeps a checksum and moments per ``fields`` chunk (version 5 on;
        one per sample before)."""
        return fmt.blocked(self.attrs)

    def status(self) -> np.ndarray:
        """``(N,)`` uint8: MISSING (0), OK (1) or FAILED (2) per sample."""
        return self.column("status")

    def checksums(self, status: np.ndarray | None = None) -> np.ndarray:
        """``(N,)`` uint32: each ok sample's checksum as :func:`read_samples` checks a whole
        sample against it (0 where not ok; only ok samples' records are read). Up to version 4
        the CRC-32C of its fields; from version 5 the CRC-32C of its chunks' checksums
        (:func:`sample_checksum`). ``status``: the group's :meth:`status`, when the caller has
        read it already."""
        ok = (self.status() if status is None else status) == OK
        stored = self.column("checksum", where=ok)
        if not self.blocked:
            return stored
        out = np.zeros(len(stored), np.uint32)
        for i in np.flatnonzero(ok):
            out[i] = sample_checksum(stored[i])
        return out

    def params(self) -> np.ndarray:
        """``(N, P)`` float64 parameter vectors (NaN where never written)."""
        return self.column("params")

    def column(self, name: str, where: np.ndarray | None = None) -> np.ndarray:
        """Every sample's value of the per-sample record array ``name`` (all but ``fields``),
        ``(N, ...)`` as zarr would return it: the fill value where a sample never wrote it,
        and where ``where`` (``(N,)`` bool) is False, whose chunks are not read at all (a
        reader trusts nothing of a sample whose status is not ok: ``where=status == OK``).

        Read chunk by chunk as store keys (zarr's array API costs about half a millisecond
        per chunk, and these arrays have one chunk per sample, or per x block): a local
        store's files on as many threads as cores, other stores' keys in rounds of
        ``COLUMN_ROUND`` concurrent requests. Raises StoreError naming the first sample
        whose chunk does not decode.
        """
        if name == "fields":
            raise ValueError("fields are read sample by sample: read_samples")
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
            "checksum": self._sample_checksum(crc),
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
        return self.read_fields(index, self._sample_checksum(crc))

    def read_fields(self, index: int, expected_checksum: int) -> np.ndarray:
        """Read sample ``index``'s fields and check them against ``expected_checksum`` (one of
        :meth:`checksums`); for callers that already hold the group's status and checksums
        (the loaders)."""
        return read_samples([(self, index, expected_checksum)])[0]

    def read_slab(self, index: int, axis: Literal["t", "x"], lo: int, hi: int) -> np.ndarray:
        """Rows ``[lo, hi)`` of time or x of sample ``index``: float32 ``(hi - lo, C, X, Y, Z)``
        for ``axis="t"``, ``(T, C, hi - lo, Y, Z)`` for ``axis="x"``; C-contiguous, writable,
        shared with nothing. What a domain rank reads instead of the whole sample.

        From version 5 on it reads the sample's status, the checksum chunks of the x blocks
        it touches and only the ``fields`` chunks that intersect the slab: the slab's rows
        plus at most one partial chunk at either end (none when ``lo`` and ``hi`` are chunk
        boundaries, as :func:`format.slabs` cuts them); each chunk read is checked against
        its own checksum. Version 3 and 4 groups keep one checksum per sample, so there the
        whole sample is read and checked, then cut. Raises StoreError naming the sample
        unless its status is ok and every chunk read matches its checksum.
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
        sums = self.chunks["checksum"]
        sum_region = sums.along(1, region[2])
        sum_keys = sums.keys(index, sum_region)
        keys = [*self.chunks["status"].keys(index), *sum_keys, *spec.keys(index, region)]
        raw = chunks.get(self._zstore, keys)
        status = MISSING if raw[0] is None else int(self._decode_record(index, "status", raw[:1]))
        if status != OK:
            self._check_ok(index, status, *self._records(index, "reason"))
        split = 1 + len(sum_keys)
        stored = sums.decode(raw[1:split], region=sum_region)[region[0].start : region[0].stop]
        data = self._decode_fields(index, raw[split:], None, region=region)
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
        """The checksum and moments of ``fields`` as this group stores them. Up to version 4:
        the sample's CRC-32C (int) and ``(C, 3)`` moments. From version 5: those of each chunk
        of ``region`` (default the whole sample; ``fields`` its values, shaped as its
        ``extent``), ``(BT', BX')`` uint32 and ``(BT', BX', C, 3)`` float64, each over the
        chunk's values without padding."""
        with np.errstate(invalid="ignore", over="ignore"):  # NaN/Inf show in the moments
            if not self.blocked:
                return checksum(fields), sample_moments(fields)
            spec = self.chunks["fields"]
            region = spec.whole if region is None else region
            parts = spec.block_slices(region)
            size = (len(region[0]), len(region[2]))
            crcs = np.array([checksum(fields[p]) for p in parts], np.uint32).reshape(size)
            moments = np.stack([sample_moments(fields[p]) for p in parts])
        return crcs, moments.reshape(*size, *moments.shape[1:])

    def block_moments(self, where: np.ndarray | None = None) -> np.ndarray:
        """``(N, K, C, 3)`` stored ``(count, mean, M2)`` per channel of each sample's ``K``
        parts (its chunks from version 5 on, ``K = BT * BX``; the whole sample before,
        ``K = 1``), which merge into the sample's (:func:`merge_moments`). ``where``: as
        for :meth:`column`."""
        stored = self.column("moments", where=where)
        return stored.reshape(len(stored), -1, *stored.shape[-2:])

    def _sample_checksum(self, record: Any) -> int:
        """The checksum of a whole sample (see :meth:`checksums`) from its checksum record."""
        if not self.blocked:
            return int(record)
        return sample_checksum(np.broadcast_to(record, self.chunks["checksum"].shape))

    def _check_ok(self, index: int, status: int, reason: Any) -> None:
        if status != OK:
            why = f" ({reason})" if status == FAILED else ""
            raise StoreError(f"{self.where(index)}: status is {STATUS_NAMES[status]}{why}")

    @cached_property
    def chunks(self) -> dict[str, SampleChunks]:
        """Per-sample arrays by name: how one sample's chunks are keyed and encoded."""
        return {
            spec.name: SampleChunks.of(self.node.path, spec)
            for spec in fmt.layout(self.attrs, 0)
            if spec.per_sample
        }

    @cached_property
    def _field_blocks(self) -> list[tuple[slice, ...]]:
        """The chunks of a sample whose checksums :meth:`checksums` combines: each ``fields``
        chunk from version 5 on, the whole sample before."""
        spec = self.chunks["fields"]
        return spec.block_slices() if self.blocked else [spec.extent()]

    @property
    def _zstore(self) -> Any:
        return self.node.store

    def _records(self, index: int, *names: str) -> list[Any]:
        """Sample ``index``'s values of the per-sample record arrays ``names`` (the fill value
        where never written)."""
        keys = [self.chunks[name].keys(index) for name in names]
        raw = iter(chunks.get(self._zstore, [key for ks in keys for key in ks]))
        out = []
        for name, ks in zip(names, keys, strict=True):
            got = [next(raw) for _ in ks]
            never = all(r is None for r in got)
            out.append(self.chunks[name].fill if never else self._decode_record(index, name, got))
        return out

    def _decode_record(self, index: int, name: str, raw: list[Any]) -> Any:
        try:
            return self.chunks[name].decode(raw)
        except Exception as err:
            raise StoreError(
                f"{self.where(index)}: cannot read {name} ({type(err).__name__}: {err}); its "
                "chunk is corrupt or truncated"
            ) from err

    def _decode_fields(
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
        parts = self._field_blocks
        if len(parts) == 1:  # one chunk (every version before 5): the CRC of the fields
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

    # -- writing -------------------------------------------------------------------------------

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
        """Write x rows ``[lo, hi)`` of sample ``index`` (format 5): ``fields`` float32
        ``(T, C, hi - lo, Y, Z)``, whole chunks (``lo`` and ``hi`` on chunk boundaries, as
        :func:`format.slabs` cuts them), then those x blocks' checksum and moments chunks, so
        that a slab's digests are stored only once its fields are. Status is not touched.

        For K processes that each hold one x slab of a sample: every chunk of a slab, its
        digests included, is written by that slab's process alone. The protocol: one process
        calls :meth:`discard` (for a sample written before), then each process writes its
        slab, then, once all have returned, one process calls :meth:`commit`, the only step
        that marks the sample ok. A slab of a sample whose status is ok is refused (discard it
        first); fields holding NaN or Inf are refused before anything is written.
        """
        self._check_writable()
        self._check_index(index)
        if not self.blocked:
            raise StoreError(
                f"{self.where()}: format version {self.attrs['format_version']} keeps one "
                "checksum per sample; x slabs are written from format 5 on"
            )
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
            self._put(index, {"checksum": crcs, "moments": moments}, xblocks)

        self._guarded_write(index, put)

    def discard(self, index: int) -> None:
        """Set sample ``index`` back to missing, then remove its checksum chunks, so that no
        reader trusts it and :meth:`commit` waits until every slab is written anew."""
        self._check_writable()
        self._check_index(index)

        def discard() -> None:
            self._put(index, {"status": MISSING})
            chunks.delete(self._zstore, self.chunks["checksum"].keys(index))

        self._guarded_write(index, discard)

    def commit(self, index: int, sample: Sample) -> None:
        """Record sample ``index`` whose x slabs were written by :meth:`write_slab`: its
        parameters, seed, statistics and provenance from ``sample`` (with ``fields=None``: the
        fields are the slabs), then, once those have landed, status ok. Raises StoreError,
        writing nothing, while the checksum chunk of any x block is missing (its slab has not
        landed). A failed ``sample`` is recorded as :meth:`write` records it."""
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
        if not self.blocked:
            raise StoreError(f"{self.where()}: slabs are written from format 5 on")

        def commit() -> None:
            (status,) = self._records(index, "status")
            landed = chunks.exists(self._zstore, self.chunks["checksum"].keys(index))
            if not all(landed):
                cx, X = self.chunks["fields"].chunks[2], self.sample_shape[2]
                rows = [
                    f"[{b * cx}, {min(X, (b + 1) * cx)})" for b, ok in enumerate(landed) if not ok
                ]
                raise StoreError(
                    f"{self.where(index)}: x rows {', '.join(rows)} have not landed (no checksum "
                    "chunk); status not written"
                )
            self._put_all(index, self._sample_records(sample, int(status)))
            self._put(index, {"status": OK})

        self._guarded_write(index, commit)

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
        ``checksum`` and ``moments``); only its status atomically: the other records count
        only once a later status write says ok (or failed)."""
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
        """The records of ``sample`` but its fields and digests (``before``: its status)."""
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
        """Store the checksums and moments of sample ``index``'s ``fields``; refuse NaN/Inf."""
        crc, moments = self.digest(fields)
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

    # -- normalisation statistics --------------------------------------------------------------

    def moments(self, status: np.ndarray | None = None) -> np.ndarray:
        """``(C, 3)`` merged ``(count, mean, M2)`` per channel over the ok samples
        (``status``: the group's :meth:`status`, when the caller has read it already)."""
        status = self.status() if status is None else status
        ok = status == OK
        return merge_moments(self.block_moments(where=ok)[ok])

    def update_stats(self) -> dict[str, Any]:
        """Merge the per-sample moments and cache them in the ``normalization`` attribute.

        Call once a stage is written (one caller at a time: it rewrites the group's attributes).
        """
        self._check_writable()
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


#: The axis of each x-split per-sample array that holds its x blocks (``fields``: points).
_X_BLOCK_AXIS = {"fields": 2, "checksum": 1, "moments": 1}


def sample_checksum(chunk_checksums: np.ndarray) -> int:
    """The checksum of a whole version-5 sample from its chunks' checksums ``(BT, BX)``: the
    one chunk's (the CRC-32C of the fields, as before version 5) when it has one, else the
    CRC-32C of them as uint32 little-endian C-order bytes."""
    crcs = np.ascontiguousarray(chunk_checksums, "<u4")
    return int(crcs.reshape(-1)[0]) if crcs.size == 1 else google_crc32c.value(crcs.tobytes())


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
