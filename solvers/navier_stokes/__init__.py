r"""Incompressible Navier–Stokes: decaying random vortices in a closed box with no-slip walls.

Strong form, on the unit box :math:`\Omega = (0, 1)^d`, :math:`d = 2, 3`:

.. math::
    \partial_t u + (u \cdot \nabla) u - \nu \Delta u + \nabla p = f, \qquad \nabla \cdot u = 0
    \quad \text{in } \Omega \times (0, T], \qquad u = 0 \text{ on } \partial\Omega,

with :math:`f = 0` and :math:`\nu = 1 / Re` for samples (unit root-mean-square initial speed,
unit box). The initial velocity is the curl of a random stream function (2D) or vector potential
(3D) :math:`\psi = \xi\, w^2`, :math:`\xi` a Gaussian random field of length scale :math:`\ell`
and :math:`w = \prod_i 4 x_i (1 - x_i)`, so it is divergence-free and vanishes on the walls.

This module is the physics without the FEM (no DOLFINx or PETSc import): parameters, channels,
the initial draw and the strong-form residual. The weak form, time stepping and manufactured
solution are in :mod:`pdeladder.solvers.navier_stokes.fem`, imported on the first solve.
"""

from typing import Any, ClassVar

import numpy as np
import torch

from pdeladder.solvers import stencils
from pdeladder.solvers.family import Channel, Family, Parameters, parameter
from pdeladder.solvers.grid import Grid


class NavierStokesParams(Parameters):
    reynolds: float = parameter(
        100.0, 10.0, 1000.0, "1", "Reynolds number Re = U L / ν (U = 1 initial rms speed, L = 1)"
    )
    length_scale: float = parameter(
        0.2, 0.05, 0.5, "1", "correlation length ℓ of the initial stream function"
    )


class NavierStokes(Family):
    name = "navier_stokes"
    title = "Incompressible Navier–Stokes (decaying vortices in a box)"
    equation = (
        r"\partial_t u + (u \cdot \nabla) u - \nu \Delta u + \nabla p = 0, \ \nabla \cdot u = 0"
    )
    dims = (2, 3)
    Params = NavierStokesParams
    channels = (
        Channel("u", "velocity x", wall="zero"),
        Channel("v", "velocity y", wall="zero"),
        Channel("w", "velocity z", wall="zero"),
        Channel("p", "kinematic pressure (zero mean)"),
    )
    boundary_conditions = "no-slip (u = 0) on all walls; pressure with zero mean"
    box_symmetric = True
    vectors = (("u", "v", "w"),)
    difficulty = "reynolds"
    t_end = 1.0
    expected_rate_space = 3.0  # P2 velocity, L2
    expected_rate_time = 2.0  # BDF2
    convergence_plan: ClassVar[dict[str, Any]] = {
        # Coarse enough for 3D (12 cells: ~49k dofs); P2 reaches its order early.
        "space": {"cells": (3, 6, 12), "steps": 4},
        "time": {"steps": (8, 16, 32), "cells": 4},
    }
    # Snapshots 1/8 apart: the vortices' fastest time scale is about 0.1.
    check_snapshots = 9

    @classmethod
    def channels_for(cls, dim: int) -> tuple[Channel, ...]:
        return (*cls.channels[:dim], cls.channels[-1])

    def initial_fields(
        self, params: NavierStokesParams, grid: Grid, rng: np.random.Generator, comm: Any = None
    ) -> np.ndarray:
        # The initial state is a discrete projection: the FEM part draws it.
        return self.fem().initial_fields(self, params, grid, rng)

    def residual(self, fields: torch.Tensor, params: torch.Tensor, grid: Grid) -> torch.Tensor:
        dim = grid.dim
        u, p = fields[:, :dim], fields[:, dim]  # (B, dim, T, X, Y, Z), (B, T, X, Y, Z)
        nu = 1.0 / stencils.broadcast_param(params, self.Params.names().index("reynolds"), p)
        u_mid, p_mid = stencils.time_interior(u), stencils.time_interior(p)
        momentum = []
        for i in range(dim):
            ui = u_mid[:, i]
            advection = sum(
                stencils.interior(u_mid[:, j], dim) * stencils.diff(ui, j, grid) for j in range(dim)
            )
            momentum.append(
                stencils.interior(stencils.time_derivative(u[:, i], grid), dim)
                + advection
                - nu * stencils.laplacian(ui, grid)
                + stencils.diff(p_mid, i, grid)
            )
        continuity = stencils.divergence(u_mid, grid, channel_axis=1)
        return torch.stack([*momentum, continuity], dim=1)  # (B, dim+1, T-2, X', Y', Z')
