r"""The FEM part of Navier–Stokes (:mod:`pdeladder.solvers.navier_stokes`): weak form, time
stepping and manufactured solution.

Weak form, Taylor–Hood P2–P1, semi-implicit BDF2 with step :math:`\tau`: find
:math:`(u^{n+1}, p^{n+1})` with :math:`u^{n+1} = 0` on the walls such that for all
:math:`(v, q)`

.. math::
    \tfrac{1}{2\tau}(3u^{n+1} - 4u^n + u^{n-1}, v) + c(u^*; u^{n+1}, v)
    + \nu (\nabla u^{n+1}, \nabla v) - (p^{n+1}, \nabla \cdot v) - (q, \nabla \cdot u^{n+1})
    = (f^{n+1}, v),

with the extrapolated advecting velocity :math:`u^* = 2u^n - u^{n-1}` (the first step is
implicit Euler with :math:`u^* = u^0`) and the skew-symmetric convection
:math:`c(w; u, v) = ((w \cdot \nabla) u, v) + \tfrac12 ((\nabla \cdot w)\, u, v)`, so
:math:`c(w; u, u) = 0` and the discrete kinetic energy (in the BDF2 norm) decays as in the
continuous problem at any Reynolds number and time step. The extrapolation makes each step one
linear saddle-point solve, second order in time, without Newton iterations or a CFL limit from
explicit convection. The matrix changes with :math:`u^*`, so it is reassembled in place each
step and solved by GMRES preconditioned with the LU factorization (MUMPS) of an earlier step's
matrix, refactorized when GMRES slows (:class:`~pdeladder.solvers.fem.LaggedFactorization`:
the step's time is a few triangular solves, not a factorization). The pressure is
fixed by pinning it at the origin and stored with zero mean.

The stored initial state is the discretely divergence-free L2 projection of :math:`\nabla \times
\psi_h` and the pressure consistent with it (from the momentum equation at :math:`t = 0`).
"""

from mpi4py import MPI  # first: the DOLFINx wheel loads libmpi through it

import functools
import math
import time
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
import ufl
from dolfinx import fem, la
from dolfinx.fem.petsc import (
    apply_lifting,
    assemble_matrix,
    assemble_vector,
    create_matrix,
    create_vector,
    set_bc,
)
from petsc4py import PETSc

from pdeladder.errors import SolveError
from pdeladder.solvers.family import MANUFACTURED_T_END, SolveStats
from pdeladder.solvers.fem import (
    GridSampler,
    LaggedFactorization,
    boundary_facets,
    box_mesh,
    choose_solver,
    grid_mesh,
    l2_norm,
    make_ksp,
    part_of,
    solve_checked,
    taylor_hood,
)
from pdeladder.solvers.grid import Grid, SlabGrid
from pdeladder.solvers.navier_stokes import NavierStokes, NavierStokesParams
from pdeladder.solvers.random_fields import gaussian_random_field, wall_bubble
from pdeladder.solvers.stepping import TimeStepper


def convection(w: Any, u: Any, v: Any) -> Any:
    """The skew-symmetric convection form ``((w·∇)u, v) + ½((∇·w) u, v)``; zero for ``v = u``
    when ``u`` vanishes on the boundary."""
    return (
        ufl.inner(ufl.dot(ufl.grad(u), w), v) * ufl.dx + 0.5 * ufl.div(w) * ufl.inner(u, v) * ufl.dx
    )


class TaylorHoodFlow(TimeStepper):
    """Taylor–Hood (P2–P1) semi-implicit BDF2 for incompressible Navier–Stokes on ``msh``.

    The state ``(u^n, p^n)`` lives in :attr:`state`; :meth:`step` advances it by one step
    ``tau`` (the first one by implicit Euler), :meth:`~TimeStepper.run` steps it on. Walls are no-slip or take the velocity ``wall``;
    the pressure is pinned at the origin (:meth:`pressure` returns it with zero mean).

    Args:
        nu: kinematic viscosity.
        tau: time step.
        t: the time that the UFL expressions ``source`` and ``wall`` depend on; :meth:`step`
            sets it to the new time before assembling.
        source: body force, a UFL vector expression (``None``: no force).
        wall: wall velocity, a UFL vector expression (``None``: no-slip).
    """

    def __init__(
        self,
        msh: Any,
        nu: float,
        tau: float,
        *,
        t: fem.Constant | None = None,
        source: Any = None,
        wall: Any = None,
    ):
        super().__init__(msh, tau)
        dim = msh.topology.dim
        self.W, self.V, self.u_dofs, self.Q, self.p_dofs = taylor_hood(msh)
        self.dofs = self.W.dofmap.index_map.size_global * self.W.dofmap.index_map_bs
        # ∫ φ_i dx for the pressure basis: the mean of p is their dot product with its dofs.
        self._p_weights = fem.assemble_vector(fem.form(ufl.TestFunction(self.Q) * ufl.dx))
        self._p_weights.scatter_reverse(la.InsertMode.add)
        self.state = fem.Function(self.W)
        self.nu = fem.Constant(msh, PETSc.ScalarType(nu))
        self.t = t
        self._wall = fem.Function(self.V)
        self._wall_expr = (
            None if wall is None else fem.Expression(wall, self.V.element.interpolation_points)
        )
        walls = fem.locate_dofs_topological((self.W.sub(0), self.V), dim - 1, boundary_facets(msh))
        origin = fem.locate_dofs_geometrical(
            (self.W.sub(1), self.Q), lambda y: np.all(np.isclose(y, 0.0), axis=0)
        )
        self.bcs = [
            fem.dirichletbc(self._wall, walls, self.W.sub(0)),
            fem.dirichletbc(fem.Function(self.Q), origin, self.W.sub(1)),
        ]

        u, p = ufl.TrialFunctions(self.W)
        v, q = ufl.TestFunctions(self.W)
        # BDF2 with the advecting velocity extrapolated, 2 u^n - u^{n-1}; the first step is
        # implicit Euler. Coefficients: α0 u^{n+1} - α1 u^n - α2 u^{n-1}, extrapolation e.
        self._previous = fem.Function(self.W)  # u^{n-1}
        u_n, u_nm1 = ufl.split(self.state)[0], ufl.split(self._previous)[0]
        self._alpha = [fem.Constant(msh, PETSc.ScalarType(c)) for c in (1.0, 1.0, 0.0)]
        self._extrapolate = fem.Constant(msh, PETSc.ScalarType(0.0))
        w = (1 + self._extrapolate) * u_n - self._extrapolate * u_nm1
        inv_tau = fem.Constant(msh, PETSc.ScalarType(1.0 / tau))
        self._saddle = -p * ufl.div(v) * ufl.dx - q * ufl.div(u) * ufl.dx
        self._a = fem.form(
            inv_tau * self._alpha[0] * ufl.inner(u, v) * ufl.dx
            + convection(w, u, v)
            + self.nu * ufl.inner(ufl.grad(u), ufl.grad(v)) * ufl.dx
            + self._saddle
        )
        rhs = inv_tau * ufl.inner(self._alpha[1] * u_n + self._alpha[2] * u_nm1, v) * ufl.dx
        if source is not None:
            rhs += ufl.inner(source, v) * ufl.dx
        self._L = fem.form(rhs)
        self._A = self.own(create_matrix(self._a))
        self._b = self.own(create_vector(self.W))
        self._lagged: LaggedFactorization | None = None  # the steps' solver, from the first
        self.steps_taken = 0
        self.solver = choose_solver("saddle", dim, self.dofs)
        self.prefix = f"navier_stokes_{id(self)}_"

    def _ksp_for(self, A: Any, prefix: str) -> Any:
        """A KSP of :attr:`solver` on ``A``, its factorization by MUMPS, which pivots (PETSc's
        own LU does not, and the saddle point's zero pressure block needs it)."""
        opts = PETSc.Options()
        opts[f"{prefix}pc_factor_mat_solver_type"] = "mumps"
        try:
            return make_ksp(self.msh.comm, A, self.solver, prefix)
        finally:
            opts.delValue(f"{prefix}pc_factor_mat_solver_type")

    def _b_assemble(self, L: Any, a: Any) -> None:
        """Assemble the right-hand side ``L`` into the work vector, lifted by the form ``a``."""
        with self._b.localForm() as local:
            local.set(0.0)
        assemble_vector(self._b, L)
        apply_lifting(self._b, [a], bcs=[self.bcs])
        self._b.ghostUpdate(addv=PETSc.InsertMode.ADD, mode=PETSc.ScatterMode.REVERSE)
        set_bc(self._b, self.bcs)

    def _solve_into(self, solve: Callable[[Any, Any], int], x: fem.Function) -> int:
        """``solve(b, x)`` with the assembled work vector ``b`` into ``x``, from the guess in
        ``x``; returns the iteration count."""
        iterations = solve(self._b, x.x.petsc_vec)
        x.x.scatter_forward()
        return iterations

    def step(self, n: int) -> int:
        """Advance the state from ``t = (n - 1) tau`` to ``n tau``; returns the iterations."""
        if self.t is not None:
            self.t.value = n * self.tau
        if self._wall_expr is not None:
            self._wall.interpolate(self._wall_expr)
        if self.steps_taken == 1:  # from the second step on: BDF2
            for constant, value in zip(self._alpha, (1.5, 2.0, -0.5), strict=True):
                constant.value = value
            self._extrapolate.value = 1.0
        self._A.zeroEntries()
        assemble_matrix(self._A, self._a, bcs=self.bcs)
        self._A.assemble()
        if self._lagged is None:
            self._lagged = LaggedFactorization(self.own(self._ksp_for(self._A, self.prefix)))
        self._b_assemble(self._L, self._a)
        self._previous.x.array[:] = self.state.x.array
        iterations = self._solve_into(self._lagged.solve, self.state)
        self.steps_taken += 1
        return iterations

    def start_from_potential(
        self, potential: np.ndarray, fine: Grid, stats: SolveStats | None = None
    ) -> None:
        """Set the state from a stream function (2D) or vector potential (3D) given on ``fine``,
        the grid whose points are the P2 dofs, ``(1 or 3, X, Y, Z)``: the velocity is the
        discretely divergence-free L2 projection of its curl, scaled to unit rms speed, and the
        pressure the one consistent with it. Walls must be at rest."""
        t0 = time.perf_counter()
        dim = self.msh.topology.dim
        shape = () if dim == 2 else (3,)
        psi = fem.Function(fem.functionspace(self.msh, ("Lagrange", 2, shape)))
        GridSampler(psi.function_space, fine).from_grid(psi, potential)
        curl = ufl.as_vector([psi.dx(1), -psi.dx(0)]) if dim == 2 else ufl.curl(psi)
        # Both solves share the matrix [[M, -B^T], [-B, 0]]: (u, v) - (p, div v) - (q, div u).
        u, v = ufl.TrialFunctions(self.W)[0], ufl.TestFunctions(self.W)[0]
        mass = fem.form(ufl.inner(u, v) * ufl.dx + self._saddle)
        M = assemble_matrix(mass, bcs=self.bcs)
        M.assemble()
        ksp = self._ksp_for(M, f"{self.prefix}mass_")
        solve = functools.partial(solve_checked, ksp)
        try:
            self._b_assemble(fem.form(ufl.inner(curl, v) * ufl.dx), mass)
            iterations = self._solve_into(solve, self.state)
            energy = fem.form(ufl.inner(self.velocity(), self.velocity()) * ufl.dx)
            rms = math.sqrt(self.msh.comm.allreduce(fem.assemble_scalar(energy), op=MPI.SUM))
            if rms == 0.0:
                raise SolveError("the initial velocity is zero")
            self.state.x.array[self.u_dofs] /= rms
            # The pressure at t = 0: the momentum equation with the acceleration a unknown,
            # (a, v) - (p, div v) = -c(u; u, v) - ν(∇u, ∇v), (q, div a) = 0.
            w = ufl.split(self.state)[0]
            momentum = -convection(w, w, v) - self.nu * ufl.inner(ufl.grad(w), ufl.grad(v)) * ufl.dx
            acceleration = fem.Function(self.W)
            self._b_assemble(fem.form(momentum), mass)
            iterations += self._solve_into(solve, acceleration)
            self.state.x.array[self.p_dofs] = acceleration.x.array[self.p_dofs]
        finally:
            ksp.destroy()
            M.destroy()
        if stats is not None:
            stats.krylov_iterations += iterations
            stats.solve_s += time.perf_counter() - t0

    def set_velocity(self, expr: Any) -> None:
        """Set the velocity to the P2 interpolant of a UFL expression (pressure untouched)."""
        u = fem.Function(self.V)
        u.interpolate(fem.Expression(expr, self.V.element.interpolation_points))
        self.state.x.array[self.u_dofs] = u.x.array

    def velocity(self) -> fem.Function:
        """A copy of ``u^n`` in the P2 vector space :attr:`V`."""
        return part_of(self.state, self.V, self.u_dofs)

    def pressure(self) -> fem.Function:
        """A copy of ``p^n`` in the P1 space :attr:`Q`, shifted to zero mean (unit box)."""
        p = part_of(self.state, self.Q, self.p_dofs)
        owned = self.Q.dofmap.index_map.size_local
        local = np.dot(self._p_weights.array[:owned], p.x.array[:owned])
        p.x.array[:] -= self.msh.comm.allreduce(local, op=MPI.SUM)
        return p

    def sample(self, velocity: GridSampler, pressure: GridSampler) -> np.ndarray:
        """The state on the grid: ``(dim + 1, X, Y, Z)``, velocity components then pressure."""
        return np.concatenate(
            [velocity.to_grid(self.velocity()), pressure.to_grid(self.pressure())]
        )


def random_potential(
    grid: Grid, length_scale: float, rng: np.random.Generator, comm: MPI.Comm | None = None
) -> tuple[np.ndarray, Grid]:
    """A random stream function (2D) or vector potential (3D) ``ξ w²`` (``w`` the
    :func:`wall_bubble`) whose curl vanishes on the walls, on the grid of twice the resolution
    of ``grid``'s mesh: its points are exactly the P2 dofs of that mesh (vertices and edge
    midpoints). On a :class:`SlabGrid` (``comm`` its ranks) the fine grid has the slabs of twice
    the rows, and the potential only the rows it draws (:meth:`Grid.drawn_rows`).

    Returns the potential ``(1 or 3, X, Y, Z)`` and that grid.
    """
    fine = Grid(grid.dim, 2 * grid.cells + 1, 1, 0.0, grid.lengths)
    if isinstance(grid, SlabGrid):
        n = fine.resolution
        slabs = tuple((2 * lo, min(2 * hi, n)) for lo, hi in grid.slabs)
        fine = SlabGrid.of(fine, slabs)
    rows = fine.drawn_rows(comm)
    envelope = wall_bubble(fine, rows) ** 2
    components = 1 if grid.dim == 2 else 3
    potential = np.stack(
        [
            envelope * gaussian_random_field(fine.shape, length_scale, rng, rows=rows)
            for _ in range(components)
        ]
    )
    return potential, fine


def initial_fields(
    family: NavierStokes, params: NavierStokesParams, grid: Grid, rng: np.random.Generator
) -> np.ndarray:
    """:meth:`Family.initial_fields` of :class:`NavierStokes`."""
    flow, _ = start(params, grid, rng, MPI.COMM_SELF)
    with flow:
        return flow.sample(GridSampler(flow.V, grid), GridSampler(flow.Q, grid))


def start(
    params: NavierStokesParams,
    grid: Grid,
    rng: np.random.Generator,
    comm: MPI.Comm,
    stats: SolveStats | None = None,
) -> tuple["TaylorHoodFlow", int]:
    """The sample's flow at ``t = 0`` on the mesh of ``grid`` over ``comm``, its random
    initial state drawn from ``rng``; returns it and the internal steps per stored snapshot
    (:meth:`Grid.internal_steps`), which set its time step."""
    potential, fine = random_potential(grid, params.length_scale, rng, comm)
    every = grid.internal_steps()
    steps = every * (grid.snapshots - 1)
    flow = TaylorHoodFlow(grid_mesh(comm, grid), 1.0 / params.reynolds, grid.t_end / steps)
    try:
        flow.start_from_potential(potential, fine, stats)
    except BaseException:
        flow.close()
        raise
    return flow, every


def solve(
    family: NavierStokes,
    params: NavierStokesParams,
    grid: Grid,
    rng: np.random.Generator,
    comm: MPI.Comm,
    stats: SolveStats,
) -> tuple[np.ndarray, dict[str, Any]]:
    """:meth:`Family.solve` of :class:`NavierStokes`."""
    flow, every = start(params, grid, rng, comm, stats)
    steps = every * (grid.snapshots - 1)
    with flow:
        samplers = GridSampler(flow.V, grid), GridSampler(flow.Q, grid)

        def frame(n: int, state: fem.Function) -> np.ndarray:
            values = flow.sample(*samplers)
            if n and not samplers[0].on_all_ranks(bool(np.all(np.isfinite(values)))):
                raise SolveError(f"non-finite velocity at step {n} of {steps}")
            return values

        fields = flow.sampled(steps, every, frame, stats)  # (T, dim + 1, X, Y, Z)
        return fields, flow.provenance(
            grid,
            element="Taylor–Hood P2–P1 (velocity sampled at P2 vertex dofs)",
            time_scheme="semi-implicit BDF2 (extrapolated advecting velocity, skew-symmetric)",
            linear_solver=f"{flow.solver} (MUMPS), refactorized when GMRES slows",
            initial_condition="divergence-free L2 projection of curl(ξ w²)",
        )


def manufactured_error(
    dim: int, cells: int, steps: int, comm: MPI.Comm, study: Literal["space", "time"]
) -> float:
    """:meth:`Family.manufactured_error` of :class:`NavierStokes`."""
    # u = g(t) U, p = g(t) P, f from UFL, walls at the exact velocity.
    # Space: g = 1 (steady), U = curl(ψ), ψ = Π sin²(π x_i) / π (times (1, 1, 1) in 3D),
    # P = Π cos(π x_i); the scheme relaxes to the discrete steady solution, whose error is
    # spatial only. Time: g = 1 + sin(2t) with U = (x², -2xy) or (y², z², x²) and P = Σ x_i,
    # which P2-P1 represent exactly, so the error is temporal only (U's convection is not a
    # gradient, so the lagged advection acts on the velocity).
    nu, t_end = 0.1, MANUFACTURED_T_END
    msh = box_mesh(comm, dim, cells)
    x = ufl.SpatialCoordinate(msh)
    t = fem.Constant(msh, PETSc.ScalarType(0.0))
    if study == "space":
        g, dg = 1.0, 0.0
        psi = math.prod(ufl.sin(ufl.pi * x[i]) ** 2 for i in range(dim)) / ufl.pi
        U = (
            ufl.as_vector([psi.dx(1), -psi.dx(0)])
            if dim == 2
            else ufl.curl(ufl.as_vector([psi, psi, psi]))
        )
        P = math.prod(ufl.cos(ufl.pi * x[i]) for i in range(dim))
    else:
        g, dg = 1.0 + ufl.sin(2 * t), 2 * ufl.cos(2 * t)
        U = (
            ufl.as_vector([x[0] ** 2, -2 * x[0] * x[1]])
            if dim == 2
            else ufl.as_vector([x[1] ** 2, x[2] ** 2, x[0] ** 2])
        )
        P = sum(x[i] for i in range(dim))
    f = dg * U + g**2 * ufl.dot(ufl.grad(U), U) - nu * g * ufl.div(ufl.grad(U)) + g * ufl.grad(P)
    with TaylorHoodFlow(msh, nu, t_end / steps, t=t, source=f, wall=g * U) as flow:
        flow.set_velocity(g * U)  # t = 0
        flow.advance(steps)
        return l2_norm(flow.velocity() - g * U)  # t = t_end
