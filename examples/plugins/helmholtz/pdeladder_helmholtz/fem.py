r"""The FEM part of the Helmholtz family (:mod:`pdeladder_helmholtz`): weak form, solve and
manufactured solution.

Weak form: find :math:`u \in V_h` (P1, zero on the boundary) such that

.. math::
    (\nabla u, \nabla v) - k^2 (u, v) = (f, v) \quad \forall v \in V_h,

with :math:`f` the P1 field that takes the grid values of the drawn source. For
:math:`k^2` below the first Dirichlet eigenvalue :math:`d \pi^2` the bilinear form is coercive
(the discrete eigenvalues of a conforming P1 space lie above the continuous ones), so the
system is symmetric positive definite: it is solved once, by Cholesky or CG + AMG, as
:func:`pdeladder.solvers.fem.choose_solver` picks for an elliptic problem. The mesh, the map
between dofs and grid points and the solver settings are pdeladder's
(:mod:`pdeladder.solvers.fem`), so a sample solved on K ranks in x slabs needs nothing here.
"""

from mpi4py import MPI  # first: the DOLFINx wheel loads libmpi through it

import math
from typing import Any, Literal

import numpy as np
import ufl
from dolfinx import fem
from petsc4py import PETSc

from pdeladder.solvers.family import SolveStats
from pdeladder.solvers.fem import (
    GridSampler,
    boundary_facets,
    box_mesh,
    grid_mesh,
    l2_norm,
    solve_steady,
)
from pdeladder.solvers.grid import Grid
from pdeladder_helmholtz import Helmholtz, HelmholtzParams


def solve_helmholtz(
    V: fem.FunctionSpace, k: Any, f: Any, stats: SolveStats | None = None
) -> tuple[fem.Function, str]:
    """Solve ``-Δu - k²u = f``, ``u = 0`` on the boundary, in the P1 space ``V``.

    Args:
        k, f: wavenumber and source as UFL expressions (or numbers); ``k²`` below the first
            Dirichlet eigenvalue of the mesh's box.
        stats: receives dofs, Krylov iterations and solve time.

    Returns the solution and the linear solver used, as provenance names it.
    """
    msh = V.mesh
    u, v = ufl.TrialFunction(V), ufl.TestFunction(V)
    a = ufl.inner(ufl.grad(u), ufl.grad(v)) * ufl.dx - k**2 * ufl.inner(u, v) * ufl.dx
    L = ufl.inner(f, v) * ufl.dx
    walls = fem.locate_dofs_topological(V, msh.topology.dim - 1, boundary_facets(msh))
    # symmetric positive definite below the first resonance: an elliptic system
    return solve_steady(a, L, [fem.dirichletbc(0.0, walls, V)], "elliptic", "helmholtz", stats)


def solve(
    family: Helmholtz,
    params: HelmholtzParams,
    grid: Grid,
    rng: np.random.Generator,
    comm: MPI.Comm,
    stats: SolveStats,
) -> tuple[np.ndarray, dict[str, Any]]:
    """:meth:`Family.solve` of :class:`Helmholtz`: the wave amplitude forced by the drawn
    source."""
    f = family.initial_fields(params, grid, rng, comm)[0]  # this rank's rows, on x slabs
    msh = grid_mesh(comm, grid)
    V = fem.functionspace(msh, ("Lagrange", 1))
    sampler = GridSampler(V, grid)
    f_h = fem.Function(V)
    sampler.from_grid(f_h, f)
    k = fem.Constant(msh, PETSc.ScalarType(params.wavenumber))  # a constant: one compiled form
    u_h, solver = solve_helmholtz(V, k, f_h, stats)
    fields = np.stack([sampler.local(f)[None], sampler.to_grid(u_h)], axis=1).astype(
        np.float32
    )  # (1, 2, X, Y, Z)
    return fields, {
        "element": "P1",
        "time_scheme": "steady",
        "mesh": f"{msh.topology.cell_name()} {grid.cells}^{grid.dim}",
        "linear_solver": solver,
        "source": "P1 interpolant of the drawn f",
    }


def manufactured_error(
    dim: int, cells: int, steps: int, comm: MPI.Comm, study: Literal["space", "time"]
) -> float:
    """:meth:`Family.manufactured_error` of :class:`Helmholtz` (steady: ``steps`` is ignored)."""
    # u = (1 + x) Π sin(π x_i), zero on the walls and not an eigenfunction, at the largest
    # wavenumber k = 3, closest to resonance; f = -Δu - k²u from UFL.
    msh = box_mesh(comm, dim, cells)
    x = ufl.SpatialCoordinate(msh)
    u_exact = (1 + x[0]) * math.prod(ufl.sin(ufl.pi * x[i]) for i in range(dim))
    k = HelmholtzParams.ranges()["wavenumber"][1]
    V = fem.functionspace(msh, ("Lagrange", 1))
    u_h, _ = solve_helmholtz(V, k, -ufl.div(ufl.grad(u_exact)) - k**2 * u_exact)
    return l2_norm(u_h - u_exact)
