"""One sample's chunks, encoded and decoded here and moved through the zarr store directly.

Zarr's array API costs about a millisecond per call (indexing, codec pipeline, an event-loop
round trip and a thread hop per chunk) and a sample touches eight arrays, so the writer and the
loaders address a sample's chunks as store keys instead. The bytes are exactly what zarr writes
for these arrays (Zarr v3 ``bytes`` codec: little-endian, C order, then the array's compressor;
``vlen-utf8`` for strings; ``default`` chunk keys ``c/i/j/...``), so zarr, xarray and ``verify``
see ordinary arrays; ``verify`` checks that every array has the codecs this module assumes.

Stores with synchronous I/O (zarr's ``LocalStore``) are read and written in the calling thread,
one system call sequence per chunk; others (fsspec: ``memory://``, ``s3://``) through zarr's
event loop, all keys of a call at once.
"""

import asyncio
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numcodecs
import numpy as np
from zarr.buffer import default_buffer_prototype
from zarr.buffer.cpu import Buffer
from zarr.core.sync import sync
from zarr.storage import LocalStore

from pdeladder.dataset import format as fmt

_STRINGS = numcodecs.VLenUTF8()


def _compressor(name: str) -> Any:
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


@dataclass(frozen=True)
class SampleChunks:
    """How one sample of a per-sample array is stored: its chunks' keys and bytes.

    ``shape`` and ``chunks`` exclude the sample axis; only the first remaining axis (``t`` of
    ``fields``) may span several chunks, the last of which zarr stores padded with ``fill``.
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
            _compressor(spec.compression),
        )

    @property
    def blocks(self) -> int:
        """Chunks per sample (along the first axis after ``sample``)."""
        return -(-self.shape[0] // self.chunks[0]) if self.shape else 1

    def keys(self, index: int) -> list[str]:
        """The store keys of sample ``index``'s chunks, in order."""
        rest = "/0" * max(0, len(self.shape) - 1)
        if not self.shape:
            return [f"{self.prefix}/c/{index}"]
        return [f"{self.prefix}/c/{index}/{j}{rest}" for j in range(self.blocks)]

    def encode(self, value: Any) -> list[Any]:
        """The chunks of one sample's ``value`` (shape ``shape``) as stored, each a buffer (an
        uncompressed chunk is a view of ``value``, not a copy)."""
        if self.dtype is None:
            return [bytes(_STRINGS.encode(np.array([value], dtype=object)))]
        value = np.ascontiguousarray(value, dtype=self.dtype).reshape(self.shape)
        out = []
        for j in range(self.blocks):
            block = value[j * self.chunks[0] : (j + 1) * self.chunks[0]] if self.shape else value
            if block.shape != self.chunks:  # the last time block: zarr stores whole chunks
                padded = np.full(self.chunks, self.fill, dtype=self.dtype)
                padded[: block.shape[0]] = block
                block = padded
            out.append(
                block.reshape(-1).view(np.uint8)
                if self.compressor is None
                else self.compressor.encode(block)
            )
        return out

    def decode(self, chunks: Sequence[Any], out: np.ndarray | None = None) -> Any:
        """One sample's value from its chunks' bytes (any buffer), into ``out`` (a writable
        C-contiguous array of ``shape``) when given. Without ``out`` a single uncompressed chunk
        decodes to a read-only view of its bytes, without a copy. Raises ValueError for bytes
        that are not such a chunk."""
        if self.dtype is None:
            (value,) = _STRINGS.decode(chunks[0])
            return str(value)
        if len(chunks) == 1 and self.chunks == self.shape:
            return self._decode_chunk(chunks[0], out)
        out = np.empty(self.shape, dtype=self.dtype) if out is None else out
        step = self.chunks[0]
        for j, data in enumerate(chunks):
            part = out[j * step : (j + 1) * step]
            if part.shape == self.chunks:
                self._decode_chunk(data, part)
            else:
                part[...] = self._decode_chunk(data, None)[: part.shape[0]]
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
        return (
            self.compressor is None and self.chunks == self.shape and isinstance(store, LocalStore)
        )


def read_into(store: Any, key: str, out: np.ndarray) -> bool:
    """Read chunk ``key`` of a local store straight into the bytes of ``out`` (C-contiguous),
    with no buffer in between; False when the chunk is absent. Raises ValueError when the
    chunk's size is not ``out``'s."""
    try:
        file = open(store.root / key, "rb", buffering=0)
    except FileNotFoundError:
        return False
    with file:
        size = os.fstat(file.fileno()).st_size
        if size != out.nbytes:
            raise ValueError(f"chunk holds {size} bytes, expected {out.nbytes}")
        view, got = memoryview(out.reshape(-1).view(np.uint8)), 0
        while got < size:
            n = file.readinto(view[got:])
            if not n:
                raise ValueError(f"chunk ended after {got} of {size} bytes")
            got += n
    return True


def _sync_io(store: Any) -> bool:
    return hasattr(store, "get_sync") and hasattr(store, "set_sync")


def get(store: Any, keys: Sequence[str]) -> list[Any]:
    """The bytes (a read-only buffer) stored under each key, None where absent; from any
    thread but zarr's event loop."""
    if _sync_io(store):
        return _get_sync(store, keys)
    return sync(aget(store, keys))


async def aget(store: Any, keys: Sequence[str]) -> list[Any]:
    """:func:`get` on zarr's event loop."""
    if _sync_io(store):
        return await asyncio.to_thread(_get_sync, store, keys)
    found = await gather(*(store.get(k, prototype=default_buffer_prototype()) for k in keys))
    return [None if b is None else b.as_numpy_array() for b in found]


async def aput(store: Any, items: dict[str, Any]) -> None:
    """Store each ``key: buffer`` on zarr's event loop; every chunk is written atomically by
    the store (a local file is written under a temporary name, then renamed)."""
    buffers = {k: Buffer.from_bytes(memoryview(v)) for k, v in items.items()}
    if _sync_io(store):
        await asyncio.to_thread(_put_sync, store, buffers)
    else:
        await gather(*(store.set(k, b) for k, b in buffers.items()))


def _get_sync(store: Any, keys: Sequence[str]) -> list[Any]:
    found = [store.get_sync(k) for k in keys]
    return [None if b is None else b.as_numpy_array() for b in found]


def _put_sync(store: Any, buffers: dict[str, Buffer]) -> None:
    for k, b in buffers.items():
        store.set_sync(k, b)


async def gather(*aws: Any) -> list[Any]:
    """``asyncio.gather`` that lets every awaitable finish before raising the first error, so
    that nothing of a failed batch is still in flight when the caller hears of it."""
    results = await asyncio.gather(*aws, return_exceptions=True)
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return results
