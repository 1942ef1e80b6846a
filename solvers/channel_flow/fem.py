r"""The FEM part of channel flow (:mod:`pdeladder.solvers.channel_flow`): weak form, Newton
solve, the DFG benchmark's quantities, a sample's solve and the manufactured solution.

Weak form, Taylor–Hood P2–P1: find :math:`(u, p)` with :math:`u` the inflow profile at the inlet
and 0 on the walls and obstacles such that for all :math:`(v, q)` vanishing there

.. math::
    R(u, p; v) - (q, \nabla \cdot u) = 0, \qquad
    R(u, p; v) = \nu (\nabla u, \nabla v) + ((u \cdot \nabla) u, v) - (p, \nabla \cdot v),

whose natural condition at the outlet is the do-nothing :math:`\nu \partial_n u - p n = 0`.
The system is solved by Newton's method (PETSc SNES, LU by MUMPS, which pivots: the saddle
point's zero pressure block needs it).

Forces on an obstacle :math:`S` are computed from the residual (the volume formulation of
V. John, Int. J. Numer. Meth. Fluids 44 (2004) 777-788): for :math:`\psi_k` the P2 function that
is the unit vector :math:`e_k` at the dofs on :math:`S` and 0 at all others, integrating
:math:`R` by parts gives

.. math::
    F \cdot e_k = -\int_S (\nu \partial_n u - p n) \cdot e_k \, ds = -R(u_h, p_h; \psi_k)

(:math:`n` the fluid's outward normal; on a no-slip boundary of a divergence-free flow the
traction :math:`\nu\partial_n u - p n` is the Cauchy stress's). It is the force that the
discrete equations balance, and it converges faster than the surface integral of the stress,
which differentiates the discrete velocity and takes the pressure on the boundary only
(``benchmarks/RESULTS.md``, DFG 2D-1 with cells curved onto the cylinder: the drag's relative
error 1.5e-4, 1.4e-5, 1.2e-6 at h = 0.04, 0.02, 0.01 m, against 6.2e-3, 1.3e-3, 3.6e-4 from
the surface integral).

A sample (:func:`solve`) is meshed by gmsh with cells of the grid's spacing :math:`h` (a quarter
of it on the obstacles, edges curved onto them), so that the mesh refines with the grid, and
the solution is evaluated at the grid points in the fluid: those strictly outside every
obstacle (:func:`~pdeladder.solvers.channel_flow.fluid_mask`, the mask channel's rule), 0 at
the others.
"""

from mpi4py import MPI  # first: the DOLFINx wheel loads libmpi through it

import time
from typing import Any, Literal

import gmsh
import numpy as np
import ufl
from dolfinx import fem
from dolfinx.fem.petsc import NonlinearProblem
from petsc4py import PETSc

from pdeladder.errors import SolveError, UserInputError
from pdeladder.solvers.channel_flow import (
    LENGTHS,
    ChannelFlow,
    ChannelFlowParams,
    Flow,
    draw_domain,
    fluid_mask,
    inflow,
    viscosity,
)
from pdeladder.solvers.family import SolveStats
from pdeladder.solvers.fem import l2_norm, part_of, taylor_hood
from pdeladder.solvers.geometry.domain import Circle, Domain
from pdeladder.solvers.geometry.mesh import INLET, OUTLET, WALLS, DomainMesh, domain_mesh
from pdeladder.solvers.geometry.sample import evaluate
from pdeladder.solvers.grid import Grid, SlabGrid

#: Newton (PETSc SNES) and its linear solves: LU by MUMPS; convergence checked on every solve.
NEWTON = {
    "snes_type": "newtonls",
    "snes_linesearch_type": "none",
    "snes_rtol": 1e-10,
    "snes_atol": 1e-12,
    "snes_max_it": 25,
    "snes_error_if_not_converged": True,
    "ksp_type": "preonly",
    "pc_type": "lu",
    "pc_factor_mat_solver_type": "mumps",
    "ksp_error_if_not_converged": True,
}


def momentum(u: Any, p: Any, v: Any, nu: Any) -> Any:
    """The momentum residual ``R(u, p; v) = ν(∇u, ∇v) + ((u·∇)u, v) - (p, ∇·v)``."""
    return (
        nu * ufl.inner(ufl.grad(u), ufl.grad(v)) * ufl.dx
        + ufl.inner(ufl.dot(ufl.grad(u), u), v) * ufl.dx
        - p * ufl.div(v) * ufl.dx
    )


class SteadyFlow:
    """Steady Navier–Stokes on a channel :class:`DomainMesh` with the physical ``flow``;
    :meth:`solve` computes the flow into :attr:`state`.

    ``exact``: a manufactured solution ``(U, P)`` (UFL expressions) in place of the channel's
    conditions: ``U`` on the inlet, walls and obstacles, its traction ``ν ∂_n U - P n`` at the
    outlet, and the body force that makes it a solution.
    """

    def __init__(self, dm: DomainMesh, flow: Flow, *, exact: tuple[Any, Any] | None = None):
        msh = dm.mesh
        self.dm, self.flow = dm, flow
        self.W, self.V, self.u_dofs, self.Q, self.p_dofs = taylor_hood(msh)
        self.dofs = self.W.dofmap.index_map.size_global * self.W.dofmap.index_map_bs
        self.nu = fem.Constant(msh, PETSc.ScalarType(flow.viscosity))
        self.state = fem.Function(self.W)

        u, p = ufl.split(self.state)
        v, q = ufl.TestFunctions(self.W)
        self.F = momentum(u, p, v, self.nu) - q * ufl.div(u) * ufl.dx
        no_slip = np.concatenate([dm.facets.find(t) for t in (WALLS, *dm.obstacle_tags())])
        if exact is None:
            height, speed = dm.domain.lengths[1], flow.inflow_speed
            profile = fem.Function(self.V)
            profile.interpolate(lambda x: np.stack([inflow(x[1], speed, height), 0 * x[0]]))
            self.bcs = [
                fem.dirichletbc(profile, self._dofs(dm.facets.find(INLET)), self.W.sub(0)),
                fem.dirichletbc(fem.Function(self.V), self._dofs(no_slip), self.W.sub(0)),
            ]
        else:
            U, P = exact
            wall = fem.Function(self.V)
            wall.interpolate(fem.Expression(U, self.V.element.interpolation_points))
            walls = np.concatenate([dm.facets.find(INLET), no_slip])
            self.bcs = [fem.dirichletbc(wall, self._dofs(walls), self.W.sub(0))]
            n = ufl.FacetNormal(msh)
            ds = ufl.Measure("ds", msh, subdomain_data=dm.facets)
            force = ufl.dot(ufl.grad(U), U) - self.nu * ufl.div(ufl.grad(U)) + ufl.grad(P)
            traction = self.nu * ufl.dot(ufl.grad(U), n) - P * n
            self.F -= ufl.inner(force, v) * ufl.dx + ufl.inner(traction, v) * ds(OUTLET)

    def _dofs(self, facets: np.ndarray) -> np.ndarray:
        fdim = self.dm.mesh.topology.dim - 1
        return fem.locate_dofs_topological((self.W.sub(0), self.V), fdim, facets)

    def solve(self, stats: SolveStats | None = None) -> int:
        """Solve by Newton from the state (zero at first); returns the Newton iterations and
        adds them, the dofs and the seconds to ``stats``. Raises :class:`SolveError` when
        Newton or a linear solve fails."""
        problem = NonlinearProblem(
            self.F,
            self.state,
            bcs=self.bcs,
            petsc_options_prefix=f"channel_flow_{id(self)}_",
            petsc_options=NEWTON,
        )
        t0 = time.perf_counter()
        try:
            problem.solve()
            iterations = problem.solver.getIterationNumber()
        except PETSc.Error as err:
            reason = problem.solver.getConvergedReason()
            raise SolveError(
                f"Newton failed (SNES reason {reason}, PETSc error {err.ierr})"
            ) from None
        finally:
            for obj in (problem.solver, problem.A, problem.b, problem.x):
                obj.destroy()
        if stats is not None:
            stats.dofs, stats.steps = self.dofs, 1
            stats.krylov_iterations += iterations
            stats.solve_s += time.perf_counter() - t0
        return iterations

    def velocity(self) -> fem.Function:
        """A copy of ``u`` in the P2 vector space :attr:`V`."""
        return part_of(self.state, self.V, self.u_dofs)

    def pressure(self) -> fem.Function:
        """A copy of the kinematic pressure ``p`` (m²/s²) in the P1 space :attr:`Q`."""
        return part_of(self.state, self.Q, self.p_dofs)

    def force(self, obstacle: int = 0) -> np.ndarray:
        """The force per unit density and depth that the fluid exerts on obstacle ``obstacle``,
        ``(F_x, F_y)`` in m³/s² (the volume formulation, as the module says)."""
        msh, fdim = self.dm.mesh, self.dm.mesh.topology.dim - 1
        facets = self.dm.facets.find(self.dm.obstacle_tags()[obstacle])
        dofs = fem.locate_dofs_topological(self.V, fdim, facets)
        u, p = self.velocity(), self.pressure()
        force = np.zeros(msh.geometry.dim)
        for k in range(len(force)):
            psi = fem.Function(self.V)
            psi.x.array.reshape(-1, self.V.dofmap.index_map_bs)[dofs, k] = 1.0
            local = fem.assemble_scalar(fem.form(momentum(u, p, psi, self.nu)))
            force[k] = -msh.comm.allreduce(local, op=MPI.SUM)
        return force

    def coefficients(self, obstacle: int = 0) -> tuple[float, float]:
        """Drag and lift coefficients ``c = 2 F / (Ū² D)`` of obstacle ``obstacle`` (diameter
        ``D``, mean inflow ``Ū = 2U/3``)."""
        mean = 2 * self.flow.inflow_speed / 3
        diameter = 2 * self.dm.domain.obstacles[obstacle].radius
        drag, lift = 2 * self.force(obstacle) / (mean**2 * diameter)
        return float(drag), float(lift)

    def pressure_difference(self, a: tuple[float, ...], b: tuple[float, ...]) -> float:
        """``p(a) - p(b)`` in m²/s² at two points of the domain (metres)."""
        points = np.zeros((2, 3))
        points[:, : len(a)] = a, b
        values, inside = evaluate(self.pressure(), points)
        if not inside.all():
            raise ValueError(f"a point of {a}, {b} is outside the mesh")
        return float(values[0, 0] - values[1, 0])

    def on_grid(self, grid: Grid, mask: np.ndarray) -> np.ndarray:
        """``(u, v, p)`` at the points of ``grid`` where ``mask`` ``(X, Y, Z)`` is 1, 0 at the
        others: float64 ``(3, X, Y, Z)``, identical on every rank (collective).

        A point in the fluid that no cell holds (where the curved cells' edge passes outside
        the obstacle, within rounding of it) takes the value just off the obstacle, at
        ``1 + 1e-6`` times the radius from its centre along the same ray."""
        points = grid.mesh_grid().reshape(3, -1).T
        fluid = mask.ravel() > 0
        values = np.zeros((len(points), 3))
        for columns, function in ((slice(0, 2), self.velocity()), (slice(2, 3), self.pressure())):
            values[fluid, columns], found = evaluate(function, points[fluid])
            if not found.all():
                lost = np.flatnonzero(fluid)[~found]
                moved = self._off_obstacles(points[lost])
                values[lost, columns], again = evaluate(function, moved)
                if not again.all():
                    raise SolveError(
                        f"{int((~again).sum())} grid points in the fluid are in no cell"
                    )
        return values.T.reshape(3, *grid.shape)

    def _off_obstacles(self, points: np.ndarray) -> np.ndarray:
        """``points`` ``(N, 3)`` moved onto ``1 + 1e-6`` radii from their nearest obstacle's
        centre."""
        out = points.copy()
        for i, x in enumerate(points):
            c = min(self.dm.domain.obstacles, key=lambda c: np.hypot(*(x[:2] - c.centre)))
            ray = x[:2] - c.centre
            out[i, :2] = c.centre + ray / np.hypot(*ray) * c.radius * (1 + 1e-6)
        return out


#: The largest Reynolds number that Newton starts from rest at (:func:`continuation`).
FIRST_REYNOLDS = 10.0


def continuation(reynolds: float) -> list[float]:
    """The Reynolds numbers a sample's Newton solves pass through to reach ``reynolds``, each
    from the last one's flow: halvings of it down to :data:`FIRST_REYNOLDS` or below, then
    doublings back. From rest, Newton diverged at Re = 40 around three obstacles; from the
    flow at half the Reynolds number it converges in a few iterations."""
    ladder = [reynolds]
    while ladder[0] > FIRST_REYNOLDS:
        ladder.insert(0, ladder[0] / 2)
    return ladder


def solve(
    family: ChannelFlow,
    params: ChannelFlowParams,
    grid: Grid,
    rng: np.random.Generator,
    comm: MPI.Comm,
    stats: SolveStats,
) -> tuple[np.ndarray, dict[str, Any]]:
    """:meth:`Family.solve` of :class:`ChannelFlow`: the domain drawn from ``rng`` first, as
    :meth:`~ChannelFlow.initial_fields` draws it, then meshed, solved and sampled; on a
    :class:`SlabGrid` of several ranks, each rank returns its slab's rows of the whole grid's
    values."""
    if tuple(grid.lengths[:2]) != LENGTHS:
        raise UserInputError(
            f"channel_flow samples the box {LENGTHS} m, not a grid of lengths {grid.lengths[:2]}"
        )
    domain = draw_domain(rng)
    domain.require_resolution(grid.resolution)
    mask = fluid_mask(domain, grid)
    flow = Flow.of(params)
    dm = domain_mesh(domain, comm, grid.h, order=2)
    steady = SteadyFlow(dm, flow)
    iterations = 0
    for reynolds in continuation(params.reynolds):
        steady.nu.value = viscosity(reynolds, flow.inflow_speed)
        iterations += steady.solve(stats)
    fields = np.concatenate([mask[None], steady.on_grid(grid, mask)])[None]
    if isinstance(grid, SlabGrid) and comm.size > 1:
        lo, hi = grid.slabs[comm.rank]
        fields = fields[:, :, lo:hi]
    mean = 2 * flow.inflow_speed / 3
    obstacles = [
        {
            "centre": list(c.centre),
            "radius": c.radius,
            "reynolds": mean * 2 * c.radius / flow.viscosity,
            **dict(zip(("c_D", "c_L"), steady.coefficients(i), strict=True)),
        }
        for i, c in enumerate(domain.obstacles)
    ]
    cells = dm.mesh.topology.index_map(2).size_global
    return fields.astype(np.float32), {
        "element": "Taylor–Hood P2–P1 on triangles curved onto the obstacles (order 2)",
        "mesh": f"gmsh {gmsh.__version__}: {cells} cells, size {dm.size:g} m, "
        f"{dm.obstacle_size:g} m on the obstacles",
        "nonlinear_solver": "Newton (PETSc SNES, no line search, LU by MUMPS) from rest, "
        f"continued in Re through {', '.join(f'{r:g}' for r in continuation(params.reynolds))}",
        "newton_iterations": iterations,
        "viscosity": flow.viscosity,
        "obstacles": obstacles,
        "sampling": "point evaluation at the grid points strictly outside every obstacle",
    }


#: The manufactured solution's domain: the family's box around one obstacle (metres).
MANUFACTURED_DOMAIN = Domain(LENGTHS, (Circle((0.8, 1.1), 0.3),))


def manufactured_error(
    dim: int, cells: int, steps: int, comm: MPI.Comm, study: Literal["space", "time"]
) -> float:
    """:meth:`Family.manufactured_error` of :class:`ChannelFlow`: the L2 error of the
    velocity on :data:`MANUFACTURED_DOMAIN` meshed as a sample is, with cells of ``2 m /
    cells``.

    The exact velocity is the curl of ``ψ = sin(πx/2) sin(πy/2) / π`` (divergence-free), the
    pressure ``cos(πx/2) cos(πy/2)``, ``ν = 0.1`` m²/s; it is imposed on the inlet, walls and
    obstacle, its traction at the outlet (where the channel's do-nothing condition is posed),
    and its body force everywhere."""
    dm = domain_mesh(MANUFACTURED_DOMAIN, comm, LENGTHS[0] / cells, order=2)
    x = ufl.SpatialCoordinate(dm.mesh)
    k = ufl.pi / 2
    psi = ufl.sin(k * x[0]) * ufl.sin(k * x[1]) / ufl.pi
    U = ufl.as_vector([psi.dx(1), -psi.dx(0)])
    P = ufl.cos(k * x[0]) * ufl.cos(k * x[1])
    steady = SteadyFlow(dm, Flow(viscosity=0.1, inflow_speed=1.0), exact=(U, P))
    steady.solve()
    return l2_norm(steady.velocity() - U, dx=ufl.dx(metadata={"quadrature_degree": 8}))
