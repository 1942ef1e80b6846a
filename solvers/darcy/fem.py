r"""The FEM part of Darcy flow (:mod:`pdeladder.solvers.darcy`): weak form, solve and manufactured
solution.

Weak form: find :math:`p \in V_h` (P1, zero on the boundary) such that

.. math::
    (k \nabla p, \nabla q) = (f, q) \quad \forall q \in V_h,

with :math:`k = \exp(a_h)` evaluated at quadrature points from the P1 field :math:`a_h` that takes
the grid values of :math:`a`. The SPD system is solved once, by Cholesky or CG + AMG (a DOLFINx ``LinearProblem``).
"""

from mpi4py import MPI  # first: the DOLFINx wheel loads libmpi through it

import math
from typing import Any, Literal

import numpy as np
import ufl
from dolfinx import fem
from petsc4py import PETSc

from pdeladder.solvers.darcy import Darcy, DarcyParams
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


def solve_darcy(
    V: fem.FunctionSpace, k: Any, f: Any, stats: SolveStats | None = None
) -> tuple[fem.Function, str]:
    """Solve ``-∇·(k∇p) = f``, ``p = 0`` on the boundary, in the P1 space ``V``.

    Args:
        k, f: permeability and source as UFL expressions (or numbers).
        stats: receives dofs, Krylov iterations and solve time.

    Returns the solution and the linear solver used, as provenance names it
    (:func:`~pdeladder.solvers.fem.solver_provenance`).
    """
    msh = V.mesh
    p, q = ufl.TrialFunction(V), ufl.TestFunction(V)
    a = ufl.inner(k * ufl.grad(p), ufl.grad(q)) * ufl.dx
    L = ufl.inner(f, q) * ufl.dx
    walls = fem.locate_dofs_topological(V, msh.topology.dim - 1, boundary_facets(msh))
    return solve_steady(a, L, [fem.dirichletbc(0.0, walls, V)], "elliptic", "darcy", stats)


def solve(
    family: Darcy,
    params: DarcyParams,
    grid: Grid,
    rng: np.random.Generator,
    comm: MPI.Comm,
    stats: SolveStats,
) -> tuple[np.ndarray, dict[str, Any]]:
    """:meth:`Family.solve` of :class:`Darcy`: the pressure in the sample's permeability."""
    a = family.initial_fields(params, grid, rng, comm)[0]
    msh = grid_mesh(comm, grid)
    V = fem.functionspace(msh, ("Lagrange", 1))
    sampler = GridSampler(V, grid)
    a_h = fem.Function(V)
    sampler.from_grid(a_h, a)
    f = fem.Constant(msh, PETSc.ScalarType(params.source))  # a constant: one compiled form
    p_h, solver = solve_darcy(V, ufl.exp(a_h), f, stats)
    fields = np.stack([sampler.local(a)[None], sampler.to_grid(p_h)], axis=1).astype(
        np.float32
    )  # (1, 2, X, Y, Z)
    return fields, {
        "element": "P1",
        "time_scheme": "steady",
        "mesh": f"{msh.topology.cell_name()} {grid.cells}^{grid.dim}",
        "linear_solver": solver,
        "permeability": "exp of the P1 interpolant of a, at quadrature points",
    }


def manufactured_error(
    dim: int, cells: int, steps: int, comm: MPI.Comm, study: Literal["space", "time"]
) -> float:
    """:meth:`Family.manufactured_error` of :class:`Darcy` (steady: ``steps`` is ignored)."""
    # p = Π sin(π x_i) (zero on the walls), k = exp(½ Π cos(π x_i)), f = -∇·(k∇p) from UFL.
    msh = box_mesh(comm, dim, cells)
    x = ufl.SpatialCoordinate(msh)
    p_exact = math.prod(ufl.sin(ufl.pi * x[i]) for i in range(dim))
    k = ufl.exp(0.5 * math.prod(ufl.cos(ufl.pi * x[i]) for i in range(dim)))
    V = fem.functionspace(msh, ("Lagrange", 1))
    p_h, _ = solve_darcy(V, k, -ufl.div(k * ufl.grad(p_exact)))
    return l2_norm(p_h - p_exact)
