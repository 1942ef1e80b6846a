r"""The FEM part of :mod:`pdeladder.solvers.advection_diffusion`: weak form, time stepping and manufactured
solution.

Weak form, conservative Galerkin plus SUPG, Crank–Nicolson with step :math:`\tau`: with the
weighted test function :math:`w = v + \delta\, b\cdot\nabla v`,
:math:`\delta = ((2|b|/h)^2 + 9 (4\varepsilon/h^2)^2)^{-1/2}`, find :math:`u^{n+1} \in V_h`
(P1) with

.. math::
    (u^{n+1} - u^n, w) + \tfrac{\tau}{2}\, a(u^{n+1} + u^n, v) = \tfrac{\tau}{2} (f^{n+1} + f^n, w)
    \quad \forall v \in V_h, \qquad
    a(u, v) = -(u b, \nabla v) + \varepsilon (\nabla u, \nabla v)
    + (\nabla\cdot(b u), \delta\, b\cdot\nabla v).

With :math:`v = 1` every term but the first vanishes, so the discrete total is conserved exactly.
Both matrices are assembled once (:math:`b` is static); the left one is factorized (LU) or, for
large problems, ILU-preconditioned once.
"""

from mpi4py import MPI  # first: DOLFINx needs libmpi loaded

import math
import time
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
import ufl
from dolfinx import fem
from dolfinx.fem.petsc import assemble_matrix, assemble_vector
from petsc4py import PETSc

from pdeladder.solvers.advection_diffusion import (
    AdvectionDiffusion,
    AdvectionDiffusionParams,
)
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

#: Courant number of the internal time steps, max|b| τ / h.
COURANT = 1.0


#: Quadrature degree of every integral: UFL's estimate for the SUPG weight (a square root) and
#: for trigonometric manufactured solutions runs to hundreds of points per tetrahedron.
QUADRATURE = {"quadrature_degree": 4}


def solve(
    family: AdvectionDiffusion,
    params: AdvectionDiffusionParams,
    grid: Grid,
    rng: np.random.Generator,
    comm: MPI.Comm,
    stats: SolveStats,
) -> tuple[np.ndarray, dict[str, Any]]:
    """:meth:`Family.solve` of :class:`AdvectionDiffusion`."""
    initial = family.initial_fields(params, grid, rng)
    u0, velocity = initial[0], initial[1:]
    msh = grid_mesh(comm, grid)
    b = fem.Function(fem.functionspace(msh, ("Lagrange", 1, (grid.dim,))))
    velocity_sampler = GridSampler(b.function_space, grid)
    velocity_sampler.from_grid(b, velocity)
    # Internal steps: at most Courant number COURANT and at least one per grid spacing of time.
    top_speed = float(np.sqrt(np.sum(velocity**2, axis=0)).max())
    every = max(
        math.ceil(grid.cells / (grid.snapshots - 1)),
        math.ceil(top_speed * grid.dt / (COURANT * grid.h)),
    )
    steps = every * (grid.snapshots - 1)
    frames = []
    solver = run_supg_crank_nicolson(
        b,
        params.speed / params.peclet,
        grid.t_end / steps,
        steps,
        initial=lambda u, sampler: sampler.from_grid(u, u0),
        grid=grid,
        stats=stats,
        on_step=lambda n, u, sampler: frames.append(sampler.to_grid(u)) if n % every == 0 else None,
    )
    static = velocity_sampler.local(velocity)  # this rank's part: all of it, or its x slab
    static = np.broadcast_to(static, (len(frames), *static.shape))
    fields = np.concatenate([np.stack(frames), static], axis=1).astype(np.float32)
    return fields, {  # (T, 1 + dim, X, Y, Z)
        "element": "P1",
        "stabilisation": "SUPG",
        "time_scheme": "Crank–Nicolson",
        "time_step": grid.t_end / steps,
        "mesh": f"{msh.topology.cell_name()} {grid.cells}^{grid.dim}",
        "linear_solver": solver,
    }


def manufactured_error(
    dim: int, cells: int, steps: int, comm: MPI.Comm, study: Literal["space", "time"]
) -> float:
    """:meth:`Family.manufactured_error` of :class:`AdvectionDiffusion`."""
    # u = g(t) φ(x), φ = Π cos(π x_i), with the cellular flow b of `exact_velocity`; the
    # source is f = g' φ + g (∇·(b φ) - ε Δφ) plus the wall flux g (ε∇φ - b φ)·n, which is
    # nonzero only in 1D. g = 1 + t for the space study (Crank–Nicolson is exact for it).
    eps, t_end = 0.05, 1.0
    if study == "space":

        def g(t: float) -> float:
            return 1.0 + t

        def dg(t: float) -> float:
            return 1.0
    else:

        def g(t: float) -> float:
            return 1.0 + math.sin(8 * t)

        def dg(t: float) -> float:
            return 8 * math.cos(8 * t)

    msh = box_mesh(comm, dim, cells)
    x = ufl.SpatialCoordinate(msh)
    n = ufl.FacetNormal(msh)
    phi = math.prod(ufl.cos(ufl.pi * x[i]) for i in range(dim))
    b_exact = exact_velocity(msh)
    b = fem.Function(fem.functionspace(msh, ("Lagrange", 1, (dim,))))
    b.interpolate(fem.Expression(b_exact, b.function_space.element.interpolation_points))
    spatial = ufl.div(b_exact * phi) - eps * ufl.div(ufl.grad(phi))
    wall_flux = ufl.dot(eps * ufl.grad(phi) - b_exact * phi, n)

    state = {}
    run_supg_crank_nicolson(
        b,
        eps,
        t_end / steps,
        steps,
        initial=lambda u, sampler: u.interpolate(
            fem.Expression(g(0.0) * phi, u.function_space.element.interpolation_points)
        ),
        source=[(phi, None, dg), (spatial, wall_flux, g)],
        on_step=lambda k, u, sampler: state.update(u=u) if k == steps else None,
    )
    err = fem.form((state["u"] - g(t_end) * phi) ** 2 * ufl.dx(metadata=QUADRATURE))
    return math.sqrt(comm.allreduce(fem.assemble_scalar(err), op=MPI.SUM))


def exact_velocity(msh: Any) -> Any:
    """The divergence-free velocity of the manufactured solution on ``msh``, as UFL: ``1`` in 1D,
    cellular flows with ``b·n = 0`` on the walls in 2D and 3D."""
    dim = msh.topology.dim
    x = ufl.SpatialCoordinate(msh)
    s = [ufl.sin(ufl.pi * x[i]) for i in range(dim)]
    c = [ufl.cos(ufl.pi * x[i]) for i in range(dim)]
    if dim == 1:
        return ufl.as_vector([fem.Constant(msh, 1.0)])
    if dim == 2:
        return ufl.as_vector([s[0] * c[1], -c[0] * s[1]])
    return ufl.as_vector([s[0] * (c[1] - c[2]), s[1] * (c[2] - c[0]), s[2] * (c[0] - c[1])])


def run_supg_crank_nicolson(
    b: fem.Function,
    eps: float,
    tau: float,
    steps: int,
    *,
    initial: Callable[[fem.Function, GridSampler | None], None],
    on_step: Callable[[int, fem.Function, GridSampler | None], None],
    grid: Grid | None = None,
    source: list[tuple[Any, Any, Callable[[float], float]]] | None = None,
    stats: SolveStats | None = None,
) -> str:
    """SUPG Crank–Nicolson for advection–diffusion by the velocity ``b`` (a P1 vector function),
    zero total flux on the walls, P1 unknown on ``b``'s mesh.

    Args:
        eps, tau, steps: diffusivity, time step, number of steps.
        initial: sets the initial state ``u`` (given the grid sampler when ``grid`` is set).
        on_step: called after step ``n`` (and with ``n = 0`` for the initial state).
        source: separable terms ``f = Σ c_k(t) f_k(x)`` with wall fluxes ``Σ c_k(t) g_k(x)``, as
            (UFL ``f_k``, UFL ``g_k`` or None, callable ``c_k``).
        stats: receives dofs, steps, Krylov iterations and solve time.

    Returns the name of the linear solver used.
    """
    msh = b.function_space.mesh
    comm = msh.comm
    V = fem.functionspace(msh, ("Lagrange", 1))
    sampler = GridSampler(V, grid) if grid is not None else None
    u, v = ufl.TrialFunction(V), ufl.TestFunction(V)
    # Constants, not floats, so that one compiled form serves every ε and τ.
    eps_c, half_tau = fem.Constant(msh, eps), fem.Constant(msh, 0.5 * tau)
    h = ufl.CellDiameter(msh)
    delta = 1.0 / ufl.sqrt((2 * ufl.sqrt(ufl.dot(b, b)) / h) ** 2 + 9 * (4 * eps_c / h**2) ** 2)
    w = v + delta * ufl.dot(b, ufl.grad(v))
    dx, ds = ufl.dx(metadata=QUADRATURE), ufl.ds(metadata=QUADRATURE)
    mass = ufl.inner(u, w) * dx
    operator = (
        -ufl.inner(u * b, ufl.grad(v)) * dx
        + eps_c * ufl.inner(ufl.grad(u), ufl.grad(v)) * dx
        + ufl.div(b * u) * delta * ufl.dot(b, ufl.grad(v)) * dx
    )
    A = assemble_matrix(fem.form(mass + half_tau * operator))
    A.assemble()
    B = assemble_matrix(fem.form(mass - half_tau * operator))
    B.assemble()
    dofs = V.dofmap.index_map.size_global
    solver = choose_solver("nonsymmetric", msh.topology.dim, dofs)
    ksp = make_ksp(comm, A, solver, prefix=f"advection_diffusion_{id(A)}_")
    loads = []
    for f, g, c in source or []:
        form = ufl.inner(f, w) * dx + (0 if g is None else ufl.inner(g, v) * ds)
        load = assemble_vector(fem.form(form))
        load.ghostUpdate(addv=PETSc.InsertMode.ADD, mode=PETSc.ScatterMode.REVERSE)
        loads.append((load, c))

    uh = fem.Function(V)
    initial(uh, sampler)
    on_step(0, uh, sampler)
    rhs = A.createVecRight()
    x = uh.x.petsc_vec
    t0 = time.perf_counter()
    iterations = 0
    for n in range(1, steps + 1):
        B.mult(x, rhs)
        for load, c in loads:
            rhs.axpy(0.5 * tau * (c((n - 1) * tau) + c(n * tau)), load)
        iterations += solve_checked(ksp, rhs, x)
        uh.x.scatter_forward()
        on_step(n, uh, sampler)
    if stats is not None:
        stats.dofs, stats.steps = dofs, steps
        stats.krylov_iterations += iterations
        stats.solve_s += time.perf_counter() - t0
    for obj in (ksp, A, B, rhs, *(load for load, _ in loads)):
        obj.destroy()
    return solver
