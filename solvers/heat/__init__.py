r"""Heat equation (linear diffusion) with zero-flux boundaries.

Strong form, on the unit box :math:`\Omega = (0, 1)^d`, :math:`d = 1, 2, 3`:

.. math::
    \partial_t u - \kappa \Delta u = f \quad \text{in } \Omega \times (0, T], \qquad
    \kappa \nabla u \cdot n = 0 \text{ on } \partial\Omega, \qquad u(\cdot, 0) = u_0,

with :math:`f = 0` for samples and :math:`u_0` a Gaussian random field of length scale
:math:`\ell`. The mean of :math:`u` is conserved.

This module is the physics without the FEM (no DOLFINx import): parameters, channels, the initial
draw and the strong-form residual. The weak form, time stepping and manufactured solution are in
:mod:`pdeladder.solvers.heat.fem`, imported on the first solve.
"""

from typing import Any, ClassVar

import numpy as np
import torch

from pdeladder.solvers import stencils
from pdeladder.solvers.family import Channel, Family, Parameters, parameter
from pdeladder.solvers.grid import Grid
from pdeladder.solvers.random_fields import gaussian_random_field


class HeatParams(Parameters):
    diffusivity: float = parameter(0.02, 1e-3, 0.1, "1", "diffusivity κ (unit box, unit time)")
    ic_length_scale: float = parameter(0.15, 0.03, 0.5, "1", "length scale ℓ of the initial field")


class Heat(Family):
    name = "heat"
    title = "Heat equation"
    equation = r"\partial_t u = \kappa \Delta u"
    dims = (1, 2, 3)
    Params = HeatParams
    channels = (Channel("u", "temperature", wall="no_flux"),)
    boundary_conditions = "zero flux (homogeneous Neumann) on all walls"
    box_symmetric = True
    difficulty = "ic_length_scale"
    t_end = 1.0
    expected_rate_space = 2.0
    expected_rate_time = 1.0
    convergence_plan: ClassVar[dict[str, Any]] = {
        "space": {"cells": (8, 16, 32), "steps": 4},
        "time": {"steps": (8, 16, 32), "cells": 48},
    }

    def initial_fields(
        self, params: HeatParams, grid: Grid, rng: np.random.Generator, comm: Any = None
    ) -> np.ndarray:
        rows = grid.drawn_rows(comm)
        return gaussian_random_field(grid.shape, params.ic_length_scale, rng, rows=rows)[None]

    def residual(self, fields: torch.Tensor, params: torch.Tensor, grid: Grid) -> torch.Tensor:
        u = fields[:, 0]  # (B, T, X, Y, Z)
        kappa = stencils.broadcast_param(params, self.Params.names().index("diffusivity"), u)
        u_t = stencils.interior(stencils.time_derivative(u, grid), grid.dim)
        lap = stencils.laplacian(stencils.time_interior(u), grid)
        return (u_t - kappa * lap).unsqueeze(1)  # (B, 1, T-2, X', Y', Z')
