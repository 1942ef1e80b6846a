r"""The FEM part of the wave equation (:mod:`pdeladder.solvers.wave`): weak form, time stepping
and manufactured solution.

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
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
import ufl
from dolfinx import fem
from dolfinx.fem.petsc import assemble_matrix, assemble_vector, set_bc
from petsc4py import PETSc

from pdeladder.solvers.family import MANUFACTURED_T_END, SolveStats
from pdeladder.solvers.fem import (
    boundary_facets,
    box_mesh,
    choose_solver,
    grid_mesh,
    l2_norm,
    make_ksp,
    solve_checked,
)
from pdeladder.solvers.grid import Grid
from pdeladder.solvers.stepping import TimeStepper
from pdeladder.solvers.wave import Wave, WaveParams

#: Courant number c τ / h of the stored samples' internal steps: Crank–Nicolson is stable for
#: any step, this keeps its phase error small on the waves the grid resolves.
COURANT = 0.5


class CrankNicolson(TimeStepper):
    """Crank–Nicolson for the wave equation with fixed walls on ``msh`` (P1); the state is the
    displacement and velocity ``(u, v)``, whose wall values :meth:`begin` sets to zero.

    Args:
        c, tau: wave speed and time step.
        source: a source whose load is ``Σ_k s_k(t) L_k(φ)``, as pairs of ``φ -> L_k(φ)`` (a UFL
            linear form, assembled once) and ``s_k``.
    """

    def __init__(
        self,
        msh: Any,
        c: float,
        tau: float,
        source: list[tuple[Callable[[ufl.Argument], ufl.Form], Callable[[float], float]]]
        | None = None,
    ):
        super().__init__(msh, tau)
        dim = msh.topology.dim
        self.V = V = fem.functionspace(msh, ("Lagrange", 1))
        self.walls = fem.locate_dofs_topological(V, dim - 1, boundary_facets(msh))
        self.bcs = [fem.dirichletbc(0.0, self.walls, V)]
        u, phi = ufl.TrialFunction(V), ufl.TestFunction(V)
        quarter = fem.Constant(msh, (tau * c) ** 2 / 4)
        mass = ufl.inner(u, phi) * ufl.dx
        stiffness = quarter * ufl.inner(ufl.grad(u), ufl.grad(phi)) * ufl.dx
        self.A = self.own(assemble_matrix(fem.form(mass + stiffness), bcs=self.bcs))
        self.B = self.own(assemble_matrix(fem.form(mass - stiffness)))
        self.M = self.own(assemble_matrix(fem.form(mass)))
        for mat in (self.A, self.B, self.M):
            mat.assemble()
        self.dofs = V.dofmap.index_map.size_global
        self.solver = choose_solver("mass", dim, self.dofs, msh.comm.size)
        self.ksp = self.own(make_ksp(msh.comm, self.A, self.solver, prefix=f"wave_{id(self.A)}_"))
        self.loads = []
        for form, s in source or ():
            load = self.own(assemble_vector(fem.form(form(phi))))
            load.ghostUpdate(addv=PETSc.InsertMode.ADD, mode=PETSc.ScatterMode.REVERSE)
            self.loads.append((load, s))
        self.b, self.work = self.own(self.A.createVecRight()), self.own(self.A.createVecRight())
        self.u, self.v = fem.Function(V), fem.Function(V)
        self.state = (self.u, self.v)

    def begin(self) -> None:
        for f in self.state:
            f.x.array[self.walls] = 0.0
            f.x.scatter_forward()

    def step(self, n: int) -> int:
        tau, u, v, b = self.tau, self.u, self.v, self.b
        # b = (M - τ²c²/4 K) u^n + τ M v^n + τ²/4 (F^{n+1} + F^n)
        self.B.mult(u.x.petsc_vec, b)
        self.M.mult(v.x.petsc_vec, self.work)
        b.axpy(tau, self.work)
        for load, s in self.loads:
            b.axpy(tau**2 / 4 * (s(n * tau) + s((n - 1) * tau)), load)
        set_bc(b, self.bcs)
        u_old = u.x.array.copy()  # owned and ghost entries
        iterations = solve_checked(self.ksp, b, u.x.petsc_vec)
        u.x.scatter_forward()
        v.x.array[:] = 2 / tau * (u.x.array - u_old) - v.x.array
        return iterations


def solve(
    family: Wave,
    params: WaveParams,
    grid: Grid,
    rng: np.random.Generator,
    comm: MPI.Comm,
    stats: SolveStats,
) -> tuple[np.ndarray, dict[str, Any]]:
    """:meth:`Family.solve` of :class:`Wave`: steps of Courant number at most :data:`COURANT`."""
    u0, v0 = family.initial_fields(params, grid, rng, comm)
    c = params.wave_speed
    # The Courant bound alone (not Grid.internal_steps, whose grid-spacing floor would add
    # steps at small c), as computed for the stored samples.
    every = max(1, math.ceil(grid.dt * c / (COURANT * grid.h)))
    steps = every * (grid.snapshots - 1)
    with CrankNicolson(grid_mesh(comm, grid), c, grid.t_end / steps) as stepper:
        fields = stepper.trajectory(grid, (u0, v0), steps, every, stats)  # (T, 2, X, Y, Z)
        return fields, stepper.provenance(
            grid,
            element="P1",
            time_scheme="Crank-Nicolson on (u, v) (Newmark average acceleration)",
            courant_number=c * grid.t_end / steps / grid.h,
        )


def manufactured_error(
    dim: int, cells: int, steps: int, comm: MPI.Comm, study: Literal["space", "time"]
) -> float:
    """:meth:`Family.manufactured_error` of :class:`Wave`."""
    # u = g(t) φ(x), φ = Π sin(π x_i) (zero on the walls), with the load
    # g'' (φ, ψ) + c² g (∇φ, ∇ψ), i.e. (f, ψ) for f = (g'' + c² d π² g) φ. Space study:
    # g = 1 + t, which Crank–Nicolson integrates exactly. Time study: g = cos(4t) and φ
    # replaced by its P1 interpolant, which makes g φ_h the exact solution of the
    # semi-discrete problem: the error is the time error alone.
    c, t_end, omega = 1.0, MANUFACTURED_T_END, 4.0
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

    source = [
        (lambda psi: ufl.inner(phi, psi) * dx, d2g),
        (lambda psi: c**2 * ufl.inner(ufl.grad(phi), ufl.grad(psi)) * dx, g),
    ]
    with CrankNicolson(msh, c, t_end / steps, source=source) as stepper:
        stepper.u.interpolate(fem.Expression(phi, stepper.V.element.interpolation_points))
        stepper.v.x.array[:] = dg(0.0) * stepper.u.x.array
        stepper.u.x.array[:] *= g(0.0)
        stepper.advance(steps)
        return l2_norm(stepper.u - g(t_end) * phi, dx=ufl.dx(metadata={"quadrature_degree": 6}))
