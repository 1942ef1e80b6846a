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
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
import ufl
from dolfinx import fem
from dolfinx.fem.petsc import assemble_matrix, assemble_vector
from petsc4py import PETSc

from pdeladder.solvers.family import MANUFACTURED_T_END, SolveStats
from pdeladder.solvers.fem import (
    box_mesh,
    choose_solver,
    grid_mesh,
    l2_norm,
    make_ksp,
    solve_checked,
    time_profile,
)
from pdeladder.solvers.grid import Grid
from pdeladder.solvers.heat import Heat, HeatParams
from pdeladder.solvers.stepping import TimeStepper


class ImplicitEuler(TimeStepper):
    """Implicit Euler for the heat equation with zero-flux walls on ``msh`` (P1); the state is
    ``u``.

    Args:
        kappa, tau: diffusivity and time step.
        source: a separable source ``f = c(t) φ(x)`` as (UFL ``φ``, callable ``c``).
    """

    def __init__(
        self,
        msh: Any,
        kappa: float,
        tau: float,
        source: tuple[Any, Callable[[float], float]] | None = None,
    ):
        super().__init__(msh, tau)
        self.V = V = fem.functionspace(msh, ("Lagrange", 1))
        u, v = ufl.TrialFunction(V), ufl.TestFunction(V)
        dt_kappa = fem.Constant(msh, tau * kappa)
        mass = ufl.inner(u, v) * ufl.dx
        system = ufl.inner(u, v) * ufl.dx + dt_kappa * ufl.inner(ufl.grad(u), ufl.grad(v)) * ufl.dx
        self.M = self.own(assemble_matrix(fem.form(mass)))
        self.M.assemble()
        self.A = self.own(assemble_matrix(fem.form(system)))
        self.A.assemble()
        self.dofs = V.dofmap.index_map.size_global
        self.solver = choose_solver("mass", msh.topology.dim, self.dofs, msh.comm.size)
        self.ksp = self.own(make_ksp(msh.comm, self.A, self.solver, prefix=f"heat_{id(self.A)}_"))
        self.source, self.load = source, None
        if source is not None:
            self.load = self.own(assemble_vector(fem.form(ufl.inner(source[0], v) * ufl.dx)))
            self.load.ghostUpdate(addv=PETSc.InsertMode.ADD, mode=PETSc.ScatterMode.REVERSE)
        self.b = self.own(self.A.createVecRight())
        self.state = self.u = fem.Function(V)

    def step(self, n: int) -> int:
        x = self.u.x.petsc_vec
        self.M.mult(x, self.b)
        if self.load is not None:
            self.b.axpy(self.tau * self.source[1](n * self.tau), self.load)
        iterations = solve_checked(self.ksp, self.b, x)
        self.u.x.scatter_forward()
        return iterations


def solve(
    family: Heat,
    params: HeatParams,
    grid: Grid,
    rng: np.random.Generator,
    comm: MPI.Comm,
    stats: SolveStats,
) -> tuple[np.ndarray, dict[str, Any]]:
    """:meth:`Family.solve` of :class:`Heat`: about one implicit Euler step per grid spacing of
    time."""
    u0 = family.initial_fields(params, grid, rng, comm)
    every = grid.internal_steps()
    steps = every * (grid.snapshots - 1)
    with ImplicitEuler(grid_mesh(comm, grid), params.diffusivity, grid.t_end / steps) as stepper:
        fields = stepper.trajectory(grid, u0, steps, every, stats)  # (T, 1, X, Y, Z)
        return fields, stepper.provenance(grid, element="P1", time_scheme="implicit Euler")


def manufactured_error(
    dim: int, cells: int, steps: int, comm: MPI.Comm, study: Literal["space", "time"]
) -> float:
    """:meth:`Family.manufactured_error` of :class:`Heat`."""
    # u = g(t) φ(x), φ = Π cos(π x_i) (zero normal flux), f = (g' + κ d π² g) φ, with
    # g = 1 + t for the space study (implicit Euler is exact in time) and 1 + sin(2t) otherwise.
    kappa, t_end = 0.05, MANUFACTURED_T_END
    g, dg = time_profile(study, omega=2)

    def source(t: float) -> float:
        return dg(t) + kappa * dim * math.pi**2 * g(t)

    msh = box_mesh(comm, dim, cells)
    x = ufl.SpatialCoordinate(msh)
    phi = math.prod(ufl.cos(ufl.pi * x[i]) for i in range(dim))
    with ImplicitEuler(msh, kappa, t_end / steps, source=(phi, source)) as stepper:
        stepper.u.interpolate(fem.Expression(g(0.0) * phi, stepper.V.element.interpolation_points))
        stepper.advance(steps)
        return l2_norm(stepper.u - g(t_end) * phi)
