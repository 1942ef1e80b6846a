r"""Gray–Scott reaction–diffusion (two species) with zero-flux boundaries.

Strong form, on the unit box :math:`\Omega = (0, 1)^d`, :math:`d = 1, 2, 3`:

.. math::
    \partial_t u = D_u \Delta u - u v^2 + F (1 - u) + f_u, \qquad
    \partial_t v = D_v \Delta v + u v^2 - (F + k) v + f_v \quad \text{in } \Omega \times (0, T],

with :math:`\nabla u \cdot n = \nabla v \cdot n = 0` on :math:`\partial\Omega`, and
:math:`f_u = f_v = 0` for samples. The initial state is the trivial steady state :math:`u = 1`,
:math:`v = 0` perturbed in a few seeded Gaussian spots (:math:`u \to 1 - g/2`,
:math:`v \to g/4`, :math:`0 \le g \le 1`, radii drawn per spot); for :math:`(F, k)` in
the pattern-forming range these spots split, spread and settle into spots or stripes.

This module is the physics without the FEM (no DOLFINx or PETSc import): parameters, channels,
the initial draw and the strong-form residual. The weak form, time stepping and manufactured
solution are in :mod:`pdeladder.solvers.gray_scott.fem`, imported on the first solve.
"""

from typing import Any, ClassVar

import numpy as np
import torch

from pdeladder.solvers import stencils
from pdeladder.solvers.family import Channel, Family, Parameters, parameter
from pdeladder.solvers.grid import Grid


class GrayScottParams(Parameters):
    feed: float = parameter(0.04, 0.025, 0.05, "1", "feed rate F (per unit time)")
    kill: float = parameter(0.06, 0.05, 0.062, "1", "kill rate k (per unit time)")
    diffusivity_u: float = parameter(1e-4, 4e-5, 4e-4, "1", "diffusivity D_u of u (unit box)")
    diffusivity_v: float = parameter(5e-5, 2e-5, 2e-4, "1", "diffusivity D_v of v (unit box)")
    perturbation_size: float = parameter(
        0.06, 0.02, 0.2, "1", "standard deviation (radius) of each initial spot"
    )
    perturbation_count: float = parameter(
        4.0, 1.0, 12.0, "1", "number of initial spots (rounded to an integer)"
    )


class GrayScott(Family):
    name = "gray_scott"
    title = "Gray–Scott reaction–diffusion"
    equation = (
        r"\partial_t u = D_u \Delta u - u v^2 + F (1 - u), \quad "
        r"\partial_t v = D_v \Delta v + u v^2 - (F + k) v"
    )
    dims = (1, 2, 3)
    Params = GrayScottParams
    channels = (
        Channel("u", "substrate concentration", wall="no_flux"),
        Channel("v", "activator concentration", wall="no_flux"),
    )
    boundary_conditions = "zero flux (homogeneous Neumann) for both species on all walls"
    box_symmetric = True
    difficulty = "kill"
    t_end = 400.0
    expected_rate_space = 2.0
    expected_rate_time = 1.0
    convergence_plan: ClassVar[dict[str, Any]] = {
        "space": {"cells": (8, 16, 32), "steps": 8},
        "time": {"steps": (8, 16, 32), "cells": 32},
    }
    # The first 8 time units, where the internal step (at most t_end · h) halves with h; over the
    # full 400 it sits at its stability cap on both grids and the O(τ) error would not fall.
    check_snapshots = 9
    check_t_end = 8.0

    def initial_fields(
        self, params: GrayScottParams, grid: Grid, rng: np.random.Generator, comm: Any = None
    ) -> np.ndarray:
        size, count = params.perturbation_size, round(params.perturbation_count)
        return np.stack(seeded_spots(grid, size, count, rng, grid.drawn_rows(comm)))

    def residual(self, fields: torch.Tensor, params: torch.Tensor, grid: Grid) -> torch.Tensor:
        names = self.Params.names()
        u, v = fields[:, 0], fields[:, 1]  # (B, T, X, Y, Z) each

        def p(name: str) -> torch.Tensor:
            return stencils.broadcast_param(params, names.index(name), u)

        def at_points(f: torch.Tensor) -> torch.Tensor:
            return stencils.interior(stencils.time_interior(f), grid.dim)

        ui, vi = at_points(u), at_points(v)
        reaction = ui * vi**2
        r_u = (
            stencils.interior(stencils.time_derivative(u, grid), grid.dim)
            - p("diffusivity_u") * stencils.laplacian(stencils.time_interior(u), grid)
            + reaction
            - p("feed") * (1 - ui)
        )
        r_v = (
            stencils.interior(stencils.time_derivative(v, grid), grid.dim)
            - p("diffusivity_v") * stencils.laplacian(stencils.time_interior(v), grid)
            - reaction
            + (p("feed") + p("kill")) * vi
        )
        return torch.stack([r_u, r_v], dim=1)  # (B, 2, T-2, X', Y', Z')


def seeded_spots(
    grid: Grid,
    size: float,
    count: int,
    rng: np.random.Generator,
    rows: tuple[int, int] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The initial state: ``u = 1, v = 0`` perturbed in ``count`` Gaussian spots centred in the
    middle 60 % of the box, each with a standard deviation within 30 % of ``size``: with ``g`` the
    largest spot profile at a point (peak 1), ``u = 1 - g / 2`` and ``v = g / 4``.

    Returns:
        ``(u0, v0)``, float64 ``(X, Y, Z)`` each (of the x ``rows`` only, if given), with values
        in ``[0, 1]``.
    """
    x = grid.mesh_grid(rows)[: grid.dim]  # (dim, X, Y, Z)
    spots = np.zeros(x.shape[1:])
    for _ in range(count):
        centre = rng.uniform(0.2, 0.8, size=grid.dim)
        radius = size * rng.uniform(0.7, 1.3)
        r2 = sum((x[a] - centre[a]) ** 2 for a in range(grid.dim))
        spots = np.maximum(spots, np.exp(-0.5 * r2 / radius**2))
    return 1.0 - 0.5 * spots, 0.25 * spots
