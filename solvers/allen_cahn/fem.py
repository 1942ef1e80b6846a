r"""The FEM part of the Allen–Cahn equation (:mod:`pdeladder.solvers.allen_cahn`): weak form,
time stepping and manufactured solution.

Weak form, stabilised semi-implicit Euler with step :math:`\tau` and stabilisation :math:`S = 1`
(the double-well force explicit, diffusion and :math:`S u` implicit), lumped mass
:math:`(\cdot,\cdot)_L` (vertex quadrature): find :math:`u^{n+1} \in V_h` (P1) such that

.. math::
    \big(\tfrac{1}{\tau} + S\big) (u^{n+1}, v)_L + \varepsilon^2 (\nabla u^{n+1}, \nabla v)
    = \big(\big(\tfrac{1}{\tau} + S\big) u^n + u^n - (u^n)^3 + f^{n+1}, v\big)_L
    \quad \forall v \in V_h.

The matrix is assembled and factorized (or Jacobi-preconditioned) once. On the structured
meshes (right triangles, Kuhn tetrahedra) the P1 stiffness matrix has non-positive
off-diagonals, so the system matrix is an M-matrix with row sums :math:`(1/\tau + S)\, m_i`;
since :math:`s \mapsto (1/\tau + S) s + s - s^3` maps :math:`[-1, 1]` into
:math:`[-(1/\tau + S), 1/\tau + S]` for :math:`1/\tau + S \ge 2`, the discrete solution keeps
:math:`|u| \le 1` (maximum principle), and with :math:`S \ge \tfrac12 \max |F''| = 1` the
discrete free energy never increases.
"""

from mpi4py import MPI  # first: DOLFINx needs libmpi loaded

import math
from typing import Any, Literal

import numpy as np
import ufl
from dolfinx import fem

from pdeladder.solvers.allen_cahn import AllenCahn, AllenCahnParams
from pdeladder.solvers.family import MANUFACTURED_T_END, SolveStats
from pdeladder.solvers.fem import box_mesh, grid_mesh, l2_norm
from pdeladder.solvers.grid import Grid
from pdeladder.solvers.lumped_mass import LumpedDiffusion, VertexSource
from pdeladder.solvers.stepping import TimeStepper

#: Stabilisation constant S of the semi-implicit scheme (half the Lipschitz constant of u - u³
#: on [-1, 1]): energy stable for every step, maximum principle for steps up to 1.
STABILISATION = 1.0


class StabilisedEuler(TimeStepper):
    """Stabilised semi-implicit Euler for Allen–Cahn with zero-flux walls on ``msh`` (P1,
    lumped mass); the state is ``u``.

    Args:
        eps, tau: interface width and time step (at most 1 for the maximum principle).
        source: a source ``f(x, t)`` as (UFL expression, the ``Constant`` t in it).
    """

    def __init__(
        self, msh: Any, eps: float, tau: float, source: tuple[Any, fem.Constant] | None = None
    ):
        super().__init__(msh, tau)
        self.V = V = fem.functionspace(msh, ("Lagrange", 1))
        self.sigma = 1.0 / tau + STABILISATION
        self.system = self.own(LumpedDiffusion(V, self.sigma, eps**2, "allen_cahn"))
        self.dofs, self.solver = self.system.dofs, self.system.solver
        self.load = VertexSource(V, *source) if source is not None else None
        self.owned = V.dofmap.index_map.size_local
        self.state = self.u = fem.Function(V)

    def step(self, n: int) -> int:
        u = self.u.x.array[: self.owned]
        r = self.sigma * u + u - u**3
        if self.load is not None:
            r += self.load(n * self.tau)
        iterations = self.system.solve(r, self.u)
        self.check_finite(n, self.u)
        return iterations


def solve(
    family: AllenCahn,
    params: AllenCahnParams,
    grid: Grid,
    rng: np.random.Generator,
    comm: MPI.Comm,
    stats: SolveStats,
) -> tuple[np.ndarray, dict[str, Any]]:
    """:meth:`Family.solve` of :class:`AllenCahn`: steps no longer than the grid spacing ``h``
    (time and space refine together; at most 1, as the maximum principle needs)."""
    u0 = family.initial_fields(params, grid, rng, comm)
    every = math.ceil(grid.dt / grid.h - 1e-9)
    steps = every * (grid.snapshots - 1)
    with StabilisedEuler(grid_mesh(comm, grid), params.epsilon, grid.t_end / steps) as stepper:
        fields = stepper.trajectory(grid, u0, steps, every, stats)  # (T, 1, X, Y, Z)
        return fields, stepper.provenance(
            grid,
            element="P1, lumped mass",
            time_scheme=f"stabilised semi-implicit Euler (S = {STABILISATION:g})",
        )


def manufactured_error(
    dim: int, cells: int, steps: int, comm: MPI.Comm, study: Literal["space", "time"]
) -> float:
    """:meth:`Family.manufactured_error` of :class:`AllenCahn`."""
    # u = g(t) φ(x), φ = ½ Π cos(π x_i) (zero normal flux), f = u_t - ε²Δu - u + u³ from UFL.
    # The space study takes g = 1: the discrete steady state does not depend on the time
    # step, so only the spatial error remains; the time study takes g = 1 + ½ sin(2t), over
    # [0, 1].
    eps, t_end = 0.1, MANUFACTURED_T_END
    msh = box_mesh(comm, dim, cells)
    x = ufl.SpatialCoordinate(msh)
    t = fem.Constant(msh, 0.0)
    tv = ufl.variable(t)
    phi = 0.5 * math.prod(ufl.cos(ufl.pi * x[i]) for i in range(dim))
    exact = phi if study == "space" else (1 + 0.5 * ufl.sin(2 * tv)) * phi
    source = ufl.diff(exact, tv) - eps**2 * ufl.div(ufl.grad(exact)) - exact + exact**3

    with StabilisedEuler(msh, eps, t_end / steps, source=(source, t)) as stepper:
        stepper.u.interpolate(fem.Expression(exact, stepper.V.element.interpolation_points))
        stepper.advance(steps)
        t.value = t_end
        return l2_norm(stepper.u - exact, dx=ufl.dx(metadata={"quadrature_degree": 4}))
