r"""Darcy flow (steady pressure equation) in a random log-normal permeability.

Strong form, on the unit box :math:`\Omega = (0, 1)^d`, :math:`d = 1, 2, 3`:

.. math::
    -\nabla \cdot (k \nabla p) = f \quad \text{in } \Omega, \qquad p = 0 \text{ on } \partial\Omega,
    \qquad k = e^{a},

with :math:`a` a Gaussian random field of length scale :math:`\ell` and standard deviation
:math:`\sigma` (the permeability contrast :math:`k_{max}/k_{min} \approx e^{6\sigma}` is the
difficulty) and a uniform source :math:`f`.

This module is the physics without the FEM (no DOLFINx or PETSc import): parameters, channels,
the initial draw and the strong-form residual. The weak form, time stepping and manufactured
solution are in :mod:`pdeladder.solvers.darcy.fem`, imported on the first solve.
"""

from typing import Any, ClassVar

import numpy as np
import torch

from pdeladder.solvers import stencils
from pdeladder.solvers.family import Channel, Family, Parameters, parameter
from pdeladder.solvers.grid import Grid
from pdeladder.solvers.random_fields import gaussian_random_field


class DarcyParams(Parameters):
    log_permeability_std: float = parameter(
        1.0, 0.1, 2.5, "1", "standard deviation σ of the log-permeability a = ln k"
    )
    length_scale: float = parameter(
        0.15, 0.03, 0.5, "1", "correlation length ℓ of the log-permeability"
    )
    source: float = parameter(1.0, 0.1, 10.0, "1", "uniform source term f")


class Darcy(Family):
    name = "darcy"
    title = "Darcy flow in a random permeability"
    equation = r"-\nabla \cdot (e^{a} \nabla p) = f"
    dims = (1, 2, 3)
    Params = DarcyParams
    channels = (
        Channel("a", "log-permeability", role="input"),
        Channel("p", "pressure", wall="zero"),
    )
    boundary_conditions = "p = 0 (homogeneous Dirichlet) on all walls"
    box_symmetric = True
    difficulty = "log_permeability_std"
    steady = True
    t_end = 0.0
    expected_rate_space = 2.0
    expected_rate_time = None
    convergence_plan: ClassVar[dict[str, Any]] = {
        "space": {"cells": (8, 16, 32), "steps": 1},
        "space_3d": {"cells": (4, 8, 16), "steps": 1},
    }

    def initial_fields(
        self, params: DarcyParams, grid: Grid, rng: np.random.Generator, comm: Any = None
    ) -> np.ndarray:
        a = gaussian_random_field(
            grid.shape,
            params.length_scale,
            rng,
            std=params.log_permeability_std,
            rows=grid.drawn_rows(comm),
        )
        return np.stack([a, np.zeros_like(a)])  # (2, X, Y, Z): the pressure is the solve's

    def residual(self, fields: torch.Tensor, params: torch.Tensor, grid: Grid) -> torch.Tensor:
        a, p = fields[:, 0], fields[:, 1]  # (B, T, X, Y, Z)
        f = stencils.broadcast_param(params, self.Params.names().index("source"), p)
        return (-flux_divergence(torch.exp(a), p, grid) - f).unsqueeze(1)  # (B, 1, 1, X', Y', Z')


def flux_divergence(k: torch.Tensor, p: torch.Tensor, grid: Grid) -> torch.Tensor:
    """Conservative ``∇·(k∇p)`` at interior points: face fluxes ``k_{i+½} (p_{i+1} - p_i) / h_a``
        with the arithmetic mean ``k_{i+½} = (k_i + k_{i+1}) / 2``, differenced over each cell
    (``h_a`` the spacing of axis ``a``).

        ``k`` and ``p`` end in ``(X, Y, Z)``; the result is cropped as :func:`stencils.laplacian`.
    """
    out = torch.zeros_like(stencils.interior(p, grid.dim))
    for axis_index in range(grid.dim):
        axis = p.ndim - 3 + axis_index
        n = p.shape[axis]
        k_face = 0.5 * (k.narrow(axis, 1, n - 1) + k.narrow(axis, 0, n - 1))
        h = grid.spacing[axis_index]
        flux = k_face * (p.narrow(axis, 1, n - 1) - p.narrow(axis, 0, n - 1)) / h
        div = (flux.narrow(axis, 1, n - 2) - flux.narrow(axis, 0, n - 2)) / h
        out = out + stencils.interior_except(div, grid.dim, axis_index)
    return out
