"""The store against common baselines, on the same real solver output, as ratios.

Two sizes of heat-equation trajectories (2D, T = 21, one channel): 64² (0.34 MB a sample, the
curricula's coarse stages) and 256² (5.5 MB, their finest 2D stage), 16 samples each. Every
measurement alternates its sides, ``REPEATS`` times, and keeps each side's best time; each
write goes into a new folder, removed after its timing.

1. Read, producing the same thing on both sides: batches of ``BATCH`` samples in the same
   shuffled order as a float32 torch tensor ``(B, C, T, X, Y, Z)``, physical (what the loader
   hands the trainer), and normalised with the same per-channel mean and std.

   - pdeladder: iterating :class:`StoreDataset` (its prefetch threads read each sample's
     chunk through the store straight into the batch array and check its CRC-32C; masks and
     parameters are collated beside it); normalised: ``StoreDataset(normalise=True)``, whose
     threads also normalise each sample (the layout's :meth:`Normaliser.normalise`) right
     after reading it, and each batch's ``DataProcessor.normalised``, as training on the CPU
     does (on a GPU the processor normalises on the device); beside it the same normalisation
     in the consumer's thread (``StoreDataset`` then ``DataProcessor.normalised``); default
     codec and uncompressed.
   - h5py, as The Well's and PDEBench's loaders do it: the HDF5 file holds one dataset
     ``t0_fields/u`` of shape ``(N, T, X, Y)``, contiguous and uncompressed (as The Well's
     files are); per sample ``torch.as_tensor(u[i])`` (one h5py read), normalised:
     ``(x - mean) / std`` (The Well's z-score normalisation), then ``torch.stack`` of the
     batch (the DataLoader's default collate). No checksum is verified. Single-threaded, as
     with ``num_workers=0``.

   torch runs with one intra-op thread on both sides (the baseline's normalisation, the
   consumer's dummy step): on a shared 2-core machine its thread pool made the baseline's
   elementwise ops vary fivefold between runs.

   Target >= 1.0x for both.
2. Write: ``WritableGroup.write`` of every sample (fields, provenance and the record: seed,
   parameters, statistics, CRC-32C and moments; then status, written to a temporary name and
   renamed over its key: four chunks) into a created group vs the crash-safe reference: the same fields, one ``.npy`` file
   per sample, written to a temporary name, fsynced, renamed. Target >= 0.8x, like with like:
   the uncompressed store (the default codec is shown beside it). Beside it, the reference
   without the fsync (the store's own durability: a killed process loses no committed sample,
   a power cut may; ``store verify`` finds such a sample by its checksum). Group creation is
   not timed on either side.
3. Floors, uncompressed, alternating with the baselines: the parts the format requires, each
   alone. Write: creating the files a write leaves (one chunk per sample in each named array)
   empty, in a fresh group, and digesting the fields (CRC-32C and moments), each vs the
   crash-safe reference: a write does both, so its ratio is at most the smaller of the two (with
   the two perfectly overlapped), and at most the ratio of their sum done one after the other
   on a machine whose cores share their memory bandwidth. Read, in one thread: reading each
   sample's chunk file into one reused array, nothing else (what one file per chunk costs),
   and that plus checking its CRC-32C and normalising it in place (what every sample needs),
   vs h5py.
4. Wait: a consumer that spends ``COMPUTE_S`` of busy compute per batch, on physical batches
   (as GPU training reads them) and on normalising ones (``normalise=True``, as CPU training
   reads them: the threads do the consumer's normalisation too, so the consumer's own step
   would be shorter); the fraction of its time spent waiting for the next batch, over all
   batches and after the first (the pipeline's start-up latency is paid once per epoch).
   Target <= 5%.
5. The machine's pace and other readers of the same chunks: ``cat`` of the group's chunk files
   in the loader's order (one process: the machine's own sequential read of the same bytes,
   from the page cache as every timed read here; the time of an empty ``cat``, its start-up,
   subtracted), against the loader's physical read: the loader's throughput as a fraction of
   it. And sample by sample, one sample at a time in the loader's order: zarr-python
   (``array[i]``) against tensorstore (its ``zarr3`` driver, the reads of a batch issued at
   once, its own thread pools), and the loader against the faster of the two.
6. Records: what a loader's catalog reads of every sample (status, checksums, parameters) of
   the wait measurement's group (64 samples), through the group's API vs zarr's reads of the
   arrays that hold them (``RECORDS``).

Run: ``python benchmarks/loader.py`` (short: ``--resolutions 64 --repeats 3``). The machine's
load average is printed with the table: absolute speeds on a shared machine vary by 2x between
runs; ratios taken in one run, with the two sides alternating, vary much less.
"""

import argparse
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np
import tensorstore as ts
import torch
from _data import heat_samples  # benchmarks/_data.py (the script folder is on sys.path)
from rich.console import Console
from rich.table import Table

from pdeladder.dataset import format as fmt
from pdeladder.dataset.format import DEFAULT_COMPRESSION
from pdeladder.dataset.group import Group
from pdeladder.dataset.loader import StoreDataset
from pdeladder.dataset.moments import sample_moments
from pdeladder.dataset.provenance import checksum
from pdeladder.dataset.store import open_store
from pdeladder.solvers import Sample, get_family
from pdeladder.trainer.processor import DataProcessor

N, DIM, SNAPSHOTS, BATCH = 16, 2, 21, 4
RESOLUTIONS = (64, 256)
REPEATS = 7
WAIT_COPIES = 4  # the wait measurement streams N * WAIT_COPIES samples (16 batches)
COMPUTE_S = 0.05  # the dummy training step per batch
CODECS = ("none", DEFAULT_COMPRESSION)
#: The arrays holding what a loader's catalog reads of every sample (status, checksum,
#: parameters): the checksum and parameters are in the record.
RECORDS = ("status", "record")
REFERENCE = "crash-safe files"  # one .npy per sample: temporary name, fsync, rename
NO_SYNC = "files, no fsync"  # the same without the fsync


def best_times(*sides: Callable[[], float]) -> list[float]:
    """Best of ``REPEATS`` times of each side, the sides run alternately, each after the page
    cache's dirty pages are written back (so that none pays for another's writes). A side
    returns the seconds its timed part took (set-up and clean-up are not timed)."""
    best = [float("inf")] * len(sides)
    for _ in range(REPEATS):
        for k, side in enumerate(sides):
            os.sync()
            best[k] = min(best[k], side())
    return best


def timed(fn: Callable[[], object]) -> Callable[[], float]:
    """A side of :func:`best_times` that times all of ``fn``."""

    def side() -> float:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    return side


def consumer_wait(dataset: StoreDataset) -> tuple[float, float]:
    """Fraction of a consumer's time spent waiting for batches: over all, and after the first."""
    waits = []
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


def h5py_batches(path: Path, order: list[int], stats: tuple[float, float] | None) -> int:
    """The Well / PDEBench way to the same batches, normalised with ``stats`` (mean, std)
    unless None; returns the samples delivered."""
    seen = 0
    with h5py.File(path, "r") as f:
        u = f["t0_fields/u"]  # (N, T, X, Y) float32
        for first in range(0, len(order), BATCH):
            items = [torch.as_tensor(u[i]) for i in order[first : first + BATCH]]
            if stats is not None:
                items = [(x - stats[0]) / stats[1] for x in items]
            batch = torch.stack(items)[:, None, :, :, :, None]  # (B, 1, T, X, Y, 1)
            seen += batch.shape[0]
    return seen


def new_group(url: Path, samples: list[Sample], codec: str, n: int) -> Group:
    """A created, empty group at ``url`` for ``n`` samples like ``samples[0]``."""
    return open_store(str(url), mode="a").require_group(
        "bench", get_family("heat"), samples[0].grid, n_samples=n, compression=codec
    )


def fresh(tmp: Path, codec: str) -> Path:
    """A new store path in ``tmp``."""
    return tmp / f"store-{codec}-{time.perf_counter_ns()}"


def write_times(samples: list[Sample], tmp: Path, codec: str) -> dict[str, float]:
    """Best times of writing ``samples`` into a fresh group (``store``) and as the crash-safe
    reference (with and without its fsync), each into a new folder removed after its timing;
    for the uncompressed store also the floors: creating the files a write leaves, empty, in a fresh group
    (``files``), and digesting the fields (``digest``)."""
    out = tmp / "out"
    if codec == "none":  # the files one write leaves, for the files floor
        url = fresh(tmp, codec)
        group = new_group(url, samples, codec, N)
        before = set(url.rglob("*"))
        group.write(0, samples[0])
        written = set(url.rglob("*")) - before
        arrays = sorted({p.parent.name for p in written})
        shutil.rmtree(url)

    def store() -> float:
        group = new_group(out, samples, codec, N)
        return timed(lambda: [group.write(k, s) for k, s in enumerate(samples)])()

    def files_per_sample(sync: bool) -> Callable[[], float]:
        def write(k: int, fields: np.ndarray) -> None:
            partial = out / f"{k}.npy.partial"
            with open(partial, "wb") as f:
                np.save(f, fields)
                if sync:
                    f.flush()
                    os.fsync(f.fileno())
            os.replace(partial, out / f"{k}.npy")

        def run() -> float:
            out.mkdir()
            return timed(lambda: [write(k, s.fields) for k, s in enumerate(samples)])()

        return run

    def files() -> float:
        group = new_group(out, samples, codec, N)
        paths = [
            out / key for k in range(N) for name in arrays for key in group.chunks[name].keys(k)
        ]
        create = os.O_WRONLY | os.O_CREAT | os.O_EXCL
        return timed(lambda: [os.close(os.open(path, create, 0o644)) for path in paths])()

    def digest() -> float:
        return timed(lambda: [(checksum(s.fields), sample_moments(s.fields)) for s in samples])()

    sides = {"store": store, REFERENCE: files_per_sample(True), NO_SYNC: files_per_sample(False)}
    if codec == "none":
        sides |= {f"files ({len(written)} a sample)": files, "digest": digest}

    def cleaned(side: Callable[[], float]) -> Callable[[], float]:
        def run() -> float:
            try:
                return side()
            finally:
                if out.exists():  # what the side wrote
                    shutil.rmtree(out)

        return run

    return dict(zip(sides, best_times(*map(cleaned, sides.values())), strict=True))


def read_times(samples: list[Sample], tmp: Path, codec: str, h5: Path) -> dict[str, float]:
    """Best times of streaming every sample as batches: the loader and h5py; for the
    uncompressed store also two floors, in the loader's order, in one thread, into one reused
    array: reading each sample's chunk file and nothing else (``chunk files``), and that plus
    the checks and normalisation every sample needs (``+ checksum, normalisation``)."""
    url = fresh(tmp, codec)
    group = new_group(url, samples, codec, N)
    for k, s in enumerate(samples):
        group.write(k, s)
    dataset = StoreDataset(str(url), batch_size=BATCH, seed=0)
    normalising = StoreDataset(str(url), batch_size=BATCH, seed=0, normalise=True)
    order = [int(i) for _, indices in dataset.plan(0) for i in indices]
    sums = dataset.catalog.groups[group.path].checksums
    layout = dataset.catalog.layout
    processor = DataProcessor(layout)
    mean, std = layout.normalisation["heat"]["mean"][0], layout.normalisation["heat"]["std"][0]
    paths = [os.path.join(url, key) for i in order for key in group.chunks["fields"].keys(i)]
    fields = group.array("fields")
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(url / fields.path)}}
    tensorstore = ts.open(spec, read=True).result()
    sample = np.empty_like(samples[0].fields)
    buffer = memoryview(sample).cast("B")

    def loader() -> None:
        assert sum(b["fields"].shape[0] for b in dataset) == N

    def normalised() -> None:
        assert sum(processor.normalised(b).shape[0] for b in normalising) == N

    def consumer_normalised() -> None:
        assert sum(processor.normalised(b).shape[0] for b in dataset) == N

    def baseline(stats: tuple[float, float] | None) -> Callable[[], None]:
        def run() -> None:
            assert h5py_batches(h5, order, stats) == N

        return run

    def chunk_files(*, check_and_normalise: bool) -> Callable[[], None]:
        def run() -> None:
            for path, i in zip(paths, order, strict=True):
                with open(path, "rb", buffering=0) as f:
                    f.readinto(buffer)
                if check_and_normalise:
                    assert checksum(sample) == sums[i]
                    np.subtract(sample, mean, out=sample)
                    np.divide(sample, std, out=sample)

        return run

    def zarr_python() -> None:
        assert all(fields[i].shape == samples[0].fields.shape for i in order)

    def tensorstore_reads() -> None:
        for first in range(0, N, BATCH):
            pending = [tensorstore[i].read() for i in order[first : first + BATCH]]
            assert all(r.result().shape == samples[0].fields.shape for r in pending)

    def cat(args: list[str]) -> Callable[[], float]:
        def run() -> float:
            t0 = time.perf_counter()
            subprocess.run(args, stdout=subprocess.DEVNULL, check=True)
            return time.perf_counter() - t0

        return run

    sides = {
        "loader": loader,
        "h5py": baseline(None),
        "zarr-python": zarr_python,
        "tensorstore": tensorstore_reads,
        "loader normalised": normalised,
        "h5py normalised": baseline((mean, std)),
        "consumer normalised": consumer_normalised,
    }
    if codec == "none":
        sides |= {
            "chunk files": chunk_files(check_and_normalise=False),
            "+ checksum, normalisation": chunk_files(check_and_normalise=True),
        }
    times = dict(zip(sides, best_times(*map(timed, sides.values())), strict=True))
    if codec == "none":
        started, read = best_times(cat(["cat", "/dev/null"]), cat(["cat", *paths]))
        times["cat"] = read - started
    return times


def measure(samples: list[Sample], tmp: Path) -> dict:
    """Read and write times and consumer waits for one size, both codecs."""
    h5 = tmp / f"well-{samples[0].grid.resolution}.h5"
    with h5py.File(h5, "w") as f:
        f.create_dataset("t0_fields/u", data=np.stack([s.fields[:, 0, :, :, 0] for s in samples]))
    out: dict = {"read": {}, "write": {}, "wait": {}}
    for codec in CODECS:
        out["write"][codec] = write_times(samples, tmp, codec)
        out["read"][codec] = read_times(samples, tmp, codec, h5)
        url = fresh(tmp, codec)
        group = new_group(url, samples, codec, N * WAIT_COPIES)
        for k in range(N * WAIT_COPIES):
            group.write(k, samples[k % N])
        out["wait"][codec] = {
            mode: consumer_wait(StoreDataset(str(url), batch_size=BATCH, seed=0, normalise=norm))
            for mode, norm in (("physical", False), ("normalising", True))
        }
    reread = open_store(str(url)).group(group.path)
    out["records"] = best_times(
        timed(lambda: [reread.checksums(reread.status()), reread.params()]),
        timed(lambda: [reread.array(name)[:] for name in RECORDS]),
    )
    return out


def rows(r: dict) -> list[tuple[str, float, float, str]]:
    """``(measure, pdeladder's seconds, the baseline's seconds, target)``: one size's rows."""
    out = []
    for codec in CODECS:
        read = r["read"][codec]
        label = f"read: loader ({codec}) vs h5py on The Well's files (physical batches)"
        out.append((label, read["loader"], read["h5py"], ">= 1.0x"))
        label = f"read: loader ({codec}) normalising vs h5py (normalised batches)"
        out.append((label, read["loader normalised"], read["h5py normalised"], ">= 1.0x"))
        label = f"read: loader ({codec}), DataProcessor in the consumer vs h5py (normalised)"
        out.append((label, read["consumer normalised"], read["h5py normalised"], ""))
        label = f"read: tensorstore ({codec}) vs zarr-python, sample by sample"
        out.append((label, read["tensorstore"], read["zarr-python"], ""))
        other = min(("tensorstore", "zarr-python"), key=read.get)
        label = f"read: loader ({codec}) vs {other} (the faster of the two)"
        out.append((label, read["loader"], read[other], ""))
    read = r["read"]["none"]
    label = "read: loader (none) vs cat of its chunk files (the machine's sequential read)"
    out.append((label, read["loader"], read["cat"], ""))
    for part, base in (("chunk files", "h5py"), ("+ checksum, normalisation", "h5py normalised")):
        out.append((f"read floor: {part}, one thread vs {base}", read[part], read[base], ""))
    for codec in CODECS:
        write = r["write"][codec]
        target = ">= 0.8x" if codec == "none" else ""
        out.append(
            (f"write: store ({codec}) vs {REFERENCE}", write["store"], write[REFERENCE], target)
        )
        out.append((f"write: store ({codec}) vs {NO_SYNC}", write["store"], write[NO_SYNC], ""))
    write = r["write"]["none"]
    for part in write:
        if part not in ("store", REFERENCE, NO_SYNC):
            out.append(
                (f"write floor: {part} alone vs {REFERENCE}", write[part], write[REFERENCE], "")
            )
    label = f"records: status, checksum, params of {N * WAIT_COPIES} samples vs zarr's arrays"
    out.append((label, *r["records"], ""))
    return out


def main() -> None:
    global REPEATS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resolutions", type=int, nargs="+", default=list(RESOLUTIONS))
    parser.add_argument("--repeats", type=int, default=REPEATS, help="timings per side")
    args = parser.parse_args()
    REPEATS = args.repeats
    torch.set_num_threads(1)
    console = Console(width=150)
    cache = Path(tempfile.gettempdir()) / "pdeladder-bench-cache"
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for resolution in args.resolutions:
            samples = heat_samples(N, DIM, resolution, SNAPSHOTS, cache)
            results[resolution] = (samples[0].fields.nbytes * N / 1e6, measure(samples, Path(tmp)))

    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    table = Table(
        title=f"format {fmt.FORMAT_VERSION}, heat {DIM}D, T={SNAPSHOTS}, {N} samples, "
        f"batches of {BATCH}; "
        f"{os.cpu_count()} cores, load average {load}"
    )
    for col in ("size", "measure", "pdeladder ms", "baseline ms", "ratio", "target"):
        table.add_column(col, justify="left" if col in ("size", "measure") else "right")
    for resolution, (mb, r) in results.items():
        size = f"{resolution}², {mb:.0f} MB"
        for label, t_pd, t_base, target in rows(r):
            table.add_row(
                size,
                label,
                f"{1e3 * t_pd:.1f}",
                f"{1e3 * t_base:.1f}",
                f"{t_base / t_pd:.2f}x",
                target,
            )
        for codec in CODECS:
            for mode, (overall, steady) in r["wait"][codec].items():
                table.add_row(
                    size,
                    f"consumer waiting, {COMPUTE_S * 1e3:.0f} ms step ({codec}, {mode}): "
                    "all / after 1st",
                    f"{100 * overall:.1f}% / {100 * steady:.1f}%",
                    "",
                    "",
                    "<= 5%",
                )
    console.print(table)


if __name__ == "__main__":
    main()
