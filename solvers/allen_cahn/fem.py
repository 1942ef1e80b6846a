r"""The FEM part of :mod:`pdeladder.solvers.allen_cahn`: weak form, time stepping and manufactured
solution.

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
import time
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
import ufl
from dolfinx import fem

from pdeladder.errors import SolveError
from pdeladder.solvers.allen_cahn import AllenCahn, AllenCahnParams
from pdeladder.solvers.family import SolveStats
from pdeladder.solvers.fem import GridSampler, box_mesh, grid_mesh
from pdeladder.solvers.grid import Grid
from pdeladder.solvers.lumped_mass import LumpedDiffusion, VertexSource

#: Stabilisation constant S of the semi-implicit scheme (half the Lipschitz constant of u - u³
#: on [-1, 1]): energy stable for every step, maximum principle for steps up to 1.
STABILISATION = 1.0


def solve(
    family: AllenCahn,
    params: AllenCahnParams,
    grid: Grid,
    rng: np.random.Generator,
    comm: MPI.Comm,
    stats: SolveStats,
) -> tuple[np.ndarray, dict[str, Any]]:
    """:meth:`Family.solve` of :class:`AllenCahn`."""
    u0 = family.initial_fields(params, grid, rng)
    msh = grid_mesh(comm, grid)
    # Internal steps no longer than the grid spacing h (time and space refine together).
    every = math.ceil(grid.dt / grid.h - 1e-9)
    steps = every * (grid.snapshots - 1)
    frames = []
    solver = run_stabilised_euler(
        msh,
        params.epsilon,
        grid.t_end / steps,
        steps,
        initial=lambda u, sampler: sampler.from_grid(u, u0),
        grid=grid,
        stats=stats,
        on_step=lambda n, u, sampler: frames.append(sampler.to_grid(u)) if n % every == 0 else None,
    )
    fields = np.stack(frames).astype(np.float32)  # (T, 1, X, Y, Z)
    return fields, {
        "element": "P1, lumped mass",
        "time_scheme": f"stabilised semi-implicit Euler (S = {STABILISATION:g})",
        "time_step": grid.t_end / steps,
        "mesh": f"{msh.topology.cell_name()} {grid.cells}^{grid.dim}",
        "linear_solver": solver,
    }


def manufactured_error(
    dim: int, cells: int, steps: int, comm: MPI.Comm, study: Literal["space", "time"]
) -> float:
    """:meth:`Family.manufactured_error` of :class:`AllenCahn`."""
    # u = g(t) φ(x), φ = ½ Π cos(π x_i) (zero normal flux), f = u_t - ε²Δu - u + u³ from UFL.
    # The space study takes g = 1: the discrete steady state does not depend on the time
    # step, so only the spatial error remains; the time study takes g = 1 + ½ sin(2t), over
    # [0, 1].
    eps, t_end = 0.1, 1.0
    msh = box_mesh(comm, dim, cells)
    x = ufl.SpatialCoordinate(msh)
    t = fem.Constant(msh, 0.0)
    tv = ufl.variable(t)
    phi = 0.5 * math.prod(ufl.cos(ufl.pi * x[i]) for i in range(dim))
    exact = phi if study == "space" else (1 + 0.5 * ufl.sin(2 * tv)) * phi
    source = ufl.diff(exact, tv) - eps**2 * ufl.div(ufl.grad(exact)) - exact + exact**3

    state = {}
    run_stabilised_euler(
        msh,
        eps,
        t_end / steps,
        steps,
        initial=lambda u, sampler: u.interpolate(
            fem.Expression(exact, u.function_space.element.interpolation_points)
        ),
        source=(source, t),
        on_step=lambda n, u, sampler: state.update(u=u) if n == steps else None,
    )
    t.value = t_end
    err = fem.form((state["u"] - exact) ** 2 * ufl.dx(metadata={"quadrature_degree": 4}))
    return math.sqrt(comm.allreduce(fem.assemble_scalar(err), op=MPI.SUM))


def run_stabilised_euler(
    msh: Any,
    eps: float,
    tau: float,
    steps: int,
    *,
    initial: Callable[[fem.Function, GridSampler | None], None],
    on_step: Callable[[int, fem.Function, GridSampler | None], None],
    grid: Grid | None = None,
    source: tuple[Any, fem.Constant] | None = None,
    stats: SolveStats | None = None,
) -> str:
    """Stabilised semi-implicit Euler for Allen–Cahn with zero-flux walls on ``msh`` (P1,
    lumped mass).

    Args:
        eps, tau, steps: interface width, time step (at most 1 for the maximum principle), steps.
        initial: sets the initial state ``u`` (given the grid sampler when ``grid`` is set).
        on_step: called after step ``n`` (and with ``n = 0`` for the initial state).
        source: a source ``f(x, t)`` as (UFL expression, the ``Constant`` t in it).
        stats: receives dofs, steps, Krylov iterations and solve time.

    Returns the name of the linear solver used.
    """
    V = fem.functionspace(msh, ("Lagrange", 1))
    sampler = GridSampler(V, grid) if grid is not None else None
    sigma = 1.0 / tau + STABILISATION
    system = LumpedDiffusion(V, sigma, eps**2, "allen_cahn")
    load = VertexSource(V, *source) if source is not None else None
    owned = V.dofmap.index_map.size_local

    uh = fem.Function(V)
    initial(uh, sampler)
    on_step(0, uh, sampler)
    t0 = time.perf_counter()
    iterations = 0
    try:
        for n in range(1, steps + 1):
            u = uh.x.array[:owned]
            r = sigma * u + u - u**3
            if load is not None:
                r += load(n * tau)
            iterations += system.solve(r, uh)
            if not np.all(np.isfinite(uh.x.array)):
                raise SolveError(f"non-finite values after step {n}")
            on_step(n, uh, sampler)
    finally:
        system.destroy()
    if stats is not None:
        stats.dofs, stats.steps = system.dofs, steps
        stats.krylov_iterations += iterations
        stats.solve_s += time.perf_counter() - t0
    return system.solver
