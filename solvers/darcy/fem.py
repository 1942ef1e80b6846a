r"""Darcy flow (steady pressure equation) in a random log-normal permeability.

Strong form, on the unit box :math:`\Omega = (0, 1)^d`, :math:`d = 1, 2, 3`:

.. math::
    -\nabla \cdot (k \nabla p) = f \quad \text{in } \Omega, \qquad p = 0 \text{ on } \partial\Omega,
    \qquad k = e^{a},

with :math:`a` a Gaussian random field of length scale :math:`\ell` and standard deviation
:math:`\sigma` (the permeability contrast :math:`k_{max}/k_{min} \approx e^{6\sigma}` is the
difficulty) and a uniform source :math:`f`.

Weak form: find :math:`p \in V_h` (P1, zero on the boundary) such that

.. math::
    (k \nabla p, \nabla q) = (f, q) \quad \forall q \in V_h,

with :math:`k = \exp(a_h)` evaluated at quadrature points from the P1 field :math:`a_h` that takes
the grid values of :math:`a`. The SPD system is solved once, by Cholesky or CG + AMG.
"""

from mpi4py import MPI  # first: the DOLFINx wheel loads libmpi through it

import math
import time
from typing import Any, ClassVar, Literal

import numpy as np
import torch
import ufl
from dolfinx import fem
from dolfinx.fem.petsc import apply_lifting, assemble_matrix, assemble_vector, set_bc
from petsc4py import PETSc

from pdeladder.solvers import stencils
from pdeladder.solvers.family import Channel, Family, Parameters, SolveStats, parameter
from pdeladder.solvers.fem import (
    GridSampler,
    boundary_facets,
    box_mesh,
    choose_solver,
    grid_mesh,
    make_ksp,
    solve_checked,
)
from pdeladder.solvers.grid import Grid
from pdeladder.solvers.random_fields import gaussian_random_field


class DarcyParams(Parameters):
    log_permeability_std: float = parameter(
        1.0, 0.1, 2.5, "1", "standard deviation σ of the log-permeability a = ln k"
    )
    length_scale: float = parameter(
        0.15, 0.03, 0.5, "1", "correlation length ℓ of the log-permeability"
    )
    source: float = parameter(1.0, 0.1, 10.0, "1", "uniform source term f")


class Darcy(Family):
    name = "darcy"
    title = "Darcy flow in a random permeability"
    equation = r"-\nabla \cdot (e^{a} \nabla p) = f"
    dims = (1, 2, 3)
    Params = DarcyParams
    channels = (
        Channel("a", "log-permeability", role="input"),
        Channel("p", "pressure"),
    )
    boundary_conditions = "p = 0 (homogeneous Dirichlet) on all walls"
    difficulty = "log_permeability_std"
    steady = True
    t_end = 0.0
    expected_rate_space = 2.0
    expected_rate_time = None
    convergence_plan: ClassVar[dict[str, Any]] = {
        "space": {"cells": (8, 16, 32), "steps": 1},
        "space_3d": {"cells": (4, 8, 16), "steps": 1},
    }

    def initial_fields(
        self, params: DarcyParams, grid: Grid, rng: np.random.Generator
    ) -> np.ndarray:
        a = gaussian_random_field(
            grid.shape, params.length_scale, rng, std=params.log_permeability_std
        )
        return np.stack([a, np.zeros_like(a)])  # (2, X, Y, Z): the pressure is the solve's

    def solve(
        self,
        params: DarcyParams,
        grid: Grid,
        rng: np.random.Generator,
        comm: MPI.Comm,
        stats: SolveStats,
    ) -> tuple[np.ndarray, dict[str, Any]]:
        a = self.initial_fields(params, grid, rng)[0]
        msh = grid_mesh(comm, grid)
        V = fem.functionspace(msh, ("Lagrange", 1))
        sampler = GridSampler(V, grid)
        a_h = fem.Function(V)
        sampler.from_grid(a_h, a)
        f = fem.Constant(msh, PETSc.ScalarType(params.source))  # a constant: one compiled form
        p_h, solver = solve_darcy(msh, V, ufl.exp(a_h), f, stats)
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

    def residual(self, fields: torch.Tensor, params: torch.Tensor, grid: Grid) -> torch.Tensor:
        a, p = fields[:, :, 0], fields[:, :, 1]  # (B, T, X, Y, Z)
        f = stencils.broadcast_param(params, self.Params.names().index("source"), p)
        return (-flux_divergence(torch.exp(a), p, grid) - f).unsqueeze(2)  # (B, 1, 1, X', Y', Z')

    def manufactured_error(
        self, dim: int, cells: int, steps: int, comm: MPI.Comm, study: Literal["space", "time"]
    ) -> float:
        # p = Π sin(π x_i) (zero on the walls), k = exp(½ Π cos(π x_i)), f = -∇·(k∇p) from UFL.
        msh = box_mesh(comm, dim, cells)
        x = ufl.SpatialCoordinate(msh)
        p_exact = math.prod(ufl.sin(ufl.pi * x[i]) for i in range(dim))
        k = ufl.exp(0.5 * math.prod(ufl.cos(ufl.pi * x[i]) for i in range(dim)))
        V = fem.functionspace(msh, ("Lagrange", 1))
        p_h, _ = solve_darcy(msh, V, k, -ufl.div(k * ufl.grad(p_exact)))
        err = fem.form((p_h - p_exact) ** 2 * ufl.dx)
        return math.sqrt(comm.allreduce(fem.assemble_scalar(err), op=MPI.SUM))


def solve_darcy(
    msh: Any, V: fem.FunctionSpace, k: Any, f: Any, stats: SolveStats | None = None
) -> tuple[fem.Function, str]:
    """Solve ``-∇·(k∇p) = f``, ``p = 0`` on the boundary, in the P1 space ``V``.

    Args:
        k, f: permeability and source as UFL expressions (or numbers).
        stats: receives dofs, Krylov iterations and solve time.

    Returns the solution and the name of the linear solver used.
    """
    p, q = ufl.TrialFunction(V), ufl.TestFunction(V)
    a = fem.form(ufl.inner(k * ufl.grad(p), ufl.grad(q)) * ufl.dx)
    L = fem.form(ufl.inner(f, q) * ufl.dx)
    walls = fem.locate_dofs_topological(V, msh.topology.dim - 1, boundary_facets(msh))
    bcs = [fem.dirichletbc(0.0, walls, V)]
    A = assemble_matrix(a, bcs=bcs)
    A.assemble()
    b = assemble_vector(L)
    apply_lifting(b, [a], bcs=[bcs])
    b.ghostUpdate(addv=PETSc.InsertMode.ADD, mode=PETSc.ScatterMode.REVERSE)
    set_bc(b, bcs)
    dofs = V.dofmap.index_map.size_global
    solver = choose_solver("elliptic", msh.topology.dim, dofs)
    ksp = make_ksp(msh.comm, A, solver, prefix=f"darcy_{id(A)}_")
    p_h = fem.Function(V)
    t0 = time.perf_counter()
    iterations = solve_checked(ksp, b, p_h.x.petsc_vec)
    p_h.x.scatter_forward()
    if stats is not None:
        stats.dofs, stats.steps = dofs, 1
        stats.krylov_iterations += iterations
        stats.solve_s += time.perf_counter() - t0
    for obj in (ksp, A, b):
        obj.destroy()
    return p_h, solver


def flux_divergence(k: torch.Tensor, p: torch.Tensor, grid: Grid) -> torch.Tensor:
    """Conservative ``∇·(k∇p)`` at interior points: face fluxes ``k_{i+½} (p_{i+1} - p_i) / h``
    with the arithmetic mean ``k_{i+½} = (k_i + k_{i+1}) / 2``, differenced over each cell.

    ``k`` and ``p`` end in ``(X, Y, Z)``; the result is cropped as :func:`stencils.laplacian`.
    """
    out = torch.zeros_like(stencils.interior(p, grid.dim))
    for axis_index in range(grid.dim):
        axis = p.ndim - 3 + axis_index
        n = p.shape[axis]
        k_face = 0.5 * (k.narrow(axis, 1, n - 1) + k.narrow(axis, 0, n - 1))
        flux = k_face * (p.narrow(axis, 1, n - 1) - p.narrow(axis, 0, n - 1)) / grid.h
        div = (flux.narrow(axis, 1, n - 2) - flux.narrow(axis, 0, n - 2)) / grid.h
        out = out + stencils.interior_except(div, grid.dim, axis_index)
    return out
