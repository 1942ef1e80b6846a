"""Codecs of the ``fields`` array on real solver output: compression ratio, encode and decode speed.

Run: ``python benchmarks/compression.py``. Each codec encodes and decodes every sample as one
chunk (as the format stores them), through the same numcodecs objects the store's writer and
loaders use (:mod:`pdeladder.dataset.chunks`), decoding into a reused array as the loader does.
Blosc runs single-threaded, as it does in the loader's threads and in a writer beside other
solver processes. Speeds are printed as multiples of the speed of copying the same raw bytes
into the same array (the ``none`` codec's decode), measured in the same run: 0.5x encodes or
decodes at half the speed of a copy. Best of ``REPEATS``; compression ratios do not vary
between runs.

Two sizes of heat-equation trajectories (2D, T = 21): 129² (the curricula's middle stages) and
256² (their finest 2D stage), 8 samples each.
"""

import tempfile
import time
from pathlib import Path

import numcodecs.blosc
import numpy as np
from _data import heat_samples  # benchmarks/_data.py (the script folder is on sys.path)
from rich.console import Console
from rich.table import Table

from pdeladder.dataset.chunks import SampleChunks
from pdeladder.dataset.format import COMPRESSIONS, DEFAULT_COMPRESSION, ArraySpec

N, DIM, SNAPSHOTS = 8, 2, 21
RESOLUTIONS = (129, 256)
REPEATS = 5


def measure(name: str, data: list[np.ndarray]) -> dict:
    """Compression ratio and best-of-``REPEATS`` encode and decode times (s) of one codec."""
    shape = data[0].shape
    spec = ArraySpec("fields", (len(data), *shape), (), "float32", (1, *shape), compression=name)
    codec = SampleChunks.of("bench", spec)
    encoded = [codec.encode(d) for d in data]
    out = np.empty(shape, dtype=np.float32)
    encode = decode = float("inf")
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        for d in data:
            codec.encode(d)
        encode = min(encode, time.perf_counter() - t0)
        t0 = time.perf_counter()
        for chunks in encoded:
            codec.decode(chunks, out)
        decode = min(decode, time.perf_counter() - t0)
    raw = sum(d.nbytes for d in data)
    stored = sum(memoryview(c).nbytes for chunks in encoded for c in chunks)
    return {"ratio": raw / stored, "encode": encode, "decode": decode}


def main() -> None:
    numcodecs.blosc.use_threads = False  # one core, as in the loader's and writers' threads
    console = Console(width=120)
    cache = Path(tempfile.gettempdir()) / "pdeladder-bench-cache"
    table = Table(
        title=f"fields codecs on heat {DIM}D, T={SNAPSHOTS}, {N} samples, one sample per chunk, "
        "one core"
    )
    for col in (
        "codec",
        *(f"{r}²: {m}" for r in RESOLUTIONS for m in ("ratio", "encode", "decode")),
    ):
        table.add_column(col, justify="left" if col == "codec" else "right")
    rows: dict[str, list[str]] = {name: [] for name in COMPRESSIONS}
    for resolution in RESOLUTIONS:
        data = [s.fields for s in heat_samples(N, DIM, resolution, SNAPSHOTS, cache)]
        results = {name: measure(name, data) for name in COMPRESSIONS}
        copy = results["none"]["decode"]  # the reference: copying the raw bytes
        for name, r in results.items():
            encode = "(a view)" if name == "none" else f"{copy / r['encode']:.3f}x"
            rows[name] += [f"{r['ratio']:.2f}", encode, f"{copy / r['decode']:.3f}x"]
    for name, cells in rows.items():
        table.add_row(name + (" (default)" if name == DEFAULT_COMPRESSION else ""), *cells)
    console.print(table)


if __name__ == "__main__":
    main()
