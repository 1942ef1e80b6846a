r"""The FEM part of the channel wake (:mod:`pdeladder.solvers.channel_wake`): time stepping,
forces, a sample's solve and the manufactured solution.

Weak form, Taylor–Hood P2–P1 on the steady family's mesh and spaces
(:class:`~pdeladder.solvers.channel_flow.fem.SteadyFlow`), semi-implicit BDF2 with step
:math:`\tau`: find :math:`(u^{n+1}, p^{n+1})`, :math:`u^{n+1}` the inflow at the inlet and 0
on the walls and obstacles, such that for all :math:`(v, q)` vanishing there

.. math::
    R_\tau(u^{n+1}, p^{n+1}; v) - (q, \nabla \cdot u^{n+1}) = 0, \qquad
    R_\tau(u, p; v) = \tfrac{1}{2\tau}(3u - 4u^n + u^{n-1}, v) + c(u^*; u, v)
    + \nu (\nabla u, \nabla v) - (p, \nabla \cdot v),

    c(w; u, v) = ((w \cdot \nabla) u, v)
    - \tfrac12 \int_{\Gamma_\text{out}} \min(w \cdot n, 0)\, u \cdot v \, ds,

with the extrapolated advecting velocity :math:`u^* = 2u^n - u^{n-1}` (the first step is
implicit Euler with :math:`u^* = u^0`): one linear saddle-point solve per step, second order
in time. The outlet term (the backflow term of Bazilevs et al., Comput. Methods Appl. Mech.
Engrg. 198 (2009) 3534) vanishes where the flow leaves the channel, so the natural condition at
the outlet stays the do-nothing :math:`\nu \partial_n u - p n = 0` of the steady family and
of the DFG benchmarks; where a vortex leaving the channel turns the flow back in, it removes
the kinetic energy that the convection would bring in through the outlet. Without it the
17-point samples at Re 300 diverged. (Temam's term :math:`\tfrac12((\nabla \cdot w) u, v)`
would make the convection energy-neutral in the interior too, but cost the manufactured
solution its clean second order in time: rates 1.76, 1.73, 2.48 against 1.95, 1.99, 2.00.)

Each step's matrix is reassembled in place and solved by GMRES preconditioned with a lagged LU
factorization (MUMPS; :class:`~pdeladder.solvers.fem.LaggedFactorization`), as Navier–Stokes in
the box does.

Forces on an obstacle :math:`S` are the steady family's volume formulation with the step's
time derivative: :math:`F \cdot e_k = -R_\tau(u^{n+1}, p^{n+1}; \psi_k)`, :math:`\psi_k` the
P2 function that is :math:`e_k` at the dofs on :math:`S` and 0 elsewhere; one vector assembly
per step gives every obstacle's force.

A sample (:func:`solve`) meshes its drawn domain as the steady family does (cells of the grid
spacing :math:`h`, :math:`h/4` on the obstacles, curved onto them), starts from the steady flow
at :data:`~pdeladder.solvers.channel_flow.fem.FIRST_REYNOLDS` (smooth, divergence-free, with
the inflow already on), steps :func:`spin_up_steps` unstored steps at the sample's viscosity,
then stores a snapshot every :func:`steps_per_snapshot` steps.
"""

from mpi4py import MPI  # first: the DOLFINx wheel loads libmpi through it

import math
import time
from collections.abc import Callable
from typing import Any, Literal

import gmsh
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

from pdeladder.errors import UserInputError
from pdeladder.solvers.channel_flow import LENGTHS, Flow, draw_domain, fluid_mask, viscosity
from pdeladder.solvers.channel_flow.fem import FIRST_REYNOLDS, MANUFACTURED_DOMAIN, SteadyFlow
from pdeladder.solvers.channel_wake import (
    COURANT,
    ChannelWake,
    ChannelWakeParams,
    convective_time,
    force_summary,
)
from pdeladder.solvers.family import MANUFACTURED_T_END, SolveStats
from pdeladder.solvers.fem import LaggedFactorization, choose_solver, l2_norm, make_ksp
from pdeladder.solvers.geometry.mesh import INLET, OUTLET, WALLS, domain_mesh
from pdeladder.solvers.grid import Grid, SlabGrid
from pdeladder.solvers.stepping import TimeStepper


class WakeFlow(TimeStepper):
    """Semi-implicit BDF2 for the unsteady flow on the mesh, spaces, viscosity and state of
    ``steady`` (its :attr:`~SteadyFlow.state` is stepped in place, so its ``velocity()``,
    ``pressure()`` and ``on_grid()`` read the current flow).

    Args:
        tau: time step (s).
        speed: the inflow's factor at time ``t`` (its maximum is ``speed(t)`` times the flow's
            ``inflow_speed``); None: 1 at all times.
        exact: a manufactured solution ``(U, P, dU/dt)`` (UFL expressions in ``t``) in place
            of the channel's conditions: ``U`` on the inlet, walls and obstacles, its traction
            ``ν ∂_n U - P n`` at the outlet and the body force that makes it a solution.
        t: the constant that ``exact`` depends on; each step sets it to the new time.
    """

    def __init__(
        self,
        steady: SteadyFlow,
        tau: float,
        *,
        speed: Callable[[float], float] | None = None,
        exact: tuple[Any, Any, Any] | None = None,
        t: fem.Constant | None = None,
    ):
        msh = steady.dm.mesh
        super().__init__(msh, tau)
        self.steady, self.speed, self.t = steady, speed, t
        W, V, dm = steady.W, steady.V, steady.dm
        self.dofs, self.state = steady.dofs, steady.state
        fdim = msh.topology.dim - 1

        def dofs(tags: tuple[int, ...]) -> np.ndarray:
            facets = np.concatenate([dm.facets.find(tag) for tag in tags])
            return fem.locate_dofs_topological((W.sub(0), V), fdim, facets)

        no_slip = (WALLS, *dm.obstacle_tags())
        self._wall = fem.Function(V)  # the inflow (exact: U) on the walls it sets
        if exact is None:
            height = dm.domain.lengths[1]
            self._profile = fem.Function(V)
            self._profile.interpolate(
                lambda x: np.stack(
                    [4 * steady.flow.inflow_speed * x[1] * (height - x[1]) / height**2, 0 * x[0]]
                )
            )
            self._wall.x.array[:] = self._profile.x.array
            self.bcs = [
                fem.dirichletbc(self._wall, dofs((INLET,)), W.sub(0)),
                fem.dirichletbc(fem.Function(V), dofs(no_slip), W.sub(0)),
            ]
            self._wall_expr = None
        else:
            self.bcs = [fem.dirichletbc(self._wall, dofs((INLET, *no_slip)), W.sub(0))]
            self._wall_expr = fem.Expression(exact[0], V.element.interpolation_points)

        u, p = ufl.TrialFunctions(W)
        v, q = ufl.TestFunctions(W)
        # BDF2: α0 u^{n+1} - α1 u^n - α2 u^{n-1}, advecting velocity (1 + e) u^n - e u^{n-1};
        # the first step is implicit Euler (α = 1, 1, 0; e = 0).
        self._previous, self._older = fem.Function(W), fem.Function(W)  # u^n, u^{n-1}
        u_n, u_nm1 = ufl.split(self._previous)[0], ufl.split(self._older)[0]
        self._alpha = [fem.Constant(msh, PETSc.ScalarType(c)) for c in (1.0, 1.0, 0.0)]
        self._extrapolate = fem.Constant(msh, PETSc.ScalarType(0.0))
        w = (1 + self._extrapolate) * u_n - self._extrapolate * u_nm1
        inv_tau = fem.Constant(msh, PETSc.ScalarType(1.0 / tau))
        history = self._alpha[1] * u_n + self._alpha[2] * u_nm1
        nu = steady.nu

        n = ufl.FacetNormal(msh)
        ds = ufl.Measure("ds", msh, subdomain_data=dm.facets)

        def residual(u: Any, p: Any, v: Any) -> Any:
            """``R_τ(u, p; v)`` less its history term."""
            return (
                inv_tau * self._alpha[0] * ufl.inner(u, v) * ufl.dx
                + ufl.inner(ufl.dot(ufl.grad(u), w), v) * ufl.dx
                - 0.5 * ufl.min_value(ufl.dot(w, n), 0.0) * ufl.inner(u, v) * ds(OUTLET)
                + nu * ufl.inner(ufl.grad(u), ufl.grad(v)) * ufl.dx
                - p * ufl.div(v) * ufl.dx
            )

        self._a = fem.form(residual(u, p, v) - q * ufl.div(u) * ufl.dx)
        rhs = inv_tau * ufl.inner(history, v) * ufl.dx
        if exact is not None:
            U, P, dU = exact
            force = dU + ufl.dot(ufl.grad(U), U) - nu * ufl.div(ufl.grad(U)) + ufl.grad(P)
            traction = nu * ufl.dot(ufl.grad(U), n) - P * n
            rhs += ufl.inner(force, v) * ufl.dx + ufl.inner(traction, v) * ds(OUTLET)
        self._L = fem.form(rhs)
        # R_τ of the new state against every P2 test function, for the forces
        u_new, p_new = ufl.split(self.state)
        psi = ufl.TestFunction(V)
        self._force = fem.form(
            residual(u_new, p_new, psi) - inv_tau * ufl.inner(history, psi) * ufl.dx
        )
        self._obstacle_dofs = [
            fem.locate_dofs_topological(V, fdim, dm.facets.find(tag)) for tag in dm.obstacle_tags()
        ]
        self._A = self.own(create_matrix(self._a))
        self._b = self.own(create_vector(W))
        self._lagged: LaggedFactorization | None = None
        self.steps_taken = 0
        self.solver = choose_solver("saddle", 2, self.dofs)
        self.prefix = f"channel_wake_{id(self)}_"

    def step(self, n: int) -> int:
        """Advance the state from ``t = (n - 1) τ`` to ``n τ``; returns the GMRES iterations."""
        time_n = n * self.tau
        if self.t is not None:
            self.t.value = time_n
        if self._wall_expr is not None:
            self._wall.interpolate(self._wall_expr)
        elif self.speed is not None:
            self._wall.x.array[:] = self.speed(time_n) * self._profile.x.array
        if self.steps_taken == 1:  # from the second step on: BDF2
            for constant, value in zip(self._alpha, (1.5, 2.0, -0.5), strict=True):
                constant.value = value
            self._extrapolate.value = 1.0
        self._older.x.array[:] = self._previous.x.array
        self._previous.x.array[:] = self.state.x.array
        self._A.zeroEntries()
        assemble_matrix(self._A, self._a, bcs=self.bcs)
        self._A.assemble()
        if self._lagged is None:
            opts = PETSc.Options()  # MUMPS pivots: the zero pressure block needs it
            opts[f"{self.prefix}pc_factor_mat_solver_type"] = "mumps"
            try:
                ksp = self.own(make_ksp(self.msh.comm, self._A, self.solver, self.prefix))
            finally:
                opts.delValue(f"{self.prefix}pc_factor_mat_solver_type")
            self._lagged = LaggedFactorization(ksp)
        with self._b.localForm() as local:
            local.set(0.0)
        assemble_vector(self._b, self._L)
        apply_lifting(self._b, [self._a], bcs=[self.bcs])
        self._b.ghostUpdate(addv=PETSc.InsertMode.ADD, mode=PETSc.ScatterMode.REVERSE)
        set_bc(self._b, self.bcs)
        iterations = self._lagged.solve(self._b, self.state.x.petsc_vec)
        self.state.x.scatter_forward()
        self.steps_taken += 1
        self.check_finite(n, self.state)
        return iterations

    def forces(self) -> np.ndarray:
        """The force per unit density and depth on each obstacle after the last step,
        ``(obstacles, 2)`` in m³/s² (the volume formulation of the module docstring);
        collective."""
        b = fem.assemble_vector(self._force)
        b.scatter_reverse(la.InsertMode.add)
        V = self.steady.V
        owned = V.dofmap.index_map.size_local
        values = b.array.reshape(-1, V.dofmap.index_map_bs)
        local = np.array([values[d[d < owned]].sum(axis=0) for d in self._obstacle_dofs])
        return -self.msh.comm.allreduce(local.reshape(-1, 2), op=MPI.SUM)

    def coefficients(self, mean: float) -> np.ndarray:
        """Drag and lift coefficients ``2 F / (Ū² D)`` of each obstacle, ``(obstacles, 2)``,
        for the mean inflow ``mean`` (m/s) and each obstacle's diameter ``D``."""
        diameters = np.array([2 * c.radius for c in self.steady.dm.domain.obstacles])
        return 2 * self.forces() / (mean**2 * diameters[:, None])


def steps_per_snapshot(grid: Grid, params: ChannelWakeParams) -> int:
    """Steps between stored snapshots: :meth:`Grid.internal_steps` with the step at most
    :data:`~pdeladder.solvers.channel_wake.COURANT` grid spacings per inflow maximum ``U``,
    so that time and space refine together."""
    return grid.internal_steps(COURANT * grid.h / params.inflow_speed)


def spin_up_steps(tau: float, params: ChannelWakeParams) -> int:
    """Unstored steps of ``tau`` before snapshot 0: the spin-up ``spin_up D / Ū`` rounded up
    to whole steps."""
    return math.ceil(params.spin_up * convective_time(params.inflow_speed) / tau - 1e-9)


def start(
    params: ChannelWakeParams,
    grid: Grid,
    rng: np.random.Generator,
    comm: MPI.Comm,
    stats: Any,
    *,
    resolve: bool = False,
) -> tuple[WakeFlow, np.ndarray, int, int]:
    """The sample's flow at the start of its spin-up on ``comm``, its domain drawn from
    ``rng`` (with ``resolve``, refused in one line where ``grid`` cannot resolve its smallest
    obstacle): the stepper (over the steady flow at the first Reynolds number of the steady
    family's continuation), the fluid mask ``(X, Y, Z)`` of the whole grid, the spin-up's steps
    and the steps per snapshot."""
    if tuple(grid.lengths[:2]) != LENGTHS:
        raise UserInputError(
            f"channel_wake samples the box {LENGTHS} m, not a grid of lengths {grid.lengths[:2]}"
        )
    domain = draw_domain(rng)
    if resolve:
        domain.require_resolution(grid.resolution)
    mask = fluid_mask(domain, grid)
    flow = Flow.of(params)
    steady = SteadyFlow(domain_mesh(domain, comm, grid.h, order=2), flow)
    steady.nu.value = viscosity(min(params.reynolds, FIRST_REYNOLDS), flow.inflow_speed)
    steady.solve(stats)
    steady.nu.value = flow.viscosity
    every = steps_per_snapshot(grid, params)
    tau = grid.dt / every
    return WakeFlow(steady, tau), mask, spin_up_steps(tau, params), every


def run(
    params: ChannelWakeParams, grid: Grid, rng: np.random.Generator, comm: MPI.Comm, stats: Any
) -> tuple[np.ndarray, dict[str, Any]]:
    """The whole grid's fields ``(T, 4, X, Y, Z)`` float64, identical on every rank, and the
    provenance, of the sample whose domain ``rng`` draws."""
    t0 = time.perf_counter()
    flow, mask, spin, every = start(params, grid, rng, comm, stats, resolve=True)
    steps = spin + every * (grid.snapshots - 1)
    mean = 2 * params.inflow_speed / 3
    frames, history = [], []
    with flow:
        for n, _ in flow.run(steps, stats):
            if n > spin:
                history.append(flow.coefficients(mean))
            if n >= spin and (n - spin) % every == 0:
                frames.append(np.concatenate([mask[None], flow.steady.on_grid(grid, mask)]))
    stats.steps = steps
    stats.solve_s = time.perf_counter() - t0
    coefficients = np.array(history)  # (window steps, obstacles, 2)
    obstacles = [
        {
            "centre": list(c.centre),
            "radius": c.radius,
            "reynolds": mean * 2 * c.radius / flow.steady.flow.viscosity,
            **force_summary(coefficients[:, i], flow.tau, mean, 2 * c.radius),
        }
        for i, c in enumerate(flow.steady.dm.domain.obstacles)
    ]
    dm = flow.steady.dm
    cells = dm.mesh.topology.index_map(2).size_global
    return np.stack(frames), {
        "element": "Taylor–Hood P2–P1 on triangles curved onto the obstacles (order 2)",
        "mesh": f"gmsh {gmsh.__version__}: {cells} cells, size {dm.size:g} m, "
        f"{dm.obstacle_size:g} m on the obstacles",
        "time_scheme": "semi-implicit BDF2 (extrapolated advecting velocity, convective form, "
        "outflow backflow term; the first step implicit Euler)",
        "time_step": flow.tau,
        "linear_solver": f"{flow.solver} (MUMPS), refactorized when GMRES slows",
        "initial_condition": f"steady flow at Re {min(params.reynolds, FIRST_REYNOLDS):g} "
        "(Newton), then the sample's viscosity",
        "spin_up": {"steps": spin, "seconds": spin * flow.tau},
        "viscosity": flow.steady.flow.viscosity,
        "obstacles": obstacles,
        "sampling": "point evaluation at the grid points strictly outside every obstacle",
    }


def initial_fields(
    family: ChannelWake, params: ChannelWakeParams, grid: Grid, rng: np.random.Generator, comm: Any
) -> np.ndarray:
    """:meth:`Family.initial_fields` of :class:`ChannelWake`: snapshot 0, the flow at the end
    of the spin-up (solved on one rank, as a serial sample's is), the rows
    :meth:`Grid.drawn_rows` gives."""
    whole = grid.whole if isinstance(grid, SlabGrid) else grid
    flow, mask, spin, _ = start(params, whole, rng, MPI.COMM_SELF, SolveStats())
    with flow:
        flow.advance(spin)
        values = np.concatenate([mask[None], flow.steady.on_grid(whole, mask)])
    lo, hi = grid.drawn_rows(comm)
    return values[:, lo:hi]


def solve(
    family: ChannelWake,
    params: ChannelWakeParams,
    grid: Grid,
    rng: np.random.Generator,
    comm: MPI.Comm,
    stats: SolveStats,
) -> tuple[np.ndarray, dict[str, Any]]:
    """:meth:`Family.solve` of :class:`ChannelWake`; on a :class:`SlabGrid` of several ranks
    each rank returns its slab's rows of the whole grid's values."""
    fields, provenance = run(params, grid, rng, comm, stats)
    if isinstance(grid, SlabGrid) and comm.size > 1:
        lo, hi = grid.slabs[comm.rank]
        fields = fields[:, :, lo:hi]
    return fields.astype(np.float32), provenance


def manufactured_error(
    dim: int, cells: int, steps: int, comm: MPI.Comm, study: Literal["space", "time"]
) -> float:
    """:meth:`Family.manufactured_error` of :class:`ChannelWake`: the L2 error of the velocity
    at :data:`~pdeladder.solvers.family.MANUFACTURED_T_END` on the steady family's
    manufactured domain (the box around one obstacle), cells of ``2 m / cells``, ``ν = 0.1``.

    Space: the steady family's solution (the curl of ``sin(πx/2) sin(πy/2) / π``, pressure
    ``cos(πx/2) cos(πy/2)``) on cells curved onto the obstacle, marched from its interpolant,
    so the error is spatial. Time: ``u = (1 + sin 2t) (x², -2xy)``, ``p = (1 + sin 2t)(x +
    y)`` on straight cells, which P2–P1 represent exactly, so the error is temporal."""
    order = 2 if study == "space" else 1
    dm = domain_mesh(MANUFACTURED_DOMAIN, comm, LENGTHS[0] / cells, order=order)
    x = ufl.SpatialCoordinate(dm.mesh)
    t = fem.Constant(dm.mesh, PETSc.ScalarType(0.0))
    if study == "space":
        g, dg = 1.0, 0.0
        k = ufl.pi / 2
        psi = ufl.sin(k * x[0]) * ufl.sin(k * x[1]) / ufl.pi
        U, P = ufl.as_vector([psi.dx(1), -psi.dx(0)]), ufl.cos(k * x[0]) * ufl.cos(k * x[1])
    else:
        g, dg = 1.0 + ufl.sin(2 * t), 2 * ufl.cos(2 * t)
        U, P = ufl.as_vector([x[0] ** 2, -2 * x[0] * x[1]]), x[0] + x[1]
    steady = SteadyFlow(dm, Flow(viscosity=0.1, inflow_speed=1.0))
    exact = (g * U, g * P, dg * U)
    with WakeFlow(steady, MANUFACTURED_T_END / steps, exact=exact, t=t) as flow:
        initial = fem.Function(steady.V)
        initial.interpolate(fem.Expression(g * U, steady.V.element.interpolation_points))
        flow.state.x.array[steady.u_dofs] = initial.x.array
        flow.advance(steps)
        return l2_norm(steady.velocity() - g * U, dx=ufl.dx(metadata={"quadrature_degree": 8}))
