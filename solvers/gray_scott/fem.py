r"""The FEM part of :mod:`pdeladder.solvers.gray_scott`: weak form, time stepping and manufactured
solution.

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
import time
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
import ufl
from dolfinx import fem

from pdeladder.errors import SolveError
from pdeladder.solvers.family import SolveStats
from pdeladder.solvers.fem import GridSampler, box_mesh, grid_mesh
from pdeladder.solvers.gray_scott import GrayScott, GrayScottParams
from pdeladder.solvers.grid import Grid
from pdeladder.solvers.lumped_mass import LumpedDiffusion, VertexSource

#: Longest internal time step (well inside the positivity bound 1 / (1 + F)).
TAU_MAX = 0.5


def solve(
    family: GrayScott,
    params: GrayScottParams,
    grid: Grid,
    rng: np.random.Generator,
    comm: MPI.Comm,
    stats: SolveStats,
) -> tuple[np.ndarray, dict[str, Any]]:
    """:meth:`Family.solve` of :class:`GrayScott`."""
    u0, v0 = family.initial_fields(params, grid, rng)
    msh = grid_mesh(comm, grid)
    # Internal steps at most TAU_MAX and at most one grid spacing of time (t_end * h).
    every = max(math.ceil(grid.dt / TAU_MAX - 1e-9), math.ceil(grid.cells / (grid.snapshots - 1)))
    steps = every * (grid.snapshots - 1)
    frames = []
    solver = run_imex_euler(
        msh,
        (params.diffusivity_u, params.diffusivity_v, params.feed, params.kill),
        grid.t_end / steps,
        steps,
        initial=lambda u, v, sampler: (sampler.from_grid(u, u0), sampler.from_grid(v, v0)),
        grid=grid,
        stats=stats,
        on_step=lambda n, u, v, sampler: (
            frames.append(np.concatenate([sampler.to_grid(u), sampler.to_grid(v)]))
            if n % every == 0
            else None
        ),
    )
    fields = np.stack(frames).astype(np.float32)  # (T, 2, X, Y, Z)
    return fields, {
        "element": "P1, lumped mass",
        "time_scheme": "IMEX Euler (diffusion implicit, reaction explicit)",
        "time_step": grid.t_end / steps,
        "mesh": f"{msh.topology.cell_name()} {grid.cells}^{grid.dim}",
        "linear_solver": solver,
    }


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
    feed, kill, d_u, d_v, t_end = 0.04, 0.06, 0.04, 0.02, 1.0
    msh = box_mesh(comm, dim, cells)
    x = ufl.SpatialCoordinate(msh)
    t = fem.Constant(msh, 0.0)
    tv = ufl.variable(t)
    phi = math.prod(ufl.cos(ufl.pi * x[i]) for i in range(dim))
    g = 1.0 if study == "space" else 1 + 0.5 * ufl.sin(2 * tv)
    u_ex, v_ex = 1 - g * (1 + phi) / 4, g * (1 - phi) / 4
    f_u = ufl.diff(u_ex, tv) - d_u * ufl.div(ufl.grad(u_ex)) + u_ex * v_ex**2 - feed * (1 - u_ex)
    f_v = ufl.diff(v_ex, tv) - d_v * ufl.div(ufl.grad(v_ex)) - u_ex * v_ex**2 + (feed + kill) * v_ex

    def initial(u: fem.Function, v: fem.Function, sampler: Any) -> None:
        points = u.function_space.element.interpolation_points
        u.interpolate(fem.Expression(u_ex, points))
        v.interpolate(fem.Expression(v_ex, points))

    state = {}
    run_imex_euler(
        msh,
        (d_u, d_v, feed, kill),
        t_end / steps,
        steps,
        initial=initial,
        source=(f_u, f_v, t),
        on_step=lambda n, u, v, sampler: state.update(u=u, v=v) if n == steps else None,
    )
    t.value = t_end
    quadrature = ufl.dx(metadata={"quadrature_degree": 4})
    err = fem.form(((state["u"] - u_ex) ** 2 + (state["v"] - v_ex) ** 2) * quadrature)
    return math.sqrt(comm.allreduce(fem.assemble_scalar(err), op=MPI.SUM))


def run_imex_euler(
    msh: Any,
    coefficients: tuple[float, float, float, float],
    tau: float,
    steps: int,
    *,
    initial: Callable[[fem.Function, fem.Function, GridSampler | None], None],
    on_step: Callable[[int, fem.Function, fem.Function, GridSampler | None], None],
    grid: Grid | None = None,
    source: tuple[Any, Any, fem.Constant] | None = None,
    stats: SolveStats | None = None,
) -> str:
    """IMEX Euler for Gray–Scott with zero-flux walls on ``msh`` (P1, lumped mass).

    Args:
        coefficients: ``(D_u, D_v, F, k)``.
        tau, steps: time step (at most ``1 / (1 + F)`` for positivity) and number of steps.
        initial: sets the initial ``u, v`` (given the grid sampler when ``grid`` is set).
        on_step: called after step ``n`` (and with ``n = 0`` for the initial state).
        source: sources ``f_u(x, t), f_v(x, t)`` as (UFL, UFL, the ``Constant`` t in them).
        stats: receives dofs (both species), steps, Krylov iterations and solve time.

    Returns the name of the linear solver used.
    """
    d_u, d_v, feed, kill = coefficients
    V = fem.functionspace(msh, ("Lagrange", 1))
    sampler = GridSampler(V, grid) if grid is not None else None
    systems = [
        LumpedDiffusion(V, 1.0 / tau, d_u, "gray_scott_u"),
        LumpedDiffusion(V, 1.0 / tau, d_v, "gray_scott_v"),
    ]
    loads = [VertexSource(V, f, source[2]) for f in source[:2]] if source is not None else []
    owned = V.dofmap.index_map.size_local

    uh, vh = fem.Function(V), fem.Function(V)
    initial(uh, vh, sampler)
    on_step(0, uh, vh, sampler)
    t0 = time.perf_counter()
    iterations = 0
    try:
        for n in range(1, steps + 1):
            u, v = uh.x.array[:owned], vh.x.array[:owned]
            reaction = u * v**2
            r_u = u / tau - reaction + feed * (1 - u)
            r_v = v / tau + reaction - (feed + kill) * v
            if loads:
                r_u += loads[0](n * tau)
                r_v += loads[1](n * tau)
            for system, r, w in zip(systems, (r_u, r_v), (uh, vh), strict=True):
                iterations += system.solve(r, w)
            if not (np.all(np.isfinite(uh.x.array)) and np.all(np.isfinite(vh.x.array))):
                raise SolveError(f"non-finite values after step {n}")
            on_step(n, uh, vh, sampler)
    finally:
        for system in systems:
            system.destroy()
    if stats is not None:
        stats.dofs, stats.steps = 2 * systems[0].dofs, steps
        stats.krylov_iterations += iterations
        stats.solve_s += time.perf_counter() - t0
    return systems[0].solver
