r"""The FEM part of advection–diffusion (:mod:`pdeladder.solvers.advection_diffusion`): weak
form, time stepping and manufactured solution.

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
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
import ufl
from dolfinx import fem
from dolfinx.fem.petsc import assemble_matrix, assemble_vector
from petsc4py import PETSc

from pdeladder.solvers.advection_diffusion import AdvectionDiffusion, AdvectionDiffusionParams
from pdeladder.solvers.family import MANUFACTURED_T_END, SolveStats
from pdeladder.solvers.fem import (
    GridSampler,
    box_mesh,
    choose_solver,
    grid_mesh,
    l2_norm,
    make_ksp,
    solve_checked,
    time_profile,
)
from pdeladder.solvers.grid import Grid
from pdeladder.solvers.stepping import TimeStepper

#: Courant number of the internal time steps, max|b| τ / h.
COURANT = 1.0
#: Quadrature degree of every integral: UFL's estimate for the SUPG weight (a square root) and
#: for trigonometric manufactured solutions runs to hundreds of points per tetrahedron.
QUADRATURE = {"quadrature_degree": 4}


class SupgCrankNicolson(TimeStepper):
    """SUPG Crank–Nicolson for advection–diffusion by the velocity ``b`` (a P1 vector function),
    zero total flux on the walls, P1 unknown ``u`` (the state) on ``b``'s mesh.

    Args:
        eps, tau: diffusivity and time step.
        source: separable terms ``f = Σ c_k(t) f_k(x)`` with wall fluxes ``Σ c_k(t) g_k(x)``, as
            (UFL ``f_k``, UFL ``g_k`` or None, callable ``c_k``).
    """

    def __init__(
        self,
        b: fem.Function,
        eps: float,
        tau: float,
        source: list[tuple[Any, Any, Callable[[float], float]]] | None = None,
    ):
        msh = b.function_space.mesh
        super().__init__(msh, tau)
        self.V = V = fem.functionspace(msh, ("Lagrange", 1))
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
        self.A = self.own(assemble_matrix(fem.form(mass + half_tau * operator)))
        self.A.assemble()
        self.B = self.own(assemble_matrix(fem.form(mass - half_tau * operator)))
        self.B.assemble()
        self.dofs = V.dofmap.index_map.size_global
        self.solver = choose_solver("nonsymmetric", msh.topology.dim, self.dofs)
        self.ksp = self.own(
            make_ksp(msh.comm, self.A, self.solver, prefix=f"advection_diffusion_{id(self.A)}_")
        )
        self.loads = []
        for f, g, c in source or []:
            form = ufl.inner(f, w) * dx + (0 if g is None else ufl.inner(g, v) * ds)
            load = self.own(assemble_vector(fem.form(form)))
            load.ghostUpdate(addv=PETSc.InsertMode.ADD, mode=PETSc.ScatterMode.REVERSE)
            self.loads.append((load, c))
        self.rhs = self.own(self.A.createVecRight())
        self.state = self.u = fem.Function(V)

    def step(self, n: int) -> int:
        x, tau = self.u.x.petsc_vec, self.tau
        self.B.mult(x, self.rhs)
        for load, c in self.loads:
            self.rhs.axpy(0.5 * tau * (c((n - 1) * tau) + c(n * tau)), load)
        iterations = solve_checked(self.ksp, self.rhs, x)
        self.u.x.scatter_forward()
        return iterations


def solve(
    family: AdvectionDiffusion,
    params: AdvectionDiffusionParams,
    grid: Grid,
    rng: np.random.Generator,
    comm: MPI.Comm,
    stats: SolveStats,
) -> tuple[np.ndarray, dict[str, Any]]:
    """:meth:`Family.solve` of :class:`AdvectionDiffusion`: steps of Courant number at most
    :data:`COURANT`, and at least one per grid spacing of time."""
    initial = family.initial_fields(params, grid, rng, comm)
    u0, velocity = initial[0], initial[1:]
    msh = grid_mesh(comm, grid)
    b = fem.Function(fem.functionspace(msh, ("Lagrange", 1, (grid.dim,))))
    velocity_sampler = GridSampler(b.function_space, grid)
    velocity_sampler.from_grid(b, velocity)
    top_speed = comm.allreduce(float(np.sqrt(np.sum(velocity**2, axis=0)).max()), op=MPI.MAX)
    every = grid.internal_steps(COURANT * grid.h / top_speed)
    steps = every * (grid.snapshots - 1)
    static = velocity_sampler.local(velocity)  # this rank's part: all of it, or its x slab
    with SupgCrankNicolson(b, params.speed / params.peclet, grid.t_end / steps) as stepper:
        sampler = GridSampler(stepper.V, grid)
        sampler.from_grid(stepper.u, u0)
        fields = stepper.sampled(  # (T, 1 + dim, X, Y, Z)
            steps, every, lambda n, u: np.concatenate([sampler.to_grid(u), static]), stats
        )
        return fields, stepper.provenance(
            grid, element="P1", stabilisation="SUPG", time_scheme="Crank–Nicolson"
        )


def manufactured_error(
    dim: int, cells: int, steps: int, comm: MPI.Comm, study: Literal["space", "time"]
) -> float:
    """:meth:`Family.manufactured_error` of :class:`AdvectionDiffusion`."""
    # u = g(t) φ(x), φ = Π cos(π x_i), with the cellular flow b of `exact_velocity`; the
    # source is f = g' φ + g (∇·(b φ) - ε Δφ) plus the wall flux g (ε∇φ - b φ)·n, which is
    # nonzero only in 1D. g = 1 + t for the space study (Crank–Nicolson is exact for it).
    eps, t_end = 0.05, MANUFACTURED_T_END
    g, dg = time_profile(study, omega=8)

    msh = box_mesh(comm, dim, cells)
    x = ufl.SpatialCoordinate(msh)
    n = ufl.FacetNormal(msh)
    phi = math.prod(ufl.cos(ufl.pi * x[i]) for i in range(dim))
    b_exact = exact_velocity(msh)
    b = fem.Function(fem.functionspace(msh, ("Lagrange", 1, (dim,))))
    b.interpolate(fem.Expression(b_exact, b.function_space.element.interpolation_points))
    spatial = ufl.div(b_exact * phi) - eps * ufl.div(ufl.grad(phi))
    wall_flux = ufl.dot(eps * ufl.grad(phi) - b_exact * phi, n)

    source = [(phi, None, dg), (spatial, wall_flux, g)]
    with SupgCrankNicolson(b, eps, t_end / steps, source=source) as stepper:
        stepper.u.interpolate(fem.Expression(g(0.0) * phi, stepper.V.element.interpolation_points))
        stepper.advance(steps)
        return l2_norm(stepper.u - g(t_end) * phi, dx=ufl.dx(metadata=QUADRATURE))


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
