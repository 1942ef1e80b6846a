r"""Allen–Cahn equation (phase separation) with zero-flux boundaries.

Strong form, on the unit box :math:`\Omega = (0, 1)^d`, :math:`d = 1, 2, 3`:

.. math::
    \partial_t u = \varepsilon^2 \Delta u + u - u^3 + f \quad \text{in } \Omega \times (0, T],
    \qquad
    \nabla u \cdot n = 0 \text{ on } \partial\Omega, \qquad u(\cdot, 0) = u_0,

with :math:`f = 0` for samples and :math:`u_0` a Gaussian random field of length scale
:math:`\ell` scaled to :math:`\max |u_0| = a \le 1`. It is the :math:`L^2` gradient flow of the
free energy :math:`E(u) = \int_\Omega \tfrac{\varepsilon^2}{2} |\nabla u|^2 + \tfrac14 (1 - u^2)^2`;
:math:`|u| \le 1` holds for all time.

This module is the physics without the FEM (no DOLFINx or PETSc import): parameters, channels,
the initial draw and the strong-form residual. The weak form, time stepping and manufactured
solution are in :mod:`pdeladder.solvers.allen_cahn.fem`, imported on the first solve.
"""

from typing import Any, ClassVar

import numpy as np
import torch

from pdeladder.solvers import stencils
from pdeladder.solvers.family import Channel, Family, Parameters, parameter
from pdeladder.solvers.grid import Grid
from pdeladder.solvers.random_fields import gaussian_random_field


class AllenCahnParams(Parameters):
    epsilon: float = parameter(0.04, 0.01, 0.1, "1", "interface width ε (unit box)")
    ic_length_scale: float = parameter(0.15, 0.03, 0.5, "1", "length scale ℓ of the initial field")
    ic_amplitude: float = parameter(0.5, 0.05, 1.0, "1", "maximum a of |u_0|")


class AllenCahn(Family):
    name = "allen_cahn"
    title = "Allen–Cahn equation"
    equation = r"\partial_t u = \varepsilon^2 \Delta u + u - u^3"
    dims = (1, 2, 3)
    Params = AllenCahnParams
    channels = (Channel("u", "order parameter", wall="no_flux"),)
    boundary_conditions = "zero flux (homogeneous Neumann) on all walls"
    box_symmetric = True
    difficulty = "epsilon"
    t_end = 4.0
    expected_rate_space = 2.0
    expected_rate_time = 1.0
    convergence_plan: ClassVar[dict[str, Any]] = {
        "space": {"cells": (8, 16, 32), "steps": 8},
        "time": {"steps": (8, 16, 32), "cells": 32},
    }

    def initial_fields(
        self, params: AllenCahnParams, grid: Grid, rng: np.random.Generator, comm: Any = None
    ) -> np.ndarray:
        rows = grid.drawn_rows(comm)
        u0 = gaussian_random_field(grid.shape, params.ic_length_scale, rng, rows=rows)
        peak = np.abs(u0).max()
        if rows != (0, grid.shape[0]):
            peak = max(comm.allgather(peak))
        return (u0 * (params.ic_amplitude / peak))[None]  # (1, X, Y, Z)

    def residual(self, fields: torch.Tensor, params: torch.Tensor, grid: Grid) -> torch.Tensor:
        u = fields[:, 0]  # (B, T, X, Y, Z)
        eps = stencils.broadcast_param(params, self.Params.names().index("epsilon"), u)
        u_t = stencils.interior(stencils.time_derivative(u, grid), grid.dim)
        u_mid = stencils.time_interior(u)
        lap = stencils.laplacian(u_mid, grid)
        u_in = stencils.interior(u_mid, grid.dim)
        return (u_t - eps**2 * lap - u_in + u_in**3).unsqueeze(1)  # (B, 1, T-2, X', Y', Z')
