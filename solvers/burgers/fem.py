r"""The FEM part of viscous Burgers (:mod:`pdeladder.solvers.burgers`): weak form, time stepping
and manufactured solution.

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
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
import ufl
from dolfinx import fem
from dolfinx.fem.petsc import assemble_matrix, assemble_vector, create_matrix, create_vector, set_bc
from petsc4py import PETSc

from pdeladder.errors import SolveError
from pdeladder.solvers.burgers import Burgers, BurgersParams
from pdeladder.solvers.family import MANUFACTURED_T_END, SolveStats
from pdeladder.solvers.fem import (
    GridSampler,
    boundary_facets,
    box_mesh,
    grid_mesh,
    l2_norm,
    make_ksp,
    solve_checked,
)
from pdeladder.solvers.grid import Grid
from pdeladder.solvers.stepping import TimeStepper


class SemiImplicitBdf2(TimeStepper):
    """Semi-implicit BDF2 for viscous Burgers with no-slip walls on ``msh`` (vector P1); the
    state is the velocity ``u`` (``u^n`` after step ``n``).

    The mass matrix ``M`` and stiffness matrix ``K`` are assembled once; each step assembles the
    advection matrix ``N(w)`` and solves ``(a0 / tau) M + nu K + N(w)``, with ``a0 = 1`` for the
    first (Euler) step and ``3/2`` after.

    Args:
        nu, tau: viscosity and time step.
        source: the load of a source, ``v -> (f, v)`` as a UFL form, and the time constant it
            depends on, set to ``t^{n+1}`` before step ``n + 1``'s load is assembled.
    """

    def __init__(
        self,
        msh: Any,
        nu: float,
        tau: float,
        source: tuple[Callable[[ufl.Argument], ufl.Form], fem.Constant] | None = None,
    ):
        super().__init__(msh, tau)
        self.nu, dim = nu, msh.topology.dim
        self.V = V = fem.functionspace(msh, ("Lagrange", 1, (dim,)))
        walls = fem.locate_dofs_topological(V, dim - 1, boundary_facets(msh))
        self.bcs = [fem.dirichletbc(fem.Function(V), walls)]  # zero velocity
        u, v = ufl.TrialFunction(V), ufl.TestFunction(V)
        self.u, self.u_nm1, self.u_new = fem.Function(V), fem.Function(V), fem.Function(V)
        self.w = fem.Function(V)  # advecting velocity: u^0, then 2 u^n - u^{n-1}
        # M and K with zero rows and columns on the walls; N carries the unit diagonal there.
        self.M = self.own(
            assemble_matrix(fem.form(ufl.inner(u, v) * ufl.dx), bcs=self.bcs, diag=0.0)
        )
        self.K = self.own(
            assemble_matrix(
                fem.form(ufl.inner(ufl.grad(u), ufl.grad(v)) * ufl.dx), bcs=self.bcs, diag=0.0
            )
        )
        self.M.assemble()
        self.K.assemble()
        self.advection = fem.form(ufl.inner(ufl.grad(u) * self.w, v) * ufl.dx)
        self.A = self.own(create_matrix(self.advection))
        self.source, self.load = source, None
        if source is not None:
            self.load = fem.form(source[0](v))
            self.f = self.own(create_vector(V))
        self.history = fem.Function(V)  # ((1 + bdf2) u^n - bdf2/2 u^{n-1}) / tau
        self.b = self.own(create_vector(V))
        self.dofs = V.dofmap.index_map.size_global * V.dofmap.index_map_bs
        # With tau <= h / max|u| the matrix is dominated by its mass and diffusion parts and
        # GMRES + ILU(0) needs a few iterations, far cheaper than refactorizing an LU every step
        # (which `choose_solver("nonsymmetric", ...)` would pick for small problems). On more
        # than one rank ILU(0) runs on each rank's overlapping block (fem.solver_options): 3D
        # 33³ on two ranks solves in 15.7 s, against 97.2 s by GMRES on a lagged MUMPS LU
        # (one rank: 23.0 s; docs/curriculum.md, "Every family on two ranks").
        self.solver = "gmres_ilu"
        self.ksp = None
        self.state = self.u

    def step(self, n: int) -> int:
        tau, A, b, u_n, u_nm1 = self.tau, self.A, self.b, self.u, self.u_nm1
        bdf2 = 0.0 if n == 1 else 1.0
        self.w.x.array[:] = (1 + bdf2) * u_n.x.array - bdf2 * u_nm1.x.array
        A.zeroEntries()
        assemble_matrix(A, self.advection, bcs=self.bcs)
        A.assemble()
        A.axpy((1 + bdf2 / 2) / tau, self.M, PETSc.Mat.Structure.SAME_NONZERO_PATTERN)
        A.axpy(self.nu, self.K, PETSc.Mat.Structure.SAME_NONZERO_PATTERN)
        self.history.x.array[:] = ((1 + bdf2) * u_n.x.array - bdf2 / 2 * u_nm1.x.array) / tau
        self.M.mult(self.history.x.petsc_vec, b)  # (+ the source's load)
        if self.load is not None:
            self.source[1].value = n * tau
            with self.f.localForm() as local:
                local.set(0.0)
            assemble_vector(self.f, self.load)
            self.f.ghostUpdate(addv=PETSc.InsertMode.ADD, mode=PETSc.ScatterMode.REVERSE)
            b.axpy(1.0, self.f)
        set_bc(b, self.bcs)
        if self.ksp is None:  # set up once, reused as A's values change
            self.ksp = self.own(make_ksp(self.msh.comm, A, self.solver, prefix=f"burgers_{id(A)}_"))
        iterations = solve_checked(self.ksp, b, self.u_new.x.petsc_vec)
        self.u_new.x.scatter_forward()
        u_nm1.x.array[:] = u_n.x.array
        u_n.x.array[:] = self.u_new.x.array
        return iterations


def solve(
    family: Burgers,
    params: BurgersParams,
    grid: Grid,
    rng: np.random.Generator,
    comm: MPI.Comm,
    stats: SolveStats,
) -> tuple[np.ndarray, dict[str, Any]]:
    """:meth:`Family.solve` of :class:`Burgers`: at least one step per grid spacing of time and
    an advective CFL number of at most 1; a stored frame faster than twice the initial speed
    is a blow-up."""
    u0 = family.initial_fields(params, grid, rng, comm)
    speed = comm.allreduce(float(np.sqrt(np.sum(u0**2, axis=0)).max()), op=MPI.MAX)
    # As computed for the stored samples: in floating point, unlike Grid.internal_steps, so it
    # takes one step more where dt / (h t_end) rounds just above an integer.
    tau_max = grid.h * min(grid.t_end, 1.0 / speed) if speed > 0 else grid.h * grid.t_end
    every = max(1, math.ceil(grid.dt / tau_max))
    steps = every * (grid.snapshots - 1)
    with SemiImplicitBdf2(grid_mesh(comm, grid), params.viscosity, grid.t_end / steps) as stepper:
        sampler = GridSampler(stepper.V, grid)
        sampler.from_grid(stepper.u, u0)

        def frame(n: int, u: fem.Function) -> np.ndarray:
            values = sampler.to_grid(u)
            # The maximum principle bounds |u| by max |u0|: growth beyond it is an instability.
            if not sampler.max(np.max(np.sqrt(np.sum(values**2, axis=0)))) <= 2 * speed + 1e-12:
                raise SolveError(f"blow-up at t = {n * grid.t_end / steps:.3g}: |u| > 2 max|u0|")
            return values

        fields = stepper.sampled(steps, every, frame, stats)  # (T, dim, X, Y, Z)
        return fields, stepper.provenance(
            grid,
            element="vector P1",
            time_scheme="semi-implicit BDF2 (extrapolated advecting velocity), BDF1 start",
        )


def manufactured_error(
    dim: int, cells: int, steps: int, comm: MPI.Comm, study: Literal["space", "time"]
) -> float:
    """:meth:`Family.manufactured_error` of :class:`Burgers`."""
    # u = g(t) φ(x), φ_i = Π_j sin(π (1 + δ_ij) x_j) (zero on the walls, a different shape per
    # component), with the load (∂_t u + (u·∇)u, v) + ν (∇u, ∇v), i.e. (f, v) for
    # f = ∂_t u + (u·∇)u − νΔu. Space study: g = 1 (steady, so the time scheme is exact).
    # Time study: g = cos(2t) and φ replaced by its P1 interpolant, which makes g φ_h the
    # exact solution of the semi-discrete problem: the error is the time error alone.
    nu, t_end = 0.1, MANUFACTURED_T_END
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

    with SemiImplicitBdf2(msh, nu, t_end / steps, source=(load, t)) as stepper:
        stepper.u.interpolate(fem.Expression(exact, stepper.V.element.interpolation_points))
        stepper.advance(steps)  # t holds t_end after the last step
        return l2_norm(stepper.u - exact, dx=ufl.dx(metadata={"quadrature_degree": 6}))
