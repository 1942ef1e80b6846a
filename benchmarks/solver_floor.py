"""Solver floor: pdeladder's heat family against bare DOLFINx scripts of the same problem.

Each case solves the heat equation with implicit Euler on P1 (matrix assembled once) three ways
in bare DOLFINx — CG + AMG, CG + Jacobi, a reused Cholesky factorization — and once through
``pdeladder``'s heat family (which also samples snapshots onto the grid), and prints
DOF-steps per second and the ratio of pdeladder to the fastest bare script. Target: >= 0.9x.

Run: ``.venv/bin/python benchmarks/solver_floor.py [--quick]``. Timings include mesh creation,
assembly and solver set-up; forms are compiled (and cached) by a warm-up run first.
"""

from mpi4py import MPI

import argparse
import time

import numpy as np
import ufl
from dolfinx import fem
from dolfinx.fem.petsc import assemble_matrix, assemble_vector
from petsc4py import PETSc

from pdeladder.solvers import get_family
from pdeladder.solvers.fem import box_mesh

BARE = {
    "cg+amg": {"ksp_type": "cg", "pc_type": "gamg", "ksp_rtol": 1e-10},
    "cg+jacobi": {"ksp_type": "cg", "pc_type": "jacobi", "ksp_rtol": 1e-10},
    "cholesky": {"ksp_type": "preonly", "pc_type": "cholesky"},
}


def bare_heat(dim: int, cells: int, steps: int, options: dict, prefix: str) -> float:
    """A plain DOLFINx implicit-Euler heat solve; returns seconds for set-up plus time loop."""
    t0 = time.perf_counter()
    msh = box_mesh(MPI.COMM_SELF, dim, cells)
    V = fem.functionspace(msh, ("Lagrange", 1))
    u, v = ufl.TrialFunction(V), ufl.TestFunction(V)
    u_n = fem.Function(V)
    u_n.interpolate(lambda x: np.cos(np.pi * x[0]) * np.cos(np.pi * x[1]))
    dt, kappa = 1.0 / steps, 0.02
    a = fem.form(u * v * ufl.dx + dt * kappa * ufl.inner(ufl.grad(u), ufl.grad(v)) * ufl.dx)
    L = fem.form(u_n * v * ufl.dx)
    A = assemble_matrix(a)
    A.assemble()
    b = assemble_vector(L)
    ksp = PETSc.KSP().create(MPI.COMM_SELF)
    ksp.setOptionsPrefix(prefix)
    opts = PETSc.Options()
    for key, value in options.items():
        opts[f"{prefix}{key}"] = value
    ksp.setOperators(A)
    ksp.setFromOptions()
    for _ in range(steps):
        with b.localForm() as local:
            local.set(0.0)
        assemble_vector(b, L)
        ksp.solve(b, u_n.x.petsc_vec)
        assert ksp.getConvergedReason() > 0
        u_n.x.scatter_forward()
    elapsed = time.perf_counter() - t0
    for obj in (ksp, A, b):
        obj.destroy()
    return elapsed


def pdeladder_heat(dim: int, cells: int, snapshots: int) -> tuple[float, int]:
    """The heat family on the same mesh; returns (seconds, internal steps it took)."""
    fam = get_family("heat")
    sample = fam.run(fam.Params(diffusivity=0.02), fam.grid(dim, cells + 1, snapshots), seed=0)
    assert sample.ok, sample.stats.reason
    return sample.stats.wall_s, sample.stats.steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small cases (a smoke run)")
    args = parser.parse_args()
    # (dim, cells per axis, stored snapshots); the bare scripts take as many steps as the family.
    cases = [(2, 32, 21), (3, 8, 11)] if args.quick else [(2, 128, 101), (2, 256, 101), (3, 24, 51)]
    for dim, _, _ in cases:  # warm-up: compile and cache every form once
        bare_heat(dim, 4, 2, BARE["cholesky"], "warm_")
        pdeladder_heat(dim, 4, 3)
    print(f"{'case':<22}{'method':<12}{'DOF-steps/s':>14}{'ratio':>9}")
    for dim, cells, snapshots in cases:
        dofs = (cells + 1) ** dim
        seconds, steps = pdeladder_heat(dim, cells, snapshots)
        ours = dofs * steps / seconds
        rates = {
            name: dofs * steps / bare_heat(dim, cells, steps, opts, f"bare{i}_")
            for i, (name, opts) in enumerate(BARE.items())
        }
        best = max(rates.values())
        case = f"{dim}D {cells}^{dim} x{steps} steps"
        for name, rate in rates.items():
            print(f"{case:<22}{name:<12}{rate:>14.3e}{rate / best:>9.2f}")
        print(f"{case:<22}{'pdeladder':<12}{ours:>14.3e}{ours / best:>9.2f}  (target >= 0.90)")


if __name__ == "__main__":
    main()
