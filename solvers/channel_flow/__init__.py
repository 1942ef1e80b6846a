r"""Steady incompressible flow through a channel around obstacles.

Strong form, on a :class:`~pdeladder.solvers.geometry.Domain` :math:`\Omega`, the box
:math:`(0, L) \times (0, H)` less its obstacles, in kinematic units (:math:`p` is the pressure
over the density):

.. math::
    (u \cdot \nabla) u - \nu \Delta u + \nabla p = 0, \qquad \nabla \cdot u = 0 \quad
    \text{in } \Omega,

with the parabolic inflow :math:`u = (4 U y (H - y) / H^2, 0)` at :math:`x = 0` (maximum
:math:`U`, mean :math:`\bar U = 2U/3`), no slip :math:`u = 0` on the walls :math:`y = 0, H`
and on the obstacles, and the do-nothing outflow :math:`\nu \partial_n u - p n = 0` at
:math:`x = L`. The Reynolds number of an obstacle of diameter :math:`D` is :math:`\bar U D /
\nu`.

As a family (:class:`ChannelFlow`), each sample draws 1 to 3 circular obstacles in the box
:math:`2 \times 2` m (:func:`draw_domain`); the input channel ``mask`` marks the grid points in
the fluid (outside every obstacle), and the outputs ``u, v, p`` are 0 outside it. The
parameters are a Reynolds number and the inflow speed, from which the viscosity follows
(:func:`viscosity`), so every sample stays in the steady regime whatever it draws.

The DFG benchmark 2D-1 (Schäfer & Turek 1996, "Benchmark computations of laminar flow around a
cylinder", Notes Numer. Fluid Mech. 52) is this problem in the channel 2.2 m x 0.41 m around the
cylinder of centre (0.2, 0.2) m and radius 0.05 m, with :math:`\nu = 10^{-3}` m²/s,
:math:`U = 0.3` m/s (Re = 20): :data:`DFG_2D1`, its published bounds :data:`DFG_2D1_BOUNDS` and
reference values :data:`DFG_2D1_REFERENCE`.

This module is the physics without the FEM (no DOLFINx or PETSc import). The weak form, Newton
solve, the benchmark's quantities and the manufactured solution are in
:mod:`pdeladder.solvers.channel_flow.fem`.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from pdeladder.errors import UserInputError
from pdeladder.solvers import stencils
from pdeladder.solvers.family import MASK, Channel, Family, Parameters, parameter
from pdeladder.solvers.geometry.domain import Circle, Domain, draw_obstacles
from pdeladder.solvers.grid import Grid

#: The family's box (metres). One resolution serves every axis and an obstacle needs 4 grid
#: spacings of the longest side across it (:meth:`Domain.require_resolution`), so the 17 points
#: of the coarsest grids (the contract's) resolve diameters of a quarter of that side: a square
#: box gives such obstacles the blockage of the DFG channel's (a quarter of its height), where
#: a 2 m x 1 m channel would be half blocked.
LENGTHS = (2.0, 2.0)
#: Obstacles per sample, radii (m), the band of their centres' x (m, clear of the inlet, and of
#: the outlet by at least a diameter), and their clearance from each other and the walls (m).
COUNT, RADII, CENTRES_X, GAP = (1, 3), (0.25, 0.3), (0.4, 1.3), 0.1
#: The diameter that :class:`ChannelFlowParams`'s Reynolds number refers to: the largest drawn.
DIAMETER = 2 * RADII[1]


class ChannelFlowParams(Parameters):
    """Reynolds number and inflow. ``Re <= 40`` keeps every sample steady (flow past a
    cylinder sheds vortices from Re ≈ 47); an obstacle of diameter ``D`` has ``Re D / 0.6 m``."""

    reynolds: float = parameter(
        10.0,
        1.0,
        40.0,
        "1",
        "Reynolds number Ū D / ν of an obstacle of the largest diameter "
        "drawn, D = 0.6 m (Ū = 2U/3 the mean inflow); sets the viscosity ν",
    )
    inflow_speed: float = parameter(
        0.3, 0.1, 1.0, "m s-1", "maximum U of the parabolic inflow (its mean Ū is 2U/3)"
    )


def viscosity(reynolds: Any, inflow_speed: Any) -> Any:
    """The kinematic viscosity ``ν = Ū D / Re`` (m²/s) of :class:`ChannelFlowParams`' values
    (floats or tensors), ``D`` = :data:`DIAMETER`, ``Ū = 2U/3``."""
    return 2 * inflow_speed / 3 * DIAMETER / reynolds


@dataclass(frozen=True)
class Flow:
    """The physical parameters of one steady channel flow, as the FEM solve takes them:
    ``viscosity`` ν in m²/s and ``inflow_speed`` U (the inflow's maximum) in m/s."""

    viscosity: float
    inflow_speed: float

    @classmethod
    def of(cls, params: ChannelFlowParams) -> "Flow":
        return cls(viscosity(params.reynolds, params.inflow_speed), params.inflow_speed)


#: The DFG 2D-1 channel and cylinder (metres) and its flow (Re = 20).
DFG_2D1 = Domain((2.2, 0.41), (Circle((0.2, 0.2), 0.05),))
DFG_2D1_PARAMS = Flow(viscosity=1e-3, inflow_speed=0.3)

#: The points in front of and behind the cylinder whose pressure difference is Δp (metres).
DFG_2D1_PRESSURE_POINTS = ((0.15, 0.2), (0.25, 0.2))

#: Bounds on c_D, c_L and Δp (m²/s², ρ = 1) published by Schäfer & Turek (1996) for 2D-1.
DFG_2D1_BOUNDS = {"c_D": (5.57, 5.59), "c_L": (0.0104, 0.0110), "delta_p": (0.1172, 0.1176)}

#: Reference values computed on fine meshes by the FeatFlow group (TU Dortmund), listed on
#: https://wwwold.mathematik.tu-dortmund.de/~featflow/en/benchmarks/cfdbenchmarking/flow/dfg_benchmark1_re20.html
DFG_2D1_REFERENCE = {"c_D": 5.57953523384, "c_L": 0.010618948146, "delta_p": 0.11752016697}


def draw_domain(rng: np.random.Generator) -> Domain:
    """A sample's obstacles, drawn from ``rng``: their count, then radii and centres
    (:func:`draw_obstacles`) in the ranges above. The draw does not depend on the grid, so
    the same seed gives the same domain at every resolution."""
    count = int(rng.integers(COUNT[0], COUNT[1] + 1))
    region = (CENTRES_X, (0.0, LENGTHS[1]))
    while True:
        try:
            return draw_obstacles(rng, LENGTHS, count, RADII, gap=GAP, centres=region)
        except UserInputError:  # the first ones left no room (~1 % of three): draw all again
            continue


def fluid_mask(domain: Domain, grid: Grid, rows: tuple[int, int] | None = None) -> np.ndarray:
    """1.0 at the grid points in the fluid, strictly outside every obstacle, 0.0 elsewhere:
    float64 ``(X, Y, Z)``, or the x rows ``[lo, hi)`` only, ``(hi - lo, Y, Z)``. The solve
    samples its fields with the same rule."""
    x = grid.mesh_grid(rows)
    inside = np.ones(x.shape[1:], dtype=bool)
    for c in domain.obstacles:
        inside &= np.hypot(x[0] - c.centre[0], x[1] - c.centre[1]) > c.radius
    return inside.astype(np.float64)


def inflow(y: Any, inflow_speed: Any, height: float) -> Any:
    """The parabolic inflow ``u(0, y) = 4 U y (H - y) / H²`` (m/s) at heights ``y`` (m), ``U`` the
    ``inflow_speed``, ``H`` the channel's ``height`` (floats, arrays or tensors)."""
    return 4 * inflow_speed * y * (height - y) / height**2


def stencil_inside(mask: torch.Tensor) -> torch.Tensor:
    """Where a centred 5-point stencil lies in the fluid: ``mask`` ``(..., T, X, Y, Z)`` (2D)
    is 1 at the point and its four neighbours; ``(..., T, X-2, Y-2, 1)``, 0 or 1."""
    m = (mask > 0.5).to(mask.dtype)
    inside = stencils.interior(m, 2)
    for a in range(2):
        axis = m.ndim - 3 + a
        n = m.shape[axis]
        for start in (0, 2):
            inside = inside * stencils.interior_except(m.narrow(axis, start, n - 2), 2, a)
    return inside


class ObstacleChannel(Family):
    """What the channel families around obstacles share, steady (:class:`ChannelFlow`) or not
    (``channel_wake``): the 2D box :data:`LENGTHS`, the channels ``mask, u, v, p``, the walls
    and inlet, the symmetry the domain keeps and the resolution its smallest obstacle needs.
    Subclasses set the name, parameters (``reynolds`` and ``inflow_speed`` among them), draw,
    solve and residual."""

    dims = (2,)
    lengths = (*LENGTHS, 1.0)
    channels = (
        Channel(MASK, "fluid mask (1 in the fluid, 0 in the obstacles)", role="input"),
        Channel("u", "velocity x", "m s-1"),
        Channel("v", "velocity y", "m s-1"),
        Channel("p", "kinematic pressure", "m2 s-2"),
    )
    boundary_conditions = (
        "parabolic inflow at x = 0, no slip (u = 0) on the walls y = 0, H and on the "
        "obstacles, do-nothing outflow at x = L; 0 outside the fluid"
    )
    difficulty = "reynolds"
    expected_rate_space = 3.0  # P2 velocity, L2
    vectors = (("u", "v"),)

    @classmethod
    def symmetric_axes(cls, dim: int) -> tuple[int, ...]:
        """The reflection across the centre line ``y = H/2``: the inflow, the walls and the
        obstacles' draw are alike above and below it (``v`` changes sign)."""
        return (1,)

    @classmethod
    def unresolved(cls, grid: Grid, ranges: Mapping[str, tuple[float, float]]) -> str | None:
        """The smallest obstacle the family draws (radius ``RADII[0]``) needs
        :data:`~pdeladder.solvers.geometry.domain.POINTS_PER_DIAMETER` spacings across it."""
        smallest = Circle((LENGTHS[0] / 2, LENGTHS[1] / 2), RADII[0])
        return Domain(LENGTHS, (smallest,)).unresolved(grid.resolution)

    def with_walls(
        self,
        fields: torch.Tensor,
        params: torch.Tensor,
        grid: Grid,
        ends: list[tuple[bool, bool]] | None = None,
    ) -> torch.Tensor:
        """The walls' and the inlet's velocity set: no slip ``u = v = 0`` on the walls
        ``y = 0, H``, the parabolic inflow :func:`inflow` and ``v = 0`` at ``x = 0`` where
        ``fields`` ``(B, C, T, X, Y, Z)`` hold it (``ends``); the outlet (a do-nothing
        condition), the mask and the pressure as they are."""
        out = fields.clone()
        out[:, 1:3, :, :, 0] = 0.0
        out[:, 1:3, :, :, -1] = 0.0
        if ends is None or ends[0][0]:
            y = torch.arange(fields.shape[4], dtype=fields.dtype, device=fields.device)
            speed = params[:, self.Params.names().index("inflow_speed")].reshape(-1, 1, 1)
            out[:, 1, :, 0, :, 0] = inflow(y * grid.spacing[1], speed, grid.lengths[1])  # (B, T, Y)
            out[:, 2, :, 0] = 0.0
        return out


class ChannelFlow(ObstacleChannel):
    name = "channel_flow"
    title = "Steady Navier–Stokes around obstacles in a channel"
    equation = r"(u \cdot \nabla) u - \nu \Delta u + \nabla p = 0, \ \nabla \cdot u = 0"
    Params = ChannelFlowParams
    steady = True
    expected_rate_time = None
    convergence_plan: ClassVar[dict[str, Any]] = {
        # mesh size 2 m / cells far from the obstacle, a quarter of it on it
        "space": {"cells": (4, 8, 16), "steps": 1},
    }

    def initial_fields(
        self, params: ChannelFlowParams, grid: Grid, rng: np.random.Generator, comm: Any = None
    ) -> np.ndarray:
        """The mask of the drawn domain (:func:`draw_domain`, :func:`fluid_mask`); the outputs
        0."""
        mask = fluid_mask(draw_domain(rng), grid, grid.drawn_rows(comm))
        return np.stack([mask, *[np.zeros_like(mask)] * 3])

    def residual(self, fields: torch.Tensor, params: torch.Tensor, grid: Grid) -> torch.Tensor:
        """Momentum x, y and continuity at the interior points whose stencil lies in the fluid
        (:func:`stencil_inside`), 0 elsewhere: ``(B, 3, 1, X-2, Y-2, 1)``."""
        mask, u, v, p = fields.unbind(1)  # each (B, T, X, Y, Z)
        names = self.Params.names()
        nu = viscosity(
            stencils.broadcast_param(params, names.index("reynolds"), u),
            stencils.broadcast_param(params, names.index("inflow_speed"), u),
        )
        u_c, v_c = stencils.interior(u, 2), stencils.interior(v, 2)
        rows = [
            u_c * stencils.diff(w, 0, grid)
            + v_c * stencils.diff(w, 1, grid)
            - nu * stencils.laplacian(w, grid)
            + stencils.diff(p, a, grid)
            for a, w in enumerate((u, v))
        ]
        rows.append(stencils.diff(u, 0, grid) + stencils.diff(v, 1, grid))
        return torch.stack(rows, dim=1) * stencil_inside(mask)[:, None]
