r"""Vector viscous Burgers equation with no-slip walls.

Strong form, on the unit box :math:`\Omega = (0, 1)^d`, :math:`d = 1, 2, 3`, for a velocity
:math:`u` with :math:`d` components:

.. math::
    \partial_t u + (u \cdot \nabla) u - \nu \Delta u = f \quad \text{in } \Omega \times (0, T],
    \qquad u = 0 \text{ on } \partial\Omega, \qquad u(\cdot, 0) = u_0,

with :math:`f = 0` for samples and :math:`u_0 = U\, g\, b`, each component of :math:`g` a Gaussian
random field of length scale :math:`\ell` and :math:`b = \prod_i 4 x_i (1 - x_i)` a wall bubble.
Viscous Burgers obeys a maximum principle, :math:`\max |u(t)| \le \max |u_0|`.

This module is the physics without the FEM (no DOLFINx or PETSc import): parameters, channels,
the initial draw and the strong-form residual. The weak form, time stepping and manufactured
solution are in :mod:`pdeladder.solvers.burgers.fem`, imported on the first solve.
"""

from typing import Any, ClassVar

import numpy as np
import torch

from pdeladder.solvers import stencils
from pdeladder.solvers.family import Channel, Family, Parameters, parameter
from pdeladder.solvers.grid import Grid
from pdeladder.solvers.random_fields import gaussian_random_field, wall_bubble


class BurgersParams(Parameters):
    viscosity: float = parameter(
        0.05, 0.004, 0.2, "1", "kinematic viscosity ν (unit box, unit time)"
    )
    ic_amplitude: float = parameter(
        1.0, 0.1, 2.0, "1", "velocity scale U: pointwise std of each component before the bubble"
    )
    ic_length_scale: float = parameter(0.2, 0.05, 0.5, "1", "length scale ℓ of the initial field")


class Burgers(Family):
    name = "burgers"
    title = "Viscous Burgers equation"
    equation = r"\partial_t u + (u \cdot \nabla) u = \nu \Delta u"
    dims = (1, 2, 3)
    Params = BurgersParams
    channels = (
        Channel("u", "x velocity", wall="zero"),
        Channel("v", "y velocity", wall="zero"),
        Channel("w", "z velocity", wall="zero"),
    )
    boundary_conditions = "no-slip walls (homogeneous Dirichlet) on all walls"
    box_symmetric = True
    vectors = (("u", "v", "w"),)
    difficulty = "viscosity"
    t_end = 1.0
    expected_rate_space = 2.0
    expected_rate_time = 2.0
    convergence_plan: ClassVar[dict[str, Any]] = {
        "space": {"cells": (8, 16, 32), "steps": 8},
        "space_3d": {"cells": (4, 8, 16), "steps": 8},
        "time": {"steps": (8, 16, 32), "cells": 8},
    }
    # The default flow's advective time ℓ/U ≈ 0.2 needs nine snapshots for the residual.
    check_snapshots = 9

    @classmethod
    def channels_for(cls, dim: int) -> tuple[Channel, ...]:
        return cls.channels[:dim]

    def initial_fields(
        self, params: BurgersParams, grid: Grid, rng: np.random.Generator, comm: Any = None
    ) -> np.ndarray:
        rows = grid.drawn_rows(comm)
        amplitude = params.ic_amplitude * wall_bubble(grid, rows)
        return np.stack(
            [
                amplitude
                * gaussian_random_field(grid.shape, params.ic_length_scale, rng, rows=rows)
                for _ in range(grid.dim)
            ]
        )  # (dim, X, Y, Z)

    def residual(self, fields: torch.Tensor, params: torch.Tensor, grid: Grid) -> torch.Tensor:
        u = fields[:, : grid.dim]  # (B, dim, T, X, Y, Z)
        nu = stencils.broadcast_param(params, self.Params.names().index("viscosity"), u[:, 0])
        mid = stencils.time_interior(u)  # (B, dim, T-2, X, Y, Z)
        velocity = [stencils.interior(mid[:, j], grid.dim) for j in range(grid.dim)]
        rows = []
        for i in range(grid.dim):
            u_t = stencils.interior(stencils.time_derivative(u[:, i], grid), grid.dim)
            grad = stencils.grad(mid[:, i], grid)
            advection = sum(velocity[j] * grad[j] for j in range(grid.dim))
            rows.append(u_t + advection - nu * stencils.laplacian(mid[:, i], grid))
        return torch.stack(rows, dim=1)  # (B, dim, T-2, X', Y', Z')
