"""One large sample solved on K = 1 and K = 2 MPI ranks (``pdeladder solve ... --ranks K``):
solve speed-up, per-rank peak RSS (getrusage in each rank) and bytes written per rank.

    python benchmarks/solve_ranks.py [--family heat --dim 2 --resolution 257 --snapshots 11]

Each K is one ``pdeladder solve --ranks K`` into a fresh store in a temporary folder; the
figures are those rank 0 reports (``wall_s``: the slowest rank's solve, imports and store
writes excluded). The peak RSS includes the interpreter and its imports (DOLFINx, torch),
the same on every rank; the ratio of the increments over an idle rank is printed too.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

PDELADDER = os.path.join(os.path.dirname(sys.executable), "pdeladder")
IDLE = (
    "from mpi4py import MPI\nimport resource, pdeladder.solvers.slab_solve, pdeladder.solvers\n"
    "from pdeladder.solvers import get_family\n[get_family(n) for n in ('heat', 'navier_stokes')]\n"
    "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)"
)


def run(family: str, dim: int, resolution: int, snapshots: int, ranks: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        args = [PDELADDER, "solve", family, "--out", os.path.join(tmp, "store"), "--json"]
        args += ["--dim", str(dim), "--resolution", str(resolution)]
        args += ["--snapshots", str(snapshots), "--ranks", str(ranks)]
        done = subprocess.run(args, capture_output=True, text=True, check=True)
        return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", default="heat")
    parser.add_argument("--dim", type=int, default=2)
    parser.add_argument("--resolution", type=int, default=257)
    parser.add_argument("--snapshots", type=int, default=11)
    a = parser.parse_args()
    idle = float(
        subprocess.run(
            [sys.executable, "-c", IDLE], capture_output=True, text=True, check=True
        ).stdout
    )
    one, two = (run(a.family, a.dim, a.resolution, a.snapshots, k) for k in (1, 2))
    print(f"{a.family} {a.dim}D {a.resolution}^{a.dim}, T = {a.snapshots}, {one['dofs']} dofs")
    for line in (one, two):
        print(
            f"  K = {line['ranks']}: wall {line['wall_s']:.2f} s (solve {line['solve_s']:.2f} s), "
            f"peak RSS per rank {line['peak_rss_mb_per_rank']} MB, "
            f"bytes written per rank {line['bytes_per_rank']}"
        )
    peak1, peak2 = one["peak_rss_mb_per_rank"][0], max(two["peak_rss_mb_per_rank"])
    print(f"  speed-up K=2 / K=1 (wall): {one['wall_s'] / two['wall_s']:.2f}x")
    print(
        f"  per-rank peak RSS K=2 / K=1: {peak2 / peak1:.2f} "
        f"(above an idle rank's {idle:.0f} MB: {(peak2 - idle) / (peak1 - idle):.2f})"
    )
    print(
        f"  bytes per rank K=2 / K=1: {max(two['bytes_per_rank']) / one['bytes_per_rank'][0]:.2f}"
    )


if __name__ == "__main__":
    main()
