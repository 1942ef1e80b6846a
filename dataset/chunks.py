"""One sample's chunks, encoded and decoded here and moved through the zarr store directly.

Zarr's array API costs about a millisecond per call (indexing, codec pipeline, an event-loop
round trip and a thread hop per chunk) and a sample touches eight arrays, so the writer and the
loaders address a sample's chunks as store keys instead. The bytes are exactly what zarr writes
for these arrays (Zarr v3 ``bytes`` codec: little-endian, C order, then the array's compressor;
``vlen-utf8`` for strings; ``default`` chunk keys ``c.i.j...``), so zarr, xarray and ``verify``
see ordinary arrays; ``verify`` checks that every array has the codecs this module assumes.

Stores with synchronous I/O (zarr's ``LocalStore``) are read and written in the calling thread,
one system call sequence per chunk, as zarr does it (a chunk is written under a temporary name,
then renamed over its key); others (fsspec: ``memory://``, ``s3://``) through zarr's event loop,
all keys of a call at once.
"""

import asyncio
import itertools
import math
import os
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
from zarr.buffer import default_buffer_prototype
from zarr.buffer.cpu import Buffer
from zarr.core.sync import sync
from zarr.storage import LocalStore

from pdeladder.dataset import format as fmt

_STRINGS = numcodecs.VLenUTF8()


def numcodec(name: str) -> Any:
    """The numcodecs codec that encodes the chunks of ``format.COMPRESSIONS[name]`` (zarr's
    blosc and zstd codecs wrap these; their frames are self-describing)."""
    codecs = fmt.COMPRESSIONS[name]
    if not codecs:
        return None
    (codec,) = codecs
    spec = codec.to_dict()
    cfg = spec["configuration"]
    if spec["name"] == "zstd":
        return numcodecs.Zstd(level=cfg["level"])
    shuffle = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}[cfg["shuffle"]]
    return numcodecs.Blosc(cname=cfg["cname"], clevel=cfg["clevel"], shuffle=shuffle)


Region = tuple[range, ...]  # block indices of a sample's chunks, one range per axis


@dataclass(frozen=True)
class SampleChunks:
    """How one sample of a per-sample array is stored: its chunks' keys and bytes.

    ``shape`` and ``chunks`` exclude the sample axis. A sample's chunks form the block grid
    :attr:`grid` (``fields``: time blocks by x blocks; one block for most records); zarr stores
    the chunks at the grid's far edges padded with ``fill``. A *region* is a box of that grid
    (one ``range`` of block indices per axis) whose values are the sample's elements
    ``[start * chunk, min(stop * chunk, n))`` on each axis: what a slab reads or writes.
    """

    prefix: str  # "<group path>/<array name>", relative to the store root
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    dtype: np.dtype | None  # little-endian numeric dtype, None for UTF-8 strings
    fill: Any
    compressor: Any

    @classmethod
    def of(cls, group_path: str, spec: fmt.ArraySpec) -> "SampleChunks":
        dtype = None if spec.dtype == "str" else np.dtype(spec.dtype).newbyteorder("<")
        return cls(
            f"{group_path}/{spec.name}",
            spec.shape[1:],
            spec.chunks[1:],
            dtype,
            spec.fill_value,
            numcodec(spec.compression),
        )

    @property
    def grid(self) -> tuple[int, ...]:
        """Chunks per sample along each axis."""
        return tuple(-(-n // c) for n, c in zip(self.shape, self.chunks, strict=True))

    @property
    def blocks(self) -> int:
        """Chunks per sample."""
        return math.prod(self.grid)

    @property
    def whole(self) -> Region:
        """The region of every chunk of a sample."""
        return tuple(range(g) for g in self.grid)

    def along(self, axis: int, blocks: range) -> Region:
        """The region of ``blocks`` on ``axis`` and every block of the other axes."""
        return tuple(blocks if a == axis else range(g) for a, g in enumerate(self.grid))

    def extent(self, region: Region | None = None) -> tuple[slice, ...]:
        """The sample's elements that ``region`` (default: every chunk) holds, per axis."""
        region = self.whole if region is None else region
        return tuple(
            slice(r.start * c, min(r.stop * c, n))
            for r, c, n in zip(region, self.chunks, self.shape, strict=True)
        )

    def block_slices(self, region: Region | None = None) -> list[tuple[slice, ...]]:
        """Each chunk of ``region`` (C order of the block grid) as slices of the region's
        values (an array of its :meth:`extent`), without the edge chunks' padding."""
        region = self.whole if region is None else region
        start = [r.start for r in region]
        return [
            tuple(
                slice((b - s) * c, min((b + 1) * c, n) - s * c)
                for b, s, c, n in zip(block, start, self.chunks, self.shape, strict=True)
            )
            for block in itertools.product(*region)
        ]

    def keys(self, index: int, region: Region | None = None) -> list[str]:
        """The store keys of sample ``index``'s chunks (of ``region``), in C order."""
        head = f"{self.prefix}/c{fmt.KEY_SEPARATOR}{index}"
        return [head + tail for tail in (self._tails if region is None else self._ends(region))]

    @cached_property
    def _tails(self) -> list[str]:
        """What follows the sample index in the keys of a whole sample (the same for every
        sample: made once, a read per sample would cost microseconds)."""
        return self._ends(self.whole)

    def _ends(self, region: Region) -> list[str]:
        sep = fmt.KEY_SEPARATOR
        if not self.shape:
            return [""]
        return [sep + sep.join(map(str, block)) for block in itertools.product(*region)]

    def encode(self, value: Any, region: Region | None = None) -> list[Any]:
        """The chunks of ``value`` (one sample's values of ``region``, default the whole
        sample, shaped as its :meth:`extent`) as stored, each a buffer, in :meth:`keys`
        order (a whole uncompressed C-contiguous chunk is a view of ``value``, not a copy)."""
        if self.dtype is None:
            return [bytes(_STRINGS.encode(np.array([value], dtype=object)))]
        size = tuple(s.stop - s.start for s in self.extent(region))
        value = np.asarray(value, dtype=self.dtype).reshape(size)
        out = []
        for part in self.block_slices(region):
            block = np.asarray(value[part], order="C")
            if block.shape != self.chunks:  # an edge chunk: zarr stores whole chunks
                padded = np.full(self.chunks, self.fill, dtype=self.dtype)
                padded[tuple(slice(0, n) for n in block.shape)] = block
                block = padded
            out.append(
                block.reshape(-1).view(np.uint8)
                if self.compressor is None
                else self.compressor.encode(block)
            )
        return out

    def decode(
        self, chunks: Sequence[Any], out: np.ndarray | None = None, region: Region | None = None
    ) -> Any:
        """One sample's values of ``region`` (default all) from its chunks' bytes (any buffer,
        in :meth:`keys` order; None for a chunk never written, which reads as ``fill``), into
        ``out`` (a writable array of the region's :meth:`extent`) when given. Without ``out``
        a single uncompressed chunk decodes to a view of its bytes, without a copy. Raises
        ValueError for bytes that are not such a chunk."""
        if self.dtype is None:
            (value,) = _STRINGS.decode(chunks[0])
            return str(value)
        if len(chunks) == 1 and self.chunks == self.shape and chunks[0] is not None:
            return self._decode_chunk(chunks[0], out)
        size = tuple(s.stop - s.start for s in self.extent(region))
        out = np.empty(size, dtype=self.dtype) if out is None else out
        for part, data in zip(self.block_slices(region), chunks, strict=True):
            target = out[part]
            if data is None:
                target[...] = self.fill
            elif target.shape == self.chunks and target.flags.c_contiguous:
                self._decode_chunk(data, target)
            else:
                chunk = self._decode_chunk(data, None)
                target[...] = chunk[tuple(slice(0, n) for n in target.shape)]
        return out

    def _decode_chunk(self, data: Any, out: np.ndarray | None) -> np.ndarray:
        size = int(np.prod(self.chunks)) * self.dtype.itemsize
        if self.compressor is None:
            raw = np.frombuffer(data, dtype=np.uint8)
            if raw.size != size:
                raise ValueError(f"chunk holds {raw.size} bytes, expected {size}")
            decoded = raw.view(self.dtype).reshape(self.chunks)
            if out is None:
                return decoded
            out[...] = decoded
            return out
        target = np.empty(self.chunks, dtype=self.dtype) if out is None else out
        self.compressor.decode(data, out=target)
        return target

    def reads_into(self, store: Any) -> bool:
        """Whether :func:`read_into` can read a sample straight into an array: one uncompressed
        chunk per sample, in a local store."""
        return self.compressor is None and self.chunks == self.shape and is_local(store)


def is_local(store: Any) -> bool:
    """Whether ``store`` (a zarr store) is a local folder: its chunks are files this module
    reads and writes itself, in the calling thread; reading them computes rather than waits."""
    return isinstance(store, LocalStore)


def read_threads(reads: int, *, local: bool = True) -> int:
    """Threads for ``reads`` chunk reads at once. Reads from local files compute (checksums,
    decoding, normalisation): no more threads than cores, so that the read waited for is not
    slowed down by those behind it. Reads that wait on a network: one per read, up to 16."""
    return max(1, min(reads, (os.cpu_count() or 1) if local else 16))


def read_into(store: Any, key: str, out: np.ndarray) -> bool:
    """Read chunk ``key`` of a local store straight into the bytes of ``out`` (C-contiguous),
    with no buffer in between; False when the chunk is absent. Raises ValueError when the
    chunk's size is not ``out``'s."""
    fd = _open_chunk(store, key)
    if fd is None:
        return False
    try:
        size = os.fstat(fd).st_size
        if size != out.nbytes:
            raise ValueError(f"chunk holds {size} bytes, expected {out.nbytes}")
        _read_exactly(fd, memoryview(out.reshape(-1).view(np.uint8)))
    finally:
        os.close(fd)
    return True


def _read_file(store: Any, key: str) -> bytearray | None:
    """The bytes of chunk ``key`` of a local store, None when it is absent."""
    fd = _open_chunk(store, key)
    if fd is None:
        return None
    try:
        data = bytearray(os.fstat(fd).st_size)
        _read_exactly(fd, memoryview(data))
    finally:
        os.close(fd)
    return data


def _open_chunk(store: Any, key: str) -> int | None:
    try:
        return os.open(f"{store.root}/{key}", os.O_RDONLY)  # not inherited (PEP 446)
    except FileNotFoundError:
        return None


def _read_exactly(fd: int, view: memoryview) -> None:
    got = 0
    while got < len(view):
        n = os.readv(fd, [view[got:]])
        if not n:
            raise ValueError(f"chunk ended after {got} of {len(view)} bytes")
        got += n


def write_file(path: os.PathLike, data: Any, *, atomic: bool = True) -> None:
    """Write ``data`` (any buffer) to the file ``path``, creating missing folders.

    Atomically (as zarr's ``LocalStore`` does) into ``<path>.<random>.partial``, then renamed
    over ``path``: a reader sees the old chunk or the new one, never part of one. Without
    ``atomic`` straight into ``path``, for chunks that no reader trusts until a later atomic
    write commits them (a sample's records before its status).
    """
    path = Path(path)
    target = path.with_suffix(f".{uuid.uuid4().hex}.partial") if atomic else path
    flags = os.O_WRONLY | os.O_CREAT | (os.O_EXCL if atomic else os.O_TRUNC)
    try:
        fd = os.open(target, flags, 0o644)
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(target, flags, 0o644)
    try:
        with open(fd, "wb", buffering=0, closefd=True) as file:
            view = memoryview(data).cast("B")
            while view:
                view = view[file.write(view) :]
        if atomic:
            os.replace(target, path)
    except BaseException:
        if atomic:
            target.unlink(missing_ok=True)
        raise


def get(store: Any, keys: Sequence[str]) -> list[Any]:
    """The bytes (a buffer) stored under each key, None where absent; from any thread but
    zarr's event loop. A local store's files are read in the calling thread, other stores'
    keys all at once on zarr's event loop."""
    if is_local(store):
        return [_read_file(store, key) for key in keys]
    found = sync(gather(*(store.get(k, prototype=default_buffer_prototype()) for k in keys)))
    return [None if b is None else b.as_numpy_array() for b in found]


def put(store: Any, items: dict[str, Any], *, atomic: bool = True) -> None:
    """Store each ``key: buffer``; from any thread but zarr's event loop. A local store's
    files are written in the calling thread (:func:`write_file`, with ``atomic``), other
    stores' keys all at once on zarr's event loop (an object store writes each atomically)."""
    if is_local(store):
        for key, value in items.items():
            write_file(store.root / key, value, atomic=atomic)
    else:
        sync(gather(*(store.set(k, Buffer.from_bytes(memoryview(v))) for k, v in items.items())))


def exists(store: Any, keys: Sequence[str]) -> list[bool]:
    """Whether each key is stored (a local store's files looked up in the calling thread)."""
    if is_local(store):
        return [os.path.exists(f"{store.root}/{key}") for key in keys]
    return sync(gather(*(store.exists(k) for k in keys)))


def delete(store: Any, keys: Sequence[str]) -> None:
    """Remove each key that is stored; absent keys are no error."""
    if is_local(store):
        for key in keys:
            Path(f"{store.root}/{key}").unlink(missing_ok=True)
    else:
        sync(gather(*(store.delete(k) for k in keys)))


async def gather(*aws: Any) -> list[Any]:
    """``asyncio.gather`` that lets every awaitable finish before raising the first error, so
    that nothing of a failed batch is still in flight when the caller hears of it."""
    results = await asyncio.gather(*aws, return_exceptions=True)
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return results
