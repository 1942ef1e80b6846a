r"""Heat equation (linear diffusion) with zero-flux boundaries.

Strong form, on the unit box :math:`\Omega = (0, 1)^d`, :math:`d = 1, 2, 3`:

.. math::
    \partial_t u - \kappa \Delta u = f \quad \text{in } \Omega \times (0, T], \qquad
    \kappa \nabla u \cdot n = 0 \text{ on } \partial\Omega, \qquad u(\cdot, 0) = u_0,

with :math:`f = 0` for samples and :math:`u_0` a Gaussian random field of length scale
:math:`\ell`. The mean of :math:`u` is conserved.

Weak form with implicit Euler, step :math:`\tau`: find :math:`u^{n+1} \in V_h` (P1) such that

.. math::
    (u^{n+1}, v) + \tau \kappa (\nabla u^{n+1}, \nabla v) = (u^n, v) + \tau (f^{n+1}, v)
    \quad \forall v \in V_h.

The matrix :math:`M + \tau\kappa K` is assembled and factorized (or preconditioned) once; each
step is one product with the mass matrix :math:`M` and one solve.
"""

from mpi4py import MPI

import math
import time
from collections.abc import Callable
from typing import Any, ClassVar, Literal

import numpy as np
import torch
import ufl
from dolfinx import fem
from dolfinx.fem.petsc import assemble_matrix, assemble_vector
from petsc4py import PETSc

from pdeladder.solvers import stencils
from pdeladder.solvers.family import Channel, Family, Parameters, SolveStats, parameter
from pdeladder.solvers.fem import (
    GridSampler,
    box_mesh,
    choose_solver,
    grid_mesh,
    make_ksp,
    solve_checked,
)
from pdeladder.solvers.grid import Grid
from pdeladder.solvers.random_fields import gaussian_random_field


class HeatParams(Parameters):
    diffusivity: float = parameter(0.02, 1e-3, 0.1, "1", "diffusivity κ (unit box, unit time)")
    ic_length_scale: float = parameter(0.15, 0.03, 0.5, "1", "length scale ℓ of the initial field")


class Heat(Family):
    name = "heat"
    title = "Heat equation"
    equation = r"\partial_t u = \kappa \Delta u"
    dims = (1, 2, 3)
    Params = HeatParams
    channels = (Channel("u", "temperature"),)
    boundary_conditions = "zero flux (homogeneous Neumann) on all walls"
    difficulty = "ic_length_scale"
    t_end = 1.0
    expected_rate_space = 2.0
    expected_rate_time = 1.0
    convergence_plan: ClassVar[dict[str, Any]] = {
        "space": {"cells": (8, 16, 32), "steps": 4},
        "time": {"steps": (8, 16, 32), "cells": 48},
    }

    def initial_fields(
        self, params: HeatParams, grid: Grid, rng: np.random.Generator
    ) -> np.ndarray:
        return gaussian_random_field(grid.shape, params.ic_length_scale, rng)[None]  # (1, X, Y, Z)

    def solve(
        self,
        params: HeatParams,
        grid: Grid,
        rng: np.random.Generator,
        comm: MPI.Comm,
        stats: SolveStats,
    ) -> tuple[np.ndarray, dict[str, Any]]:
        u0 = self.initial_fields(params, grid, rng)
        msh = grid_mesh(comm, grid)
        # Internal steps: about one per grid spacing of time (tau ~ h * t_end), stored every `every`.
        every = max(1, math.ceil(grid.cells / (grid.snapshots - 1)))
        steps = every * (grid.snapshots - 1)
        frames = []
        solver = run_implicit_euler(
            msh,
            params.diffusivity,
            grid.t_end / steps,
            steps,
            initial=lambda u, sampler: sampler.from_grid(u, u0),
            grid=grid,
            stats=stats,
            on_step=lambda n, u, sampler: (
                frames.append(sampler.to_grid(u)) if n % every == 0 else None
            ),
        )
        fields = np.stack(frames).astype(np.float32)  # (T, 1, X, Y, Z)
        return fields, {
            "element": "P1",
            "time_scheme": "implicit Euler",
            "time_step": grid.t_end / steps,
            "mesh": f"{msh.topology.cell_name()} {grid.cells}^{grid.dim}",
            "linear_solver": solver,
        }

    def residual(self, fields: torch.Tensor, params: torch.Tensor, grid: Grid) -> torch.Tensor:
        u = fields[:, :, 0]  # (B, T, X, Y, Z)
        kappa = stencils.broadcast_param(params, self.Params.names().index("diffusivity"), u)
        u_t = stencils.interior(stencils.time_derivative(u, grid), grid.dim)
        lap = stencils.laplacian(stencils.time_interior(u), grid)
        return (u_t - kappa * lap).unsqueeze(2)  # (B, T-2, 1, X', Y', Z')

    def manufactured_error(
        self, dim: int, cells: int, steps: int, comm: MPI.Comm, study: Literal["space", "time"]
    ) -> float:
        # u = g(t) φ(x), φ = Π cos(π x_i) (zero normal flux), f = (g' + κ d π² g) φ, with
        # g = 1 + t for the space study (implicit Euler is exact in time) and 1 + sin(2t) otherwise.
        kappa, t_end = 0.05, 1.0
        if study == "space":

            def g(t: float) -> float:
                return 1.0 + t

            def dg(t: float) -> float:
                return 1.0
        else:

            def g(t: float) -> float:
                return 1.0 + math.sin(2 * t)

            def dg(t: float) -> float:
                return 2 * math.cos(2 * t)

        def source(t: float) -> float:
            return dg(t) + kappa * dim * math.pi**2 * g(t)

        msh = box_mesh(comm, dim, cells)
        x = ufl.SpatialCoordinate(msh)
        phi = math.prod(ufl.cos(ufl.pi * x[i]) for i in range(dim))

        state = {}
        run_implicit_euler(
            msh,
            kappa,
            t_end / steps,
            steps,
            initial=lambda u, sampler: u.interpolate(
                fem.Expression(g(0.0) * phi, u.function_space.element.interpolation_points)
            ),
            source=(phi, source),
            on_step=lambda n, u, sampler: state.update(u=u) if n == steps else None,
        )
        err = fem.form((state["u"] - g(t_end) * phi) ** 2 * ufl.dx)
        return math.sqrt(comm.allreduce(fem.assemble_scalar(err), op=MPI.SUM))


def run_implicit_euler(
    msh: Any,
    kappa: float,
    tau: float,
    steps: int,
    *,
    initial: Callable[[fem.Function, GridSampler | None], None],
    on_step: Callable[[int, fem.Function, GridSampler | None], None],
    grid: Grid | None = None,
    source: tuple[Any, Callable[[float], float]] | None = None,
    stats: SolveStats | None = None,
) -> str:
    """Implicit Euler for the heat equation with zero-flux walls on ``msh`` (P1).

    Args:
        kappa, tau, steps: diffusivity, time step, number of steps.
        initial: sets the initial state ``u`` (given the grid sampler when ``grid`` is set).
        on_step: called after step ``n`` (and with ``n = 0`` for the initial state).
        source: a separable source ``f = c(t) φ(x)`` as (UFL ``φ``, callable ``c``).
        stats: receives dofs, steps, Krylov iterations and solve time.

    Returns the name of the linear solver used.
    """
    comm = msh.comm
    V = fem.functionspace(msh, ("Lagrange", 1))
    sampler = GridSampler(V, grid) if grid is not None else None
    u, v = ufl.TrialFunction(V), ufl.TestFunction(V)
    dt_kappa = fem.Constant(msh, tau * kappa)
    mass = ufl.inner(u, v) * ufl.dx
    system = ufl.inner(u, v) * ufl.dx + dt_kappa * ufl.inner(ufl.grad(u), ufl.grad(v)) * ufl.dx
    M = assemble_matrix(fem.form(mass))
    M.assemble()
    A = assemble_matrix(fem.form(system))
    A.assemble()
    dofs = V.dofmap.index_map.size_global
    solver = choose_solver("mass", msh.topology.dim, dofs)
    ksp = make_ksp(comm, A, solver, prefix=f"heat_{id(A)}_")
    load = None
    if source is not None:
        load = assemble_vector(fem.form(ufl.inner(source[0], v) * ufl.dx))
        load.ghostUpdate(addv=PETSc.InsertMode.ADD, mode=PETSc.ScatterMode.REVERSE)

    uh = fem.Function(V)
    initial(uh, sampler)
    on_step(0, uh, sampler)
    b = A.createVecRight()
    x = uh.x.petsc_vec
    t0 = time.perf_counter()
    iterations = 0
    for n in range(1, steps + 1):
        M.mult(x, b)
        if load is not None:
            b.axpy(tau * source[1](n * tau), load)
        iterations += solve_checked(ksp, b, x)
        uh.x.scatter_forward()
        on_step(n, uh, sampler)
    if stats is not None:
        stats.dofs, stats.steps = dofs, steps
        stats.krylov_iterations += iterations
        stats.solve_s += time.perf_counter() - t0
    for obj in (ksp, A, M, b, *(() if load is None else (load,))):
        obj.destroy()
    return solver
