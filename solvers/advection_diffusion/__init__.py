r"""Advection–diffusion of a scalar by a static divergence-free velocity, zero total flux on walls.

Strong form, on the unit box :math:`\Omega = (0, 1)^d`, :math:`d = 1, 2, 3`:

.. math::
    \partial_t u + \nabla\cdot(b u) - \varepsilon \Delta u = f
    \quad \text{in } \Omega \times (0, T],
    \qquad (b u - \varepsilon \nabla u) \cdot n = 0 \text{ on } \partial\Omega,
    \qquad u(\cdot, 0) = u_0,

with :math:`\nabla\cdot b = 0`, so :math:`\nabla\cdot(b u) = b\cdot\nabla u`. In 2D/3D the velocity
is the curl of a random stream function (vector potential) that vanishes on the walls, so
:math:`b \cdot n = 0` there and the condition is zero diffusive flux; in 1D it is a constant
:math:`\pm U`, which carries the scalar into a layer of width :math:`\varepsilon / U =
1/\mathrm{Pe}` at the outflow wall (resolved where the cell Péclet number :math:`\mathrm{Pe}\,h`
is at most 2). The 1D initial field is the random one times :math:`\sin^2 \pi x`, so that it
meets the walls' condition (:math:`u = \partial_x u = 0`) at :math:`t = 0` too: one that does
not starts with a layer of width :math:`\sqrt{\varepsilon t}`, which no grid resolves.
:math:`\varepsilon = U L / \mathrm{Pe}` with :math:`L = 1` and :math:`U` the root-mean-square
speed. The total :math:`\int_\Omega u` is conserved. :math:`f = 0` for samples.

This module is the physics without the FEM (no DOLFINx or PETSc import): parameters, channels,
the initial draw and the strong-form residual. The weak form, time stepping and manufactured
solution are in :mod:`pdeladder.solvers.advection_diffusion.fem`, imported on the first solve.
"""

import math
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import torch

from pdeladder.solvers import stencils
from pdeladder.solvers.family import Channel, Family, Parameters, parameter
from pdeladder.solvers.grid import Grid
from pdeladder.solvers.random_fields import divergence_free_field, gaussian_random_field


class AdvectionDiffusionParams(Parameters):
    peclet: float = parameter(100.0, 10.0, 2000.0, "1", "Péclet number Pe = U L / ε (L = 1)")
    speed: float = parameter(1.0, 0.25, 2.0, "1", "root-mean-square speed U of the velocity")
    velocity_length_scale: float = parameter(
        0.25, 0.1, 0.5, "1", "length scale of the random stream function (2D/3D)"
    )
    ic_length_scale: float = parameter(0.15, 0.03, 0.5, "1", "length scale ℓ of the initial field")


class AdvectionDiffusion(Family):
    name = "advection_diffusion"
    title = "Advection–diffusion by a divergence-free velocity"
    equation = r"\partial_t u + b \cdot \nabla u = \varepsilon \Delta u"
    dims = (1, 2, 3)
    Params = AdvectionDiffusionParams
    channels = (
        Channel("u", "transported scalar", wall="no_flux"),
        Channel("bx", "velocity x-component", role="input"),
        Channel("by", "velocity y-component", role="input"),
        Channel("bz", "velocity z-component", role="input"),
    )
    boundary_conditions = (
        "zero total flux (b u - ε∇u)·n = 0 on all walls; b·n = 0 on the walls in 2D/3D"
    )
    box_symmetric = True
    vectors = (("bx", "by", "bz"),)
    difficulty = "peclet"
    t_end = 1.0
    expected_rate_space = 2.0
    expected_rate_time = 2.0
    convergence_plan: ClassVar[dict[str, Any]] = {
        "space": {"cells": (8, 16, 32), "steps": 16},
        "time": {"steps": (4, 8, 16), "cells": 32},
    }
    # Snapshots close enough to resolve transport at unit speed in the residual.
    check_snapshots = 17

    @classmethod
    def channels_for(cls, dim: int) -> tuple[Channel, ...]:
        return cls.channels[: 1 + dim]

    @classmethod
    def unresolved(cls, grid: Grid, ranges: Mapping[str, tuple[float, float]]) -> str | None:
        """In 1D, the outflow layer of width ``1/Pe`` needs a cell Péclet number ``Pe h`` of
        at most 2: a coarser grid's solution oscillates (Galerkin) and its residual grows under
        refinement. 2D/3D velocities are tangential on the walls: no such layer."""
        pe = ranges["peclet"][1]
        if grid.dim != 1 or pe * grid.h <= 2:
            return None
        return (
            f"{cls.name} in 1D: {grid.resolution} points cannot resolve the outflow layer at "
            f"Péclet {pe:g} (cell Péclet {pe * grid.h:.3g} > 2); use a resolution of at least "
            f"{math.ceil(pe / 2) + 1} or a Péclet number of at most {2 / grid.h:g}"
        )

    @classmethod
    def check_params(cls, dim: int) -> AdvectionDiffusionParams:
        """In 1D, Pe = 10, the least, whose outflow layer the contract's grids resolve on the
        wall points too (at Pe = 20 the wall's residual fell only 3.55 → 2.26 from 17 to 33
        points); the defaults beyond."""
        return cls.Params(peclet=10.0) if dim == 1 else cls.Params()

    def initial_fields(
        self,
        params: AdvectionDiffusionParams,
        grid: Grid,
        rng: np.random.Generator,
        comm: Any = None,
    ) -> np.ndarray:
        velocity = divergence_free_field(
            grid, params.velocity_length_scale, params.speed, rng, comm
        )
        rows = grid.drawn_rows(comm)
        u0 = gaussian_random_field(grid.shape, params.ic_length_scale, rng, rows=rows)
        if grid.dim == 1:  # the walls' zero total flux holds at t = 0 too: u = ∂u/∂x = 0
            u0 *= np.sin(np.pi * grid.axis(0)[rows[0] : rows[1], None, None]) ** 2
        return np.concatenate([u0[None], velocity])  # (1 + dim, X, Y, Z)

    def with_walls(
        self,
        fields: torch.Tensor,
        params: torch.Tensor,
        grid: Grid,
        ends: list[tuple[bool, bool]] | None = None,
    ) -> torch.Tensor:
        """In 2D/3D the channels' walls (``b · n = 0``: zero diffusive flux, mirrored). In 1D
        the zero total flux ``b u - ε ∂u/∂x = 0`` with ``b ≠ 0`` on the walls: one ghost plane
        past each wall held, ``u_{-1} = u_1 - 2h b_0 u_0 / ε`` and ``u_{N} = u_{N-2} + 2h
        b_{N-1} u_{N-1} / ε`` (the centred difference of the condition), ``b`` constant."""
        if grid.dim > 1:
            return super().with_walls(fields, params, grid, ends)
        low, high = (ends or [(True, True)])[0]
        names = self.Params.names()
        eps = stencils.broadcast_param(params, names.index("speed"), fields[:, :1])
        eps = eps / stencils.broadcast_param(params, names.index("peclet"), fields[:, :1])
        parts, step = [fields], 2 * grid.spacing[0]
        if low:
            u, b = fields[:, :1, :, :1], fields[:, 1:2, :, :1]
            ghost = fields[:, :1, :, 1:2] - step * b * u / eps
            parts.insert(0, torch.cat([ghost, b], dim=1))
        if high:
            u, b = fields[:, :1, :, -1:], fields[:, 1:2, :, -1:]
            ghost = fields[:, :1, :, -2:-1] + step * b * u / eps
            parts.append(torch.cat([ghost, b], dim=1))
        return torch.cat(parts, dim=3)

    def residual(self, fields: torch.Tensor, params: torch.Tensor, grid: Grid) -> torch.Tensor:
        names = self.Params.names()
        u = fields[:, 0]  # (B, T, X, Y, Z)
        eps = stencils.broadcast_param(params, names.index("speed"), u) / stencils.broadcast_param(
            params, names.index("peclet"), u
        )
        u_mid = stencils.time_interior(u)
        b = stencils.interior(stencils.time_interior(fields[:, 1 : 1 + grid.dim]), grid.dim)
        grad = stencils.grad(u_mid, grid)
        advection = sum(b[:, a] * grad[a] for a in range(grid.dim))
        u_t = stencils.interior(stencils.time_derivative(u, grid), grid.dim)
        lap = stencils.laplacian(u_mid, grid)
        return (u_t + advection - eps * lap).unsqueeze(1)  # (B, 1, T-2, X', Y', Z')
