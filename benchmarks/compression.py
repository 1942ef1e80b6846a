"""Codecs of the ``fields`` array on real solver output: compression ratio, write and read speed.

Run: ``python benchmarks/compression.py``. Writes each codec's store under a temporary folder,
one sample per chunk as the format prescribes, and prints one row per codec.
"""

import tempfile
import time
from pathlib import Path

import numpy as np
import zarr
from _data import heat_samples  # benchmarks/_data.py (the script folder is on sys.path)
from rich.console import Console
from rich.table import Table

from pdeladder.dataset.format import COMPRESSIONS, DEFAULT_COMPRESSION

N, DIM, RESOLUTION, SNAPSHOTS = 8, 2, 129, 21


def measure(name: str, data: np.ndarray, root: Path, repeats: int = 3) -> dict:
    """Ratio and best-of-``repeats`` write/read throughput (MB/s) of one codec."""
    writes, reads = [], []
    for r in range(repeats):
        arr = zarr.create_array(
            str(root / f"{name}-{r}"),
            shape=data.shape,
            dtype="float32",
            chunks=(1, *data.shape[1:]),
            compressors=COMPRESSIONS[name] or None,
        )
        t0 = time.perf_counter()
        for i in range(len(data)):
            arr[i] = data[i]
        writes.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        for i in range(len(data)):
            assert arr[i].shape == data.shape[1:]
        reads.append(time.perf_counter() - t0)
    stored = arr.nbytes_stored()
    mb = data.nbytes / 1e6
    return {
        "codec": name,
        "ratio": data.nbytes / stored,
        "write": mb / min(writes),
        "read": mb / min(reads),
    }


def main() -> None:
    console = Console()
    cache = Path(tempfile.gettempdir()) / "pdeladder-bench-cache"
    data = np.stack([s.fields for s in heat_samples(N, DIM, RESOLUTION, SNAPSHOTS, cache)])
    with tempfile.TemporaryDirectory() as tmp:
        rows = [measure(name, data, Path(tmp)) for name in COMPRESSIONS]
    table = Table(
        title=f"fields codecs, heat {DIM}D {RESOLUTION}² T={SNAPSHOTS}, {N} samples "
        f"({data.nbytes / 1e6:.0f} MB), one sample per chunk"
    )
    for col in ("codec", "ratio", "write MB/s", "read MB/s"):
        table.add_column(col, justify="left" if col == "codec" else "right")
    for r in rows:
        mark = " (default)" if r["codec"] == DEFAULT_COMPRESSION else ""
        table.add_row(
            r["codec"] + mark, f"{r['ratio']:.2f}", f"{r['write']:.0f}", f"{r['read']:.0f}"
        )
    console.print(table)


if __name__ == "__main__":
    main()
