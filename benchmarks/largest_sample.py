"""The largest sample that trains under a fixed per-rank memory budget, at k = 1, 2, 4 domain ranks.

``python benchmarks/largest_sample.py [--base 96] [--ranks 1 2 4]``. The budget is the measured
peak tensor memory of the largest rank (as a GPU allocator counts it: see
``benchmarks/domain_parallel.py``, whose training step and model this uses) of one training
step on the 2D sample ``(T, X, Y) = (11, base, base)`` at k = 1; at ``base`` 96 or more the
activations, not the parameters, make most of it. For each k a bisection over the square size
``s`` finds the largest sample whose largest rank's measured peak fits the budget; every probe
is a real step on ``k`` gloo processes. The memory model's largest fitting size only places
the first bracket (from that size to 4 % above, where the model reads up to 2 % high; moved
until its ends fit and fail as measured), so a k costs about four probes. Target:
``points(k) ≥ 0.9 · k · points(1)``. Prints a table and writes ``largest_sample.json`` to ``--out`` (default ``runs/bench``).
"""

import argparse
import json
import tempfile
from pathlib import Path

from domain_parallel import T, config, run_ranks  # benchmarks/ (the script folder is on sys.path)

from pdeladder.slabs import DomainTiling
from pdeladder.trainer.distributed.memory import peak_bytes


def peak_mb(k: int, size: int, folder: str) -> float:
    """The largest rank's peak tensor MiB of one training step at ``k`` ranks."""
    return max(r["tensor_peak_mb"] for r in run_ranks(k, size, 1, folder))


def predicted(k: int, budget: float, base: int) -> int:
    """The largest square size from ``base`` up whose predicted peak (the memory model, MiB)
    fits ``budget``."""
    tiling = DomainTiling(x=k, padding=config().padding)

    def mib(size: int) -> float:
        return peak_bytes(config(), (T, size, size, 1), 2, 1, tiling, k, True) / 2**20

    size = base
    while mib(size + 1) <= budget:
        size += 1
    return size


def largest(k: int, budget: float, lo: int, hi: int, folder: str) -> tuple[int, list]:
    """The largest size whose measured peak fits ``budget``, bisected from the bracket
    ``[lo, hi)`` once its lower end fits and its upper end does not (moved until they do), and
    the probes ``(size, peak)`` taken."""
    peaks = {}

    def fits(size: int) -> bool:
        peaks[size] = peak_mb(k, size, folder)
        return peaks[size] <= budget

    while not fits(lo):  # the lower end must fit: move the bracket down (hi: known to fail)
        if lo <= 2 * k:
            raise SystemExit(f"no sample of at least 2 x points per rank fits at k={k}")
        lo, hi = max(lo - 2 * (hi - lo), 2 * k), lo
    while hi not in peaks and fits(hi):  # the upper end must not: move it up
        lo, hi = hi, hi + 2 * (hi - lo)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo, sorted(peaks.items())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=int, default=96, help="the k = 1 sample sets the budget")
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--out", type=Path, default=Path("runs/bench"))
    args = parser.parse_args()
    if 1 not in args.ranks:
        parser.error("--ranks must include 1, the reference")
    with tempfile.TemporaryDirectory() as folder:
        budget = peak_mb(1, args.base, folder)
        print(f"budget: {budget:.1f} MiB per rank, the peak of one step on {T}x{args.base}^2")
        sizes, probes = {}, {}
        for k in args.ranks:
            guess = predicted(k, budget, args.base // 2)
            sizes[k], probes[k] = largest(k, budget, guess, guess + max(4, guess // 25), folder)
    base = sizes[1] ** 2
    results = {"budget_mb": budget, "base": args.base, "largest": {}, "probes": probes}
    print("k  largest sample   points / (k · points(1))   target >= 0.90")
    for k in args.ranks:
        ratio = sizes[k] ** 2 / (k * base)
        results["largest"][str(k)] = {"size": sizes[k], "points": T * sizes[k] ** 2, "ratio": ratio}
        print(f"{k}  {T}x{sizes[k]}^2{'':8s} {ratio:6.2f}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "largest_sample.json").write_text(json.dumps(results, indent=1))
    print(f"wrote {args.out / 'largest_sample.json'}")


if __name__ == "__main__":
    main()
