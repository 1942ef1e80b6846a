"""The largest sample that trains under a fixed per-rank memory budget, at k = 1, 2, 4 domain ranks.

``python benchmarks/largest_sample.py [--base 64] [--ranks 1 2 4]``. The budget is the measured
peak tensor memory of the largest rank (as a GPU allocator counts it: see
``benchmarks/domain_parallel.py``, whose training step and model this uses) of one training
step on the 2D sample ``(T, X, Y) = (11, base, base)`` at k = 1. For each k a bisection over the
square size ``s`` finds the largest sample whose largest rank's measured peak fits the budget;
every probe is a real step on ``k`` gloo processes. Target: ``points(k) ≥ 0.9 · k · points(1)``.
Prints a table and writes ``largest_sample.json`` to ``--out`` (default ``runs/bench``).
"""

import argparse
import json
import math
import tempfile
from pathlib import Path

from domain_parallel import T, run_ranks  # benchmarks/ (the script folder is on sys.path)


def peak_mb(k: int, size: int, folder: str) -> float:
    """The largest rank's peak tensor MiB of one training step at ``k`` ranks."""
    return max(r["tensor_peak_mb"] for r in run_ranks(k, size, 1, folder))


def largest(k: int, budget: float, lo: int, hi: int, folder: str) -> tuple[int, list]:
    """The largest size in ``[lo, hi)`` whose peak fits ``budget`` (``lo`` must fit), and the
    probes ``(size, peak)`` taken."""
    probes = []
    while (peak := peak_mb(k, hi, folder)) <= budget:  # grow the bracket until it holds
        probes.append((hi, peak))
        lo, hi = hi, 2 * hi
    probes.append((hi, peak))
    while hi - lo > 1:
        mid = (lo + hi) // 2
        peak = peak_mb(k, mid, folder)
        probes.append((mid, peak))
        lo, hi = (mid, hi) if peak <= budget else (lo, mid)
    return lo, probes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=int, default=64, help="the k = 1 sample sets the budget")
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
            # a fitting start: the ideal size for k ranks less a quarter
            start = max(args.base, math.floor(args.base * math.sqrt(0.75 * k)))
            if peak_mb(k, start, folder) > budget:
                start = args.base
            sizes[k], probes[k] = largest(k, budget, start, start + max(4, start // 4), folder)
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
