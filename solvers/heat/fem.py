r"""The FEM part of the heat equation (:mod:`pdeladder.solvers.heat`): weak form, time stepping
and manufactured solution.

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
from typing import Any, Literal

import numpy as np
import ufl
from dolfinx import fem
from dolfinx.fem.petsc import assemble_matrix, assemble_vector
from petsc4py import PETSc

from pdeladder.solvers.family import SolveStats
from pdeladder.solvers.fem import (
    GridSampler,
    box_mesh,
    choose_solver,
    grid_mesh,
    make_ksp,
    solve_checked,
)
from pdeladder.solvers.grid import Grid
from pdeladder.solvers.heat import Heat, HeatParams


def solve(
    family: Heat,
    params: HeatParams,
    grid: Grid,
    rng: np.random.Generator,
    comm: MPI.Comm,
    stats: SolveStats,
) -> tuple[np.ndarray, dict[str, Any]]:
    """:meth:`Family.solve` of :class:`Heat`: implicit Euler steps, about one per grid spacing
    of time, sampled every few steps."""
    u0 = family.initial_fields(params, grid, rng)
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
        on_step=lambda n, u, sampler: frames.append(sampler.to_grid(u)) if n % every == 0 else None,
    )
    fields = np.stack(frames).astype(np.float32)  # (T, 1, X, Y, Z)
    return fields, {
        "element": "P1",
        "time_scheme": "implicit Euler",
        "time_step": grid.t_end / steps,
        "mesh": f"{msh.topology.cell_name()} {grid.cells}^{grid.dim}",
        "linear_solver": solver,
    }


def manufactured_error(
    dim: int, cells: int, steps: int, comm: MPI.Comm, study: Literal["space", "time"]
) -> float:
    """:meth:`Family.manufactured_error` of :class:`Heat`."""
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
