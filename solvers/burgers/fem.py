r"""The FEM part of :mod:`pdeladder.solvers.burgers`: weak form, time stepping and manufactured
solution.

Weak form, semi-implicit BDF2, step :math:`\tau`: the advecting velocity is extrapolated,
:math:`w = 2u^n - u^{n-1}`, so each step is one linear solve: find :math:`u^{n+1} \in V_h`
(vector P1, zero on the walls) such that

.. math::
    \tfrac{1}{\tau}\left(\tfrac32 u^{n+1} - 2u^n + \tfrac12 u^{n-1}, v\right)
    + ((w \cdot \nabla) u^{n+1}, v) + \nu (\nabla u^{n+1}, \nabla v) = (f^{n+1}, v)
    \quad \forall v \in V_h,

started by one semi-implicit Euler step (:math:`w = u^0`). Second order in time with one linear
solve per step, where Newton would need several linear solves and Jacobian assemblies; the
extrapolated advection is accurate while the step resolves the advective time scale,
:math:`\tau \le h / \max|u_0|`, which the samples keep. The mass and stiffness matrices are
assembled once; each step assembles only the advection matrix :math:`((w \cdot \nabla) u, v)`,
adds them into one matrix of fixed sparsity and solves with a Krylov solver set up once.
"""

from mpi4py import MPI

import math
import time
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
import ufl
from dolfinx import fem
from dolfinx.fem.petsc import assemble_matrix, assemble_vector, create_matrix, create_vector, set_bc
from petsc4py import PETSc

from pdeladder.errors import SolveError
from pdeladder.solvers.burgers import Burgers, BurgersParams
from pdeladder.solvers.family import SolveStats
from pdeladder.solvers.fem import (
    GridSampler,
    boundary_facets,
    box_mesh,
    grid_mesh,
    make_ksp,
    solve_checked,
)
from pdeladder.solvers.grid import Grid


def solve(
    family: Burgers,
    params: BurgersParams,
    grid: Grid,
    rng: np.random.Generator,
    comm: MPI.Comm,
    stats: SolveStats,
) -> tuple[np.ndarray, dict[str, Any]]:
    """:meth:`Family.solve` of :class:`Burgers`."""
    u0 = family.initial_fields(params, grid, rng)
    speed = float(np.sqrt(np.sum(u0**2, axis=0)).max())
    # At least one step per grid spacing of time (as heat) and an advective CFL number <= 1.
    tau_max = grid.h * min(grid.t_end, 1.0 / speed) if speed > 0 else grid.h * grid.t_end
    every = max(1, math.ceil(grid.dt / tau_max))
    steps = every * (grid.snapshots - 1)
    frames = []

    def keep(n: int, u: fem.Function, sampler: GridSampler | None) -> None:
        if n % every:
            return
        frame = sampler.to_grid(u)
        # The maximum principle bounds |u| by max |u0|: growth beyond it is an instability.
        if not sampler.max(np.max(np.sqrt(np.sum(frame**2, axis=0)))) <= 2 * speed + 1e-12:
            raise SolveError(f"blow-up at t = {n * grid.t_end / steps:.3g}: |u| > 2 max|u0|")
        frames.append(frame)

    msh = grid_mesh(comm, grid)
    solver = run_semi_implicit_bdf2(
        msh,
        params.viscosity,
        grid.t_end / steps,
        steps,
        initial=lambda u, sampler: sampler.from_grid(u, u0),
        on_step=keep,
        grid=grid,
        stats=stats,
    )
    fields = np.stack(frames).astype(np.float32)  # (T, dim, X, Y, Z)
    return fields, {
        "element": "vector P1",
        "time_scheme": "semi-implicit BDF2 (extrapolated advecting velocity), BDF1 start",
        "time_step": grid.t_end / steps,
        "mesh": f"{msh.topology.cell_name()} {grid.cells}^{grid.dim}",
        "linear_solver": solver,
    }


def manufactured_error(
    dim: int, cells: int, steps: int, comm: MPI.Comm, study: Literal["space", "time"]
) -> float:
    """:meth:`Family.manufactured_error` of :class:`Burgers`."""
    # u = g(t) φ(x), φ_i = Π_j sin(π (1 + δ_ij) x_j) (zero on the walls, a different shape per
    # component), with the load (∂_t u + (u·∇)u, v) + ν (∇u, ∇v), i.e. (f, v) for
    # f = ∂_t u + (u·∇)u − νΔu. Space study: g = 1 (steady, so the time scheme is exact).
    # Time study: g = cos(2t) and φ replaced by its P1 interpolant, which makes g φ_h the
    # exact solution of the semi-discrete problem: the error is the time error alone.
    nu, t_end = 0.1, 1.0
    msh = box_mesh(comm, dim, cells)
    x = ufl.SpatialCoordinate(msh)
    t = fem.Constant(msh, 0.0)
    phi = ufl.as_vector(
        [math.prod(ufl.sin(ufl.pi * (1 + (i == j)) * x[j]) for j in range(dim)) for i in range(dim)]
    )
    if study == "space":
        g, dg = 1.0, 0.0
    else:
        V = fem.functionspace(msh, ("Lagrange", 1, (dim,)))
        phi_h = fem.Function(V)
        phi_h.interpolate(fem.Expression(phi, V.element.interpolation_points))
        phi, g, dg = phi_h, ufl.cos(2 * t), -2 * ufl.sin(2 * t)
    exact = g * phi

    def load(v: ufl.Argument) -> ufl.Form:
        dx = ufl.dx(metadata={"quadrature_degree": 4})  # UFL's sin/cos estimate is far higher
        return (
            ufl.inner(dg * phi + ufl.grad(exact) * exact, v) * dx
            + nu * ufl.inner(ufl.grad(exact), ufl.grad(v)) * dx
        )

    state = {}
    run_semi_implicit_bdf2(
        msh,
        nu,
        t_end / steps,
        steps,
        initial=lambda u, sampler: u.interpolate(
            fem.Expression(exact, u.function_space.element.interpolation_points)
        ),
        source=(load, t),
        on_step=lambda n, u, sampler: state.update(u=u) if n == steps else None,
    )
    e = state["u"] - exact  # t holds t_end after the last step
    dx = ufl.dx(metadata={"quadrature_degree": 6})
    return math.sqrt(comm.allreduce(fem.assemble_scalar(fem.form(ufl.inner(e, e) * dx))))


def run_semi_implicit_bdf2(
    msh: Any,
    nu: float,
    tau: float,
    steps: int,
    *,
    initial: Callable[[fem.Function, GridSampler | None], None],
    on_step: Callable[[int, fem.Function, GridSampler | None], None],
    grid: Grid | None = None,
    source: tuple[Callable[[ufl.Argument], ufl.Form], fem.Constant] | None = None,
    stats: SolveStats | None = None,
) -> str:
    """Semi-implicit BDF2 for viscous Burgers with no-slip walls on ``msh`` (vector P1).

    The mass matrix ``M`` and stiffness matrix ``K`` are assembled once; each step assembles the
    advection matrix ``N(w)`` and solves ``(a0 / tau) M + nu K + N(w)``, with ``a0 = 1`` for the
    first (Euler) step and ``3/2`` after.

    Args:
        nu, tau, steps: viscosity, time step, number of steps.
        initial: sets the initial velocity ``u`` (given the grid sampler when ``grid`` is set).
        on_step: called after step ``n`` (and with ``n = 0`` for the initial state) with
            ``u^n``.
        source: the load of a source, ``v -> (f, v)`` as a UFL form, and the time constant it
            depends on, set to ``t^{n+1}`` before step ``n + 1``'s load is assembled.
        stats: receives dofs, steps, Krylov iterations and solve time.

    Returns the name of the linear solver used.
    """
    comm, dim = msh.comm, msh.topology.dim
    V = fem.functionspace(msh, ("Lagrange", 1, (dim,)))
    sampler = GridSampler(V, grid) if grid is not None else None
    walls = fem.locate_dofs_topological(V, dim - 1, boundary_facets(msh))
    bcs = [fem.dirichletbc(fem.Function(V), walls)]  # zero velocity

    u, v = ufl.TrialFunction(V), ufl.TestFunction(V)
    u_n, u_nm1, u_new = fem.Function(V), fem.Function(V), fem.Function(V)
    w = fem.Function(V)  # advecting velocity: u^0, then 2 u^n - u^{n-1}
    # M and K with zero rows and columns on the walls; N carries the unit diagonal there.
    M = assemble_matrix(fem.form(ufl.inner(u, v) * ufl.dx), bcs=bcs, diag=0.0)
    K = assemble_matrix(fem.form(ufl.inner(ufl.grad(u), ufl.grad(v)) * ufl.dx), bcs=bcs, diag=0.0)
    M.assemble()
    K.assemble()
    advection = fem.form(ufl.inner(ufl.grad(u) * w, v) * ufl.dx)
    A = create_matrix(advection)
    load = None
    if source is not None:
        load = fem.form(source[0](v))
        f = create_vector(V)
    history = fem.Function(V)  # ((1 + bdf2) u^n - bdf2/2 u^{n-1}) / tau
    b = create_vector(V)
    dofs = V.dofmap.index_map.size_global * V.dofmap.index_map_bs
    # With tau <= h / max|u| the matrix is dominated by its mass and diffusion parts and GMRES +
    # ILU(0) needs a few iterations, far cheaper than refactorizing an LU every step (which
    # `choose_solver("nonsymmetric", ...)` would pick for small problems). PETSc's ILU is serial
    # only, so in parallel the step is a MUMPS LU.
    solver = "gmres_ilu" if comm.size == 1 else "lu"
    ksp = None

    initial(u_n, sampler)
    on_step(0, u_n, sampler)
    t0 = time.perf_counter()
    iterations = 0
    try:
        for n in range(1, steps + 1):
            bdf2 = 0.0 if n == 1 else 1.0
            w.x.array[:] = (1 + bdf2) * u_n.x.array - bdf2 * u_nm1.x.array
            A.zeroEntries()
            assemble_matrix(A, advection, bcs=bcs)
            A.assemble()
            A.axpy((1 + bdf2 / 2) / tau, M, PETSc.Mat.Structure.SAME_NONZERO_PATTERN)
            A.axpy(nu, K, PETSc.Mat.Structure.SAME_NONZERO_PATTERN)
            history.x.array[:] = ((1 + bdf2) * u_n.x.array - bdf2 / 2 * u_nm1.x.array) / tau
            M.mult(history.x.petsc_vec, b)  # (+ the source's load)
            if load is not None:
                source[1].value = n * tau
                with f.localForm() as local:
                    local.set(0.0)
                assemble_vector(f, load)
                f.ghostUpdate(addv=PETSc.InsertMode.ADD, mode=PETSc.ScatterMode.REVERSE)
                b.axpy(1.0, f)
            set_bc(b, bcs)
            if ksp is None:  # set up once, reused as A's values change
                ksp = make_ksp(comm, A, solver, prefix=f"burgers_{id(A)}_")
            iterations += solve_checked(ksp, b, u_new.x.petsc_vec)
            u_new.x.scatter_forward()
            u_nm1.x.array[:] = u_n.x.array
            u_n.x.array[:] = u_new.x.array
            on_step(n, u_n, sampler)
    finally:
        if stats is not None:
            stats.dofs, stats.steps = dofs, steps
            stats.krylov_iterations += iterations
            stats.solve_s += time.perf_counter() - t0
        for obj in (A, M, K, b, *(() if load is None else (f,))):
            obj.destroy()
        if ksp is not None:
            ksp.destroy()
    return solver
