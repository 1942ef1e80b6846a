"""The store against common baselines, on the same real solver output, as ratios.

1. Read: :class:`StoreDataset` batches (decode, checksum, normalise, collate) vs h5py reading
   the same trajectories from an HDF5 file laid out as PDEBench / The Well do (one dataset
   ``t0_fields/u`` of shape ``(N, T, X, Y)``, read one trajectory at a time). Target >= 1.5x.
2. Write: ``Group.write`` (fields, per-sample arrays, checksum, moments, status) vs
   ``numpy.save`` of the same bytes, one file per sample. Target >= 0.8x.
3. Wait: a consumer that spends a fixed compute time per batch; the fraction of its time spent
   waiting for the next batch. Target <= 5%.

Run: ``python benchmarks/loader.py``.
"""

import tempfile
import time
from pathlib import Path

import h5py
import numpy as np
from _data import heat_samples  # benchmarks/_data.py (the script folder is on sys.path)
from rich.console import Console
from rich.table import Table

from pdeladder.dataset.loader import StoreDataset
from pdeladder.dataset.store import open_store
from pdeladder.solvers import get_family

N, DIM, RESOLUTION, SNAPSHOTS, BATCH = 16, 2, 129, 21, 4
COMPUTE_S = 0.05  # the dummy training step per batch


def best_of(fn, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    console = Console()
    cache = Path(tempfile.gettempdir()) / "pdeladder-bench-cache"
    samples = heat_samples(N, DIM, RESOLUTION, SNAPSHOTS, cache)
    fam = get_family("heat")
    data = np.stack([s.fields for s in samples])  # (N, T, 1, X, Y, 1)
    mb = data.nbytes / 1e6
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)

        def write_store() -> None:
            url = str(tmp / f"store-{time.perf_counter_ns()}")
            group = open_store(url, mode="a").require_group(
                "bench", fam, samples[0].grid, n_samples=N
            )
            for k, s in enumerate(samples):
                group.write(k, s)

        def write_npy() -> None:
            folder = tmp / f"npy-{time.perf_counter_ns()}"
            folder.mkdir()
            for k, s in enumerate(samples):
                np.save(folder / f"{k}.npy", s.fields)

        t_store, t_npy = best_of(write_store), best_of(write_npy)

        url = str(tmp / "read-store")
        group = open_store(url, mode="a").require_group("bench", fam, samples[0].grid, n_samples=N)
        for k, s in enumerate(samples):
            group.write(k, s)
        h5 = tmp / "well.h5"
        with h5py.File(h5, "w") as f:
            f.create_dataset("t0_fields/u", data=data[:, :, 0, :, :, 0])

        dataset = StoreDataset(url, batch_size=BATCH, seed=0)

        def read_loader() -> None:
            assert sum(b["fields"].shape[0] for b in dataset) == N

        def read_h5() -> None:
            with h5py.File(h5, "r") as f:
                u = f["t0_fields/u"]
                for i in range(N):
                    assert u[i].shape == (SNAPSHOTS, RESOLUTION, RESOLUTION)

        t_loader, t_h5 = best_of(read_loader), best_of(read_h5)

        waited = total = 0.0
        start = time.perf_counter()
        it = iter(dataset)
        while True:
            t0 = time.perf_counter()
            batch = next(it, None)
            waited += time.perf_counter() - t0
            if batch is None:
                break
            t1 = time.perf_counter()
            while time.perf_counter() - t1 < COMPUTE_S:  # a busy dummy step on the batch
                batch["fields"].mul(1.0001).sum()
        total = time.perf_counter() - start

    table = Table(title=f"heat {DIM}D {RESOLUTION}² T={SNAPSHOTS}, {N} samples, {mb:.0f} MB")
    for col in ("measure", "pdeladder", "baseline", "ratio", "target"):
        table.add_column(col, justify="left" if col == "measure" else "right")
    table.add_row(
        "read MB/s (loader vs h5py, Well layout)",
        f"{mb / t_loader:.0f}",
        f"{mb / t_h5:.0f}",
        f"{t_h5 / t_loader:.2f}x",
        ">= 1.5x",
    )
    table.add_row(
        "write MB/s (store vs numpy.save)",
        f"{mb / t_store:.0f}",
        f"{mb / t_npy:.0f}",
        f"{t_npy / t_store:.2f}x",
        ">= 0.8x",
    )
    table.add_row(
        f"consumer waiting ({COMPUTE_S * 1e3:.0f} ms step)",
        f"{100 * waited / total:.1f}%",
        "",
        "",
        "<= 5%",
    )
    console.print(table)


if __name__ == "__main__":
    main()
