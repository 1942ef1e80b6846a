r"""The FEM part of :mod:`pdeladder.solvers.wave`: weak form, time stepping and manufactured
solution.

Weak form, Crank–Nicolson on the system (Newmark's average acceleration), step :math:`\tau`, P1:

.. math::
    u^{n+1} - u^n = \tfrac{\tau}{2} (v^{n+1} + v^n), \qquad
    (v^{n+1} - v^n, \phi) + \tfrac{\tau c^2}{2} (\nabla (u^{n+1} + u^n), \nabla \phi)
    = \tfrac{\tau}{2} (f^{n+1} + f^n, \phi) \quad \forall \phi \in V_h.

Eliminating :math:`v^{n+1}` leaves one SPD solve per step,
:math:`(M + \tfrac{\tau^2 c^2}{4} K) u^{n+1} = (M - \tfrac{\tau^2 c^2}{4} K) u^n + \tau M v^n
+ \tfrac{\tau^2}{4}(F^{n+1} + F^n)`, then :math:`v^{n+1} = 2 (u^{n+1} - u^n) / \tau - v^n`. The
scheme conserves the discrete energy :math:`\tfrac12 (M v, v) + \tfrac12 c^2 (K u, u)` exactly
(up to the linear solver's tolerance) and is second order in time; all matrices are assembled
and the solver set up once.

Both :math:`u` and :math:`v` are stored: the state of a second-order equation is the pair, so a
snapshot of both determines the rest of the trajectory, which :math:`u` alone does not.
"""

from mpi4py import MPI

import math
import time
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
import ufl
from dolfinx import fem
from dolfinx.fem.petsc import assemble_matrix, assemble_vector, set_bc
from petsc4py import PETSc

from pdeladder.solvers.family import SolveStats
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
from pdeladder.solvers.wave import Wave, WaveParams

#: Courant number c τ / h of the stored samples' internal steps: Crank–Nicolson is stable for
#: any step, this keeps its phase error small on the waves the grid resolves.
COURANT = 0.5


def solve(
    family: Wave,
    params: WaveParams,
    grid: Grid,
    rng: np.random.Generator,
    comm: MPI.Comm,
    stats: SolveStats,
) -> tuple[np.ndarray, dict[str, Any]]:
    """:meth:`Family.solve` of :class:`Wave`."""
    u0, v0 = family.initial_fields(params, grid, rng)
    c = params.wave_speed
    every = max(1, math.ceil(grid.dt * c / (COURANT * grid.h)))
    steps = every * (grid.snapshots - 1)
    frames = []

    def initial(u: fem.Function, v: fem.Function, sampler: GridSampler | None) -> None:
        sampler.from_grid(u, u0)
        sampler.from_grid(v, v0)

    def keep(n: int, u: fem.Function, v: fem.Function, sampler: GridSampler | None) -> None:
        if n % every == 0:
            frames.append(np.concatenate([sampler.to_grid(u), sampler.to_grid(v)]))

    msh = grid_mesh(comm, grid)
    solver = run_crank_nicolson(
        msh, c, grid.t_end / steps, steps, initial=initial, on_step=keep, grid=grid, stats=stats
    )
    fields = np.stack(frames).astype(np.float32)  # (T, 2, X, Y, Z)
    return fields, {
        "element": "P1",
        "time_scheme": "Crank-Nicolson on (u, v) (Newmark average acceleration)",
        "time_step": grid.t_end / steps,
        "courant_number": c * grid.t_end / steps / grid.h,
        "mesh": f"{msh.topology.cell_name()} {grid.cells}^{grid.dim}",
        "linear_solver": solver,
    }


def manufactured_error(
    dim: int, cells: int, steps: int, comm: MPI.Comm, study: Literal["space", "time"]
) -> float:
    """:meth:`Family.manufactured_error` of :class:`Wave`."""
    # u = g(t) φ(x), φ = Π sin(π x_i) (zero on the walls), with the load
    # g'' (φ, ψ) + c² g (∇φ, ∇ψ), i.e. (f, ψ) for f = (g'' + c² d π² g) φ. Space study:
    # g = 1 + t, which Crank–Nicolson integrates exactly. Time study: g = cos(4t) and φ
    # replaced by its P1 interpolant, which makes g φ_h the exact solution of the
    # semi-discrete problem: the error is the time error alone.
    c, t_end, omega = 1.0, 1.0, 4.0
    if study == "space":

        def g(t: float) -> float:
            return 1.0 + t

        def dg(t: float) -> float:
            return 1.0

        def d2g(t: float) -> float:
            return 0.0
    else:

        def g(t: float) -> float:
            return math.cos(omega * t)

        def dg(t: float) -> float:
            return -omega * math.sin(omega * t)

        def d2g(t: float) -> float:
            return -(omega**2) * math.cos(omega * t)

    msh = box_mesh(comm, dim, cells)
    x = ufl.SpatialCoordinate(msh)
    phi = math.prod(ufl.sin(ufl.pi * x[i]) for i in range(dim))
    if study == "time":
        V = fem.functionspace(msh, ("Lagrange", 1))
        phi_h = fem.Function(V)
        phi_h.interpolate(fem.Expression(phi, V.element.interpolation_points))
        phi = phi_h
    dx = ufl.dx(metadata={"quadrature_degree": 4})  # UFL's estimate for sin is far higher

    def initial(u: fem.Function, v: fem.Function, sampler: GridSampler | None) -> None:
        u.interpolate(fem.Expression(phi, u.function_space.element.interpolation_points))
        v.x.array[:] = dg(0.0) * u.x.array
        u.x.array[:] *= g(0.0)

    state = {}
    run_crank_nicolson(
        msh,
        c,
        t_end / steps,
        steps,
        initial=initial,
        source=[
            (lambda psi: ufl.inner(phi, psi) * dx, d2g),
            (lambda psi: c**2 * ufl.inner(ufl.grad(phi), ufl.grad(psi)) * dx, g),
        ],
        on_step=lambda n, u, v, sampler: state.update(u=u) if n == steps else None,
    )
    dx = ufl.dx(metadata={"quadrature_degree": 6})
    err = fem.form((state["u"] - g(t_end) * phi) ** 2 * dx)
    return math.sqrt(comm.allreduce(fem.assemble_scalar(err), op=MPI.SUM))


def run_crank_nicolson(
    msh: Any,
    c: float,
    tau: float,
    steps: int,
    *,
    initial: Callable[[fem.Function, fem.Function, GridSampler | None], None],
    on_step: Callable[[int, fem.Function, fem.Function, GridSampler | None], None],
    grid: Grid | None = None,
    source: list[tuple[Callable[[ufl.Argument], ufl.Form], Callable[[float], float]]] | None = None,
    stats: SolveStats | None = None,
) -> str:
    """Crank–Nicolson for the wave equation with fixed walls on ``msh`` (P1).

    Args:
        c, tau, steps: wave speed, time step, number of steps.
        initial: sets the initial displacement ``u`` and velocity ``v`` (given the grid sampler
            when ``grid`` is set); their wall values are then set to zero.
        on_step: called with ``(n, u, v, sampler)`` after step ``n`` (and ``n = 0`` initially).
        source: a source whose load is ``Σ_k s_k(t) L_k(φ)``, as pairs of ``φ -> L_k(φ)`` (a UFL
            linear form, assembled once) and ``s_k``.
        stats: receives dofs, steps, Krylov iterations and solve time.

    Returns the name of the linear solver used.
    """
    comm, dim = msh.comm, msh.topology.dim
    V = fem.functionspace(msh, ("Lagrange", 1))
    sampler = GridSampler(V, grid) if grid is not None else None
    walls = fem.locate_dofs_topological(V, dim - 1, boundary_facets(msh))
    bcs = [fem.dirichletbc(0.0, walls, V)]
    u, phi = ufl.TrialFunction(V), ufl.TestFunction(V)
    quarter = fem.Constant(msh, (tau * c) ** 2 / 4)
    mass = ufl.inner(u, phi) * ufl.dx
    stiffness = quarter * ufl.inner(ufl.grad(u), ufl.grad(phi)) * ufl.dx
    A = assemble_matrix(fem.form(mass + stiffness), bcs=bcs)
    B = assemble_matrix(fem.form(mass - stiffness))
    M = assemble_matrix(fem.form(mass))
    for mat in (A, B, M):
        mat.assemble()
    dofs = V.dofmap.index_map.size_global
    solver = choose_solver("mass", dim, dofs)
    ksp = make_ksp(comm, A, solver, prefix=f"wave_{id(A)}_")
    loads = []
    for form, s in source or ():
        load = assemble_vector(fem.form(form(phi)))
        load.ghostUpdate(addv=PETSc.InsertMode.ADD, mode=PETSc.ScatterMode.REVERSE)
        loads.append((load, s))

    uh, vh = fem.Function(V), fem.Function(V)
    initial(uh, vh, sampler)
    for f in (uh, vh):
        f.x.array[walls] = 0.0
        f.x.scatter_forward()
    on_step(0, uh, vh, sampler)
    b, work = A.createVecRight(), A.createVecRight()
    t0 = time.perf_counter()
    iterations = 0
    try:
        for n in range(1, steps + 1):
            # b = (M - τ²c²/4 K) u^n + τ M v^n + τ²/4 (F^{n+1} + F^n)
            B.mult(uh.x.petsc_vec, b)
            M.mult(vh.x.petsc_vec, work)
            b.axpy(tau, work)
            for load, s in loads:
                b.axpy(tau**2 / 4 * (s(n * tau) + s((n - 1) * tau)), load)
            set_bc(b, bcs)
            u_old = uh.x.array.copy()  # owned and ghost entries
            iterations += solve_checked(ksp, b, uh.x.petsc_vec)
            uh.x.scatter_forward()
            vh.x.array[:] = 2 / tau * (uh.x.array - u_old) - vh.x.array
            on_step(n, uh, vh, sampler)
    finally:
        if stats is not None:
            stats.dofs, stats.steps = dofs, steps
            stats.krylov_iterations += iterations
            stats.solve_s += time.perf_counter() - t0
        for obj in (ksp, A, B, M, b, work, *(load for load, _ in loads)):
            obj.destroy()
    return solver
