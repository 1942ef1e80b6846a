r"""The FEM part of Gray–Scott (:mod:`pdeladder.solvers.gray_scott`): weak form, time stepping
and manufactured solution.

Weak form, IMEX Euler with step :math:`\tau` (diffusion implicit, reaction explicit), lumped
mass :math:`(\cdot,\cdot)_L` (vertex quadrature): find :math:`u^{n+1}, v^{n+1} \in V_h` (P1) with

.. math::
    \tfrac{1}{\tau}(u^{n+1}, \phi)_L + D_u (\nabla u^{n+1}, \nabla \phi)
    &= \big(\tfrac{1}{\tau} u^n - u^n (v^n)^2 + F (1 - u^n) + f_u^{n+1}, \phi\big)_L, \\
    \tfrac{1}{\tau}(v^{n+1}, \phi)_L + D_v (\nabla v^{n+1}, \nabla \phi)
    &= \big(\tfrac{1}{\tau} v^n + u^n (v^n)^2 - (F + k) v^n + f_v^{n+1}, \phi\big)_L
    \quad \forall \phi \in V_h.

Each matrix is assembled and factorized (or Jacobi-preconditioned) once. Both are M-matrices on
the structured meshes, and for :math:`\tau \le 1 / (1 + F)` and :math:`0 \le u^n, v^n \le 1`
the right-hand sides lie in :math:`[0, 1/\tau]` for :math:`u` and are non-negative for :math:`v`,
so :math:`0 \le u \le 1` and :math:`v \ge 0` hold at every step (:math:`v \le 1` is observed,
not guaranteed).
"""

from mpi4py import MPI  # first: DOLFINx needs libmpi loaded

import math
from typing import Any, Literal

import numpy as np
import ufl
from dolfinx import fem

from pdeladder.solvers.family import MANUFACTURED_T_END, SolveStats
from pdeladder.solvers.fem import box_mesh, grid_mesh, l2_norm
from pdeladder.solvers.gray_scott import GrayScott, GrayScottParams
from pdeladder.solvers.grid import Grid
from pdeladder.solvers.lumped_mass import LumpedDiffusion, VertexSource
from pdeladder.solvers.stepping import TimeStepper

#: Longest internal time step (well inside the positivity bound 1 / (1 + F)).
TAU_MAX = 0.5


class ImexEuler(TimeStepper):
    """IMEX Euler for Gray–Scott with zero-flux walls on ``msh`` (P1, lumped mass); the state is
    ``(u, v)``.

    Args:
        coefficients: ``(D_u, D_v, F, k)``.
        tau: time step (at most ``1 / (1 + F)`` for positivity).
        source: sources ``f_u(x, t), f_v(x, t)`` as (UFL, UFL, the ``Constant`` t in them).
    """

    def __init__(
        self,
        msh: Any,
        coefficients: tuple[float, float, float, float],
        tau: float,
        source: tuple[Any, Any, fem.Constant] | None = None,
    ):
        super().__init__(msh, tau)
        d_u, d_v, self.feed, self.kill = coefficients
        self.V = V = fem.functionspace(msh, ("Lagrange", 1))
        self.systems = [
            self.own(LumpedDiffusion(V, 1.0 / tau, d_u, "gray_scott_u")),
            self.own(LumpedDiffusion(V, 1.0 / tau, d_v, "gray_scott_v")),
        ]
        self.dofs, self.solver = 2 * self.systems[0].dofs, self.systems[0].solver
        self.loads = (
            [VertexSource(V, f, source[2]) for f in source[:2]] if source is not None else []
        )
        self.owned = V.dofmap.index_map.size_local
        self.u, self.v = fem.Function(V), fem.Function(V)
        self.state = (self.u, self.v)

    def step(self, n: int) -> int:
        tau, feed, kill = self.tau, self.feed, self.kill
        u, v = self.u.x.array[: self.owned], self.v.x.array[: self.owned]
        reaction = u * v**2
        r_u = u / tau - reaction + feed * (1 - u)
        r_v = v / tau + reaction - (feed + kill) * v
        if self.loads:
            r_u += self.loads[0](n * tau)
            r_v += self.loads[1](n * tau)
        iterations = 0
        for system, r, w in zip(self.systems, (r_u, r_v), self.state, strict=True):
            iterations += system.solve(r, w)
        self.check_finite(n, self.u, self.v)
        return iterations


def solve(
    family: GrayScott,
    params: GrayScottParams,
    grid: Grid,
    rng: np.random.Generator,
    comm: MPI.Comm,
    stats: SolveStats,
) -> tuple[np.ndarray, dict[str, Any]]:
    """:meth:`Family.solve` of :class:`GrayScott`: steps of at most :data:`TAU_MAX`, and at least
    one per grid spacing of time."""
    u0, v0 = family.initial_fields(params, grid, rng, comm)
    every = grid.internal_steps(TAU_MAX)
    steps = every * (grid.snapshots - 1)
    coefficients = (params.diffusivity_u, params.diffusivity_v, params.feed, params.kill)
    with ImexEuler(grid_mesh(comm, grid), coefficients, grid.t_end / steps) as stepper:
        fields = stepper.trajectory(grid, (u0, v0), steps, every, stats)  # (T, 2, X, Y, Z)
        return fields, stepper.provenance(
            grid,
            element="P1, lumped mass",
            time_scheme="IMEX Euler (diffusion implicit, reaction explicit)",
        )


def manufactured_error(
    dim: int, cells: int, steps: int, comm: MPI.Comm, study: Literal["space", "time"]
) -> float:
    """:meth:`Family.manufactured_error` of :class:`GrayScott`."""
    # u = 1 - g(t) (1 + φ) / 4, v = g(t) (1 - φ) / 4, φ = Π cos(π x_i) (zero normal flux), with
    # sources from UFL, over [0, 1] (the reaction u v² has a unit rate, so the study cannot be
    # stretched to the samples' t_end at the same number of steps). The space study takes
    # g = 1: the discrete steady state does not depend on the time step, so only the spatial
    # error remains; the time study g = 1 + ½ sin(2t). Default rates; diffusivities large
    # enough to matter on the scale of φ.
    feed, kill, d_u, d_v, t_end = 0.04, 0.06, 0.04, 0.02, MANUFACTURED_T_END
    msh = box_mesh(comm, dim, cells)
    x = ufl.SpatialCoordinate(msh)
    t = fem.Constant(msh, 0.0)
    tv = ufl.variable(t)
    phi = math.prod(ufl.cos(ufl.pi * x[i]) for i in range(dim))
    g = 1.0 if study == "space" else 1 + 0.5 * ufl.sin(2 * tv)
    u_ex, v_ex = 1 - g * (1 + phi) / 4, g * (1 - phi) / 4
    f_u = ufl.diff(u_ex, tv) - d_u * ufl.div(ufl.grad(u_ex)) + u_ex * v_ex**2 - feed * (1 - u_ex)
    f_v = ufl.diff(v_ex, tv) - d_v * ufl.div(ufl.grad(v_ex)) - u_ex * v_ex**2 + (feed + kill) * v_ex

    with ImexEuler(msh, (d_u, d_v, feed, kill), t_end / steps, source=(f_u, f_v, t)) as stepper:
        points = stepper.V.element.interpolation_points
        stepper.u.interpolate(fem.Expression(u_ex, points))
        stepper.v.interpolate(fem.Expression(v_ex, points))
        stepper.advance(steps)
        t.value = t_end
        quadrature = ufl.dx(metadata={"quadrature_degree": 4})
        return l2_norm(stepper.u - u_ex, stepper.v - v_ex, dx=quadrature)
