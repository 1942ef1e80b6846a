"""DFG benchmark 2D-1 (Schäfer & Turek 1996): steady flow around a cylinder at Re = 20, solved by
``solvers/channel_flow`` on a sequence of gmsh meshes, each halving the last one's cell size.

Per mesh it prints the cells, the dofs, the drag and lift coefficients and the pressure
difference Δp, each beside the reference value (FeatFlow's, ``DFG_2D1_REFERENCE``), its relative
error and whether it lies in the published bounds (``DFG_2D1_BOUNDS``), and the seconds of the
mesh and of the Newton solve.

Run: ``.venv/bin/python benchmarks/dfg_cylinder.py [--levels 4] [--order 2] [--size 0.04]``
(``mpiexec -n K`` works too; rank 0 prints). The forms are compiled (and cached) at the first
level, so its solve time includes that on a fresh cache.
"""

from mpi4py import MPI

import argparse
import time

from pdeladder.solvers.channel_flow import (
    DFG_2D1,
    DFG_2D1_BOUNDS,
    DFG_2D1_PARAMS,
    DFG_2D1_PRESSURE_POINTS,
    DFG_2D1_REFERENCE,
)
from pdeladder.solvers.channel_flow.fem import SteadyFlow
from pdeladder.solvers.family import SolveStats
from pdeladder.solvers.geometry import domain_mesh


def level(size: float, order: int) -> dict:
    """One mesh of cell size ``size`` (metres; a quarter of it on the cylinder) solved."""
    t0 = time.perf_counter()
    dm = domain_mesh(DFG_2D1, MPI.COMM_WORLD, size, obstacle_size=size / 4, order=order)
    mesh_s = time.perf_counter() - t0
    flow, stats = SteadyFlow(dm, DFG_2D1_PARAMS), SolveStats()
    newton = flow.solve(stats)
    c_d, c_l = flow.coefficients()
    return {
        "size": size,
        "cells": dm.mesh.topology.index_map(2).size_global,
        "dofs": flow.dofs,
        "newton": newton,
        "c_D": c_d,
        "c_L": c_l,
        "delta_p": flow.pressure_difference(*DFG_2D1_PRESSURE_POINTS),
        "mesh_s": mesh_s,
        "solve_s": stats.solve_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", type=int, default=4, help="meshes, each halving the size")
    parser.add_argument("--order", type=int, default=2, choices=(1, 2), help="geometric degree")
    parser.add_argument("--size", type=float, default=0.04, help="coarsest cell size (m)")
    args = parser.parse_args()
    rows = [level(args.size / 2**k, args.order) for k in range(args.levels)]
    if MPI.COMM_WORLD.rank:
        return
    names = ("c_D", "c_L", "delta_p")
    print(
        f"DFG 2D-1, Taylor–Hood P2–P1, geometric order {args.order}, {MPI.COMM_WORLD.size} rank(s)"
    )
    print(
        "| h (m) | cells | dofs | Newton | "
        + " | ".join(f"{n} | rel. error | in bounds" for n in names)
        + " | mesh (s) | solve (s) |"
    )
    print("|" + "---|" * (4 + 3 * len(names) + 2))
    for r in rows:
        cells = []
        for n in names:
            lo, hi = DFG_2D1_BOUNDS[n]
            error = (r[n] - DFG_2D1_REFERENCE[n]) / DFG_2D1_REFERENCE[n]
            cells.append(f"{r[n]:.6f} | {error:+.2e} | {'yes' if lo <= r[n] <= hi else 'no'}")
        print(
            f"| {r['size']:g} | {r['cells']} | {r['dofs']} | {r['newton']} | "
            + " | ".join(cells)
            + f" | {r['mesh_s']:.2f} | {r['solve_s']:.2f} |"
        )
    print(
        "| published | | | | "
        + " | ".join(
            f"{DFG_2D1_REFERENCE[n]:.6f} | bounds | {DFG_2D1_BOUNDS[n][0]}–{DFG_2D1_BOUNDS[n][1]}"
            for n in names
        )
        + " | | |"
    )


if __name__ == "__main__":
    main()
