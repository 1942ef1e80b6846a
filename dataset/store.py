"""Zarr v3 stores of solver samples, through fsspec URLs (paths, ``file://``, ``memory://``, ``s3://``).

A store holds one group per (stage, family, dimension, resolution, snapshots): its read side is
:class:`~pdeladder.dataset.group.Group`, its write side
:class:`~pdeladder.dataset.writer.WritableGroup`; its attributes and arrays are
:mod:`pdeladder.dataset.format`'s (``docs/format.md``). Group creation is race-safe: every
writer creates the same deterministic metadata and tolerates finding it already there.

Example::

    store = open_store("s3://bucket/run", mode="a", check_writable=True)
    group = store.require_group("stage0", get_family("heat"), grid, n_samples=64)
    group.write(3, sample)
    fields = group.read(3)  # float32 (T, C, X, Y, Z)
"""

import os
import uuid
from pathlib import Path
from typing import Any, Literal

import fsspec
import zarr
import zarr.api.asynchronous
import zarr.errors
from zarr.core.sync import sync
from zarr.storage import FsspecStore, LocalStore

from pdeladder.dataset import chunks
from pdeladder.dataset import format as fmt
from pdeladder.dataset.group import Group
from pdeladder.dataset.writer import WritableGroup
from pdeladder.errors import StoreError, UserInputError
from pdeladder.solvers.family import Family
from pdeladder.solvers.grid import Grid

_ARRAY_CONFIG = {"write_empty_chunks": True}  # a written sample always has its chunks on disk


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
    attributes = fmt.ROOT_ATTRS if mode == "a" else None
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
        root.update_attributes(fmt.ROOT_ATTRS)
        attrs = fmt.ROOT_ATTRS
    fmt.check_version(attrs, url)
    return Store(url, root, read_only=mode == "r")


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

    def group(self, path: str) -> Group:
        """The group at ``path`` (one of :meth:`groups`): a :class:`WritableGroup` unless
        the store was opened read-only."""
        try:
            node = self.root[path]
        except KeyError:
            raise StoreError(f"{self.url}: no group {path!r}") from None
        if not isinstance(node, zarr.Group):
            raise StoreError(f"{self.url}: {path!r} is an array, not a group")
        return (Group if self.read_only else WritableGroup)(self, path, node)

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
    ) -> WritableGroup:
        """Open the group of ``(stage, family, grid)``, creating it if absent.

        ``n_samples=None`` makes an appendable group; ``n_samples=N`` a fixed one with every
        sample missing. Re-opening with the same configuration is a no-op; a different one
        (family, grid, N, attrs such as ``config_hash``) is a :class:`StoreError`. A group that
        exists keeps the storage it was made with (``compression`` and chunking:
        ``format.STORAGE_ATTRS``), whatever ``compression`` says; one of another format
        version is refused (:func:`format.check_version`).

        ``chunk_time`` and ``chunk_x`` (snapshots and x points per ``fields`` chunk) default to
        :func:`format.chunking`'s choice: one chunk per sample unless it is large. Samples
        that K processes write in x slabs (:meth:`WritableGroup.write_slab`) need at least K x chunks.
        """
        if self.read_only:
            raise StoreError(f"{self.url}: opened read-only; open it with mode='a' to write")
        meta = fmt.group_metadata(
            stage, family, grid, n_samples, attrs, compression, (chunk_time, chunk_x)
        )
        path = fmt.group_path(stage, family.name, grid.dim, grid.resolution, grid.snapshots)
        try:
            node = self.root.create_group(path, attributes=meta)
        except (zarr.errors.ContainsGroupError, zarr.errors.ContainsArrayAndGroupError):
            node = self.root[path]
            fmt.check_version(dict(node.attrs), f"{self.url}::{path}")
            old, new = fmt.identity(dict(node.attrs)), fmt.identity(meta)
            if old != new:
                keys = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
                diff = "; ".join(f"{k}: {old.get(k)!r} != {new.get(k)!r}" for k in keys)
                raise StoreError(
                    f"{self.url}: group {path} exists with another configuration ({diff})"
                ) from None
            meta = dict(node.attrs)  # stored as it was made (fmt.STORAGE_ATTRS)
        except Exception as err:
            raise StoreError(f"{self.url}: cannot create group {path} ({err})") from None
        n = 0 if n_samples is None else n_samples
        specs = fmt.array_specs(meta, n)

        async def require_arrays() -> list[zarr.Array]:
            anode = await zarr.api.asynchronous.open_group(
                store=node.store, path=node.path, mode="r+"
            )
            return await chunks.gather(*(_require_array(anode, spec, meta) for spec in specs))

        try:
            arrays = sync(require_arrays())
        except Exception as err:
            raise StoreError(f"{self.url}: cannot create the arrays of {path} ({err})") from err
        return WritableGroup(
            self, path, node, arrays={s.name: a for s, a in zip(specs, arrays, strict=True)}
        )

    def grow_group(
        self, path: str, n_samples: int, attrs: dict[str, Any] | None = None
    ) -> WritableGroup:
        """Grow the fixed-size group at ``path`` to ``n_samples``: every per-sample array is
        resized along the sample axis (only its metadata is rewritten: no chunk of the samples
        it holds changes, the new ones are missing), then the group's ``n_samples`` and
        ``attrs`` (e.g. the new ``config_hash``) are updated in one attribute write.

        Crash-safe by its order: until the attributes are written the group says its old
        count, no sample beyond it can have been written, and a second call completes the
        resize (arrays already at ``n_samples`` are left alone). The same call with the group's
        own count squares arrays a killed growth left longer than it. Fewer samples than the
        group's count is a StoreError (a store never drops samples), as is an appendable
        group (``n_samples=None``)."""
        group = self.group(path)
        if not isinstance(group, WritableGroup):
            raise StoreError(f"{self.url}: opened read-only; open it with mode='a' to write")
        meta = dict(group.attrs)
        old = meta.get("n_samples")
        if old is None:
            raise StoreError(f"{group.where()}: is appendable (no fixed n_samples): append to it")
        fmt.check_samples(n_samples)
        if n_samples < old:
            raise StoreError(
                f"{group.where()}: holds {old} samples; it cannot shrink to {n_samples}"
            )
        specs = [s for s in fmt.array_specs(meta, n_samples) if s.per_sample]

        async def resize() -> None:
            anode = await zarr.api.asynchronous.open_group(
                store=group.node.store, path=group.node.path, mode="r+"
            )

            async def one(spec: fmt.ArraySpec) -> None:
                arr = await anode.getitem(spec.name)
                if arr.shape != spec.shape:
                    await arr.resize(spec.shape)

            await chunks.gather(*(one(spec) for spec in specs))

        try:
            sync(resize())
            update = {"n_samples": n_samples, **(attrs or {})}
            if any(meta.get(k) != v for k, v in update.items()):
                group.node.update_attributes(update)  # last: the commit of the growth
        except Exception as err:
            raise StoreError(
                f"{group.where()}: growing to {n_samples} samples failed "
                f"({type(err).__name__}: {err}); run it again to complete it"
            ) from err
        return WritableGroup(self, path, self.root[path])


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
            chunk_key_encoding={"name": "default", "separator": fmt.KEY_SEPARATOR},
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
