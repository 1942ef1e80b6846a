r"""The FEM part of channel flow (:mod:`pdeladder.solvers.channel_flow`): weak form, Newton
solve, and the DFG benchmark's quantities.

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
"""

from mpi4py import MPI  # first: the DOLFINx wheel loads libmpi through it

import time
from typing import Any

import basix.ufl
import numpy as np
import ufl
from dolfinx import fem
from dolfinx.fem.petsc import NonlinearProblem
from petsc4py import PETSc

from pdeladder.errors import SolveError
from pdeladder.solvers.channel_flow import ChannelFlowParams
from pdeladder.solvers.family import SolveStats
from pdeladder.solvers.geometry.mesh import INLET, WALLS, DomainMesh
from pdeladder.solvers.geometry.sample import evaluate

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


class ChannelFlow:
    """Steady Navier–Stokes on a channel :class:`DomainMesh` with ``params``; :meth:`solve`
    computes the flow into :attr:`state`."""

    def __init__(self, dm: DomainMesh, params: ChannelFlowParams):
        msh = dm.mesh
        self.dm, self.params = dm, params
        cell, dim = msh.basix_cell(), msh.topology.dim
        self.W = fem.functionspace(
            msh,
            basix.ufl.mixed_element(
                [
                    basix.ufl.element("Lagrange", cell, 2, shape=(dim,)),
                    basix.ufl.element("Lagrange", cell, 1),
                ]
            ),
        )
        self.V, self.u_dofs = self.W.sub(0).collapse()
        self.Q, self.p_dofs = self.W.sub(1).collapse()
        self.dofs = self.W.dofmap.index_map.size_global * self.W.dofmap.index_map_bs
        self.nu = fem.Constant(msh, PETSc.ScalarType(params.viscosity))
        self.state = fem.Function(self.W)

        height, speed = dm.domain.lengths[1], params.inflow_speed
        inflow = fem.Function(self.V)
        inflow.interpolate(
            lambda x: np.stack([4 * speed * x[1] * (height - x[1]) / height**2, 0 * x[0]])
        )
        no_slip = np.concatenate([dm.facets.find(t) for t in (WALLS, *dm.obstacle_tags())])
        self.bcs = [
            fem.dirichletbc(inflow, self._dofs(dm.facets.find(INLET)), self.W.sub(0)),
            fem.dirichletbc(fem.Function(self.V), self._dofs(no_slip), self.W.sub(0)),
        ]
        u, p = ufl.split(self.state)
        v, q = ufl.TestFunctions(self.W)
        self.F = momentum(u, p, v, self.nu) - q * ufl.div(u) * ufl.dx

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
        u = fem.Function(self.V)
        u.x.array[:] = self.state.x.array[self.u_dofs]
        return u

    def pressure(self) -> fem.Function:
        """A copy of the kinematic pressure ``p`` (m²/s²) in the P1 space :attr:`Q`."""
        p = fem.Function(self.Q)
        p.x.array[:] = self.state.x.array[self.p_dofs]
        return p

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
        mean = 2 * self.params.inflow_speed / 3
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
