"""The store against common baselines, on the same real solver output, as ratios.

1. Read: :class:`StoreDataset` batches (decode, checksum, normalise, collate) vs h5py reading
   the same trajectories from an HDF5 file laid out as PDEBench / The Well do (one dataset
   ``t0_fields/u`` of shape ``(N, T, X, Y)``, contiguous, uncompressed, read one trajectory at
   a time). Target >= 1.5x. Measured for the default codec and for an uncompressed store.
2. Write: ``Group.write`` (fields, params, seed, stats, provenance, checksum, moments, then
   status) vs ``numpy.save`` of the same bytes, one file per sample, uncompressed. Target
   >= 0.8x, like with like: the uncompressed store; the default codec is shown beside it.
3. Wait: a consumer that spends a fixed compute time per batch; the fraction of its time spent
   waiting for the next batch, over all batches and after the first (the pipeline's start-up
   latency is paid once per epoch). Target <= 5%.

Run: ``python benchmarks/loader.py``. The machine's load average is printed with the table:
absolute speeds on a shared machine vary by 2x between runs; ratios taken in one run do less.
"""

import os
import tempfile
import time
from pathlib import Path

import h5py
import numpy as np
from _data import heat_samples  # benchmarks/_data.py (the script folder is on sys.path)
from rich.console import Console
from rich.table import Table

from pdeladder.dataset.format import DEFAULT_COMPRESSION
from pdeladder.dataset.loader import StoreDataset
from pdeladder.dataset.store import open_store
from pdeladder.solvers import get_family

N, DIM, RESOLUTION, SNAPSHOTS, BATCH = 16, 2, 129, 21, 4
WAIT_COPIES = 4  # the wait measurement streams N * WAIT_COPIES samples (16 batches)
COMPUTE_S = 0.05  # the dummy training step per batch


def best_of(fn, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def consumer_wait(dataset: StoreDataset) -> tuple[float, float]:
    """Fraction of a consumer's time spent waiting for batches: over all, and after the first."""
    waits, total = [], 0.0
    start = time.perf_counter()
    it = iter(dataset)
    while True:
        t0 = time.perf_counter()
        batch = next(it, None)
        waits.append(time.perf_counter() - t0)
        if batch is None:
            break
        t1 = time.perf_counter()
        while time.perf_counter() - t1 < COMPUTE_S:  # a busy dummy step on the batch
            batch["fields"].mul(1.0001).sum()
    total = time.perf_counter() - start
    return sum(waits) / total, sum(waits[1:]) / (total - waits[0])


def main() -> None:
    console = Console()
    cache = Path(tempfile.gettempdir()) / "pdeladder-bench-cache"
    samples = heat_samples(N, DIM, RESOLUTION, SNAPSHOTS, cache)
    fam, grid = get_family("heat"), samples[0].grid
    data = np.stack([s.fields for s in samples])  # (N, T, 1, X, Y, 1)
    mb = data.nbytes / 1e6
    codecs = ("none", DEFAULT_COMPRESSION)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)

        def write_store(codec: str, copies: int = 1) -> str:
            url = str(tmp / f"store-{codec}-{time.perf_counter_ns()}")
            group = open_store(url, mode="a").require_group(
                "bench", fam, grid, n_samples=N * copies, compression=codec
            )
            for k in range(N * copies):
                group.write(k, samples[k % N])
            return url

        def write_npy() -> None:
            folder = tmp / f"npy-{time.perf_counter_ns()}"
            folder.mkdir()
            for k, s in enumerate(samples):
                np.save(folder / f"{k}.npy", s.fields)

        t_npy = best_of(write_npy)
        t_write = {c: best_of(lambda c=c: write_store(c)) for c in codecs}

        h5 = tmp / "well.h5"
        with h5py.File(h5, "w") as f:
            f.create_dataset("t0_fields/u", data=data[:, :, 0, :, :, 0])

        def read_h5() -> None:
            with h5py.File(h5, "r") as f:
                u = f["t0_fields/u"]
                for i in range(N):
                    assert u[i].shape == (SNAPSHOTS, RESOLUTION, RESOLUTION)

        t_h5 = best_of(read_h5)
        t_read, wait = {}, {}
        for codec in codecs:
            dataset = StoreDataset(write_store(codec), batch_size=BATCH, seed=0)
            t_read[codec] = best_of(
                lambda d=dataset: sum(b["fields"].shape[0] for b in d) == N or 1 / 0
            )
            wait[codec] = consumer_wait(
                StoreDataset(write_store(codec, WAIT_COPIES), batch_size=BATCH, seed=0)
            )

    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    table = Table(
        title=f"heat {DIM}D {RESOLUTION}² T={SNAPSHOTS}, {N} samples, {mb:.0f} MB; "
        f"{os.cpu_count()} cores, load average {load}"
    )
    for col in ("measure", "pdeladder", "baseline", "ratio", "target"):
        table.add_column(col, justify="left" if col == "measure" else "right")
    for codec in codecs:
        table.add_row(
            f"read MB/s: loader ({codec}) vs h5py (Well layout, uncompressed)",
            f"{mb / t_read[codec]:.0f}",
            f"{mb / t_h5:.0f}",
            f"{t_h5 / t_read[codec]:.2f}x",
            ">= 1.5x",
        )
    for codec in codecs:
        table.add_row(
            f"write MB/s: store ({codec}) vs numpy.save (uncompressed)",
            f"{mb / t_write[codec]:.0f}",
            f"{mb / t_npy:.0f}",
            f"{t_npy / t_write[codec]:.2f}x",
            ">= 0.8x" if codec == "none" else "",
        )
    for codec in codecs:
        overall, steady = wait[codec]
        table.add_row(
            f"consumer waiting, {COMPUTE_S * 1e3:.0f} ms step ({codec}): all / after 1st batch",
            f"{100 * overall:.1f}% / {100 * steady:.1f}%",
            "",
            "",
            "<= 5%",
        )
    console.print(table)


if __name__ == "__main__":
    main()
