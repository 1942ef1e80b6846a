r"""Steady heat conduction in a layered chip stack: a powered silicon die, a bond layer and a
copper spreader, cooled through a heat sink on top.

Strong form, for the temperature rise :math:`\theta = T - T_\infty` (K) on the box
:math:`\Omega = (0, W)^{d-1} \times (0, H)`, :math:`d = 2, 3`, the stack along the last axis
:math:`s` (:math:`y` in 2D, :math:`z` in 3D):

.. math::
    -\nabla \cdot (k \nabla \theta) = q \quad \text{in } \Omega, \qquad
    -k \partial_s \theta = h \theta \text{ at } s = H \text{ (the sink)}, \qquad
    k \nabla \theta \cdot n = 0 \text{ on the other faces},

with :math:`k` (W/m/K) constant in each layer and :math:`q` (W/m³) zero outside the die. Across
an interface the temperature and the normal flux :math:`k \partial_s \theta` are continuous.

Each sample draws its stack from the seed (:func:`draw_stack`), alike at every resolution: the
layer thicknesses as whole units of :math:`H/16` (:data:`UNITS`), so that every interface lies on
a grid point of every grid of :math:`16 m + 1` points per axis; the conductivities from
:data:`CONDUCTIVITY`; the die's power map as a uniform background and 1 to 4 Gaussian hot spots
whose total is the mean heat flux parameter times the footprint. The parameters are that flux,
the sink coefficient :math:`h` and the smallest hot-spot width (the difficulty: a narrower spot
is a sharper peak to resolve and to learn).

Grid values of the inputs, which jump at the interfaces, follow one rule
(:func:`layer_of_cells`): the point :math:`j` along :math:`s` holds the values of the layer
above it, that of the cell :math:`[s_j, s_{j+1}]`, and the top point the top layer's. The
residual (:meth:`ChipStack.residual`) is the finite-volume balance of the control volume
:math:`[s_{j-1/2}, s_{j+1/2}]` around each point: face conductivity :math:`k_{j+1/2} = k_j`
along :math:`s` (exact with that rule), the volume's mean :math:`(k_{j-1} + k_j)/2` laterally,
and source :math:`(q_{j-1} + q_j)/2`; it is exact on the layered solution of a laterally uniform
power (quadratic in the die, linear above). :meth:`ChipStack.with_walls` completes a sample by
the walls' conditions, so that the residual holds on the walls too, and there pins the
temperature level through the sink.

This module is the physics without the FEM (no DOLFINx or PETSc import). The weak form, the
solve, the quantities a sample reports (hot-spot temperature, heat through the sink), the
manufactured solution and the published spreading-resistance benchmark are in
:mod:`pdeladder.solvers.chip_stack.fem`.
"""

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from pdeladder.solvers import stencils
from pdeladder.solvers.family import Channel, Family, Parameters, parameter
from pdeladder.solvers.grid import Grid

#: The footprint's side W and the stack's thickness H (metres).
WIDTH, THICKNESS = 10e-3, 1.6e-3
#: Layers, bottom to top, and their thicknesses' range in units of H / UNITS (the spreader takes
#: the rest: 8 to 12 units). Two units at least each, so that the 17 points of the coarsest
#: grid put two spacings across every layer.
LAYERS = ("die", "bond", "spreader")
UNITS = 16
DIE_UNITS, BOND_UNITS = (2, 5), (2, 3)
#: Conductivity ranges (W/m/K): silicon, a thermal interface or solder bond (log-uniform),
#: copper.
CONDUCTIVITY = {"die": (100.0, 150.0), "bond": (1.0, 10.0), "spreader": (300.0, 400.0)}
#: Hot spots per sample, the band of their centres (m, per lateral axis), the fraction of the
#: power they carry (the rest is uniform), and the spread of their widths (multiples of the
#: smallest, the parameter).
SPOTS, CENTRES, HOT_FRACTION, WIDTH_SPREAD = (1, 4), (1e-3, 9e-3), (0.3, 0.8), (1.0, 2.0)


class ChipStackParams(Parameters):
    heat_flux: float = parameter(
        5e4,
        1e4,
        1.5e5,
        "W m-2",
        "mean heat flux of the die: its total power over the footprint's area (1-15 W/cm²)",
    )
    sink_coefficient: float = parameter(
        1e4, 2e3, 5e4, "W m-2 K-1", "heat transfer coefficient h of the sink on the top face"
    )
    hot_spot_width: float = parameter(
        1e-3,
        5e-4,
        2e-3,
        "m",
        "smallest hot-spot width σ (each spot's Gaussian exp(-r²/2σ_i²) has σ_i in [σ, 2σ])",
    )


@dataclass(frozen=True)
class Stack:
    """One sample's stack in 2D (one lateral axis) or 3D (two).

    Attributes:
        units: layer thicknesses bottom to top (:data:`LAYERS`) in units of ``H / UNITS``.
        conductivity: the layers' conductivities (W/m/K).
        background: the die's uniform power density (W/m³).
        amplitudes, centres, widths: the hot spots' peak power densities (W/m³), centres
            ``(spots, d - 1)`` and widths σ_i (m): each adds ``A_i exp(-|x - c_i|² / 2σ_i²)``
            to the die's power density.
    """

    units: tuple[int, ...]
    conductivity: tuple[float, ...]
    background: float
    amplitudes: tuple[float, ...]
    centres: tuple[tuple[float, ...], ...]
    widths: tuple[float, ...]

    @property
    def interfaces(self) -> tuple[float, ...]:
        """The tops of the layers along the stack axis (m), the last ``H``."""
        return tuple(THICKNESS * u / UNITS for u in np.cumsum(self.units).tolist())

    @property
    def die_thickness(self) -> float:
        """The die's thickness (m)."""
        return THICKNESS * self.units[0] / UNITS

    def power_map(self, lateral: np.ndarray) -> np.ndarray:
        """The die's power density (W/m³) at lateral points ``(d - 1, ...)`` (m)."""
        q = np.full(lateral.shape[1:], self.background)
        for a, c, w in zip(self.amplitudes, self.centres, self.widths, strict=True):
            r2 = sum((lateral[i] - c[i]) ** 2 for i in range(len(c)))
            q = q + a * np.exp(-r2 / (2 * w**2))
        return q


def gaussian_mass(centre: float, width: float) -> float:
    """``∫_0^W exp(-(x - c)² / 2σ²) dx`` (m)."""
    s = math.sqrt(2) * width
    return width * math.sqrt(math.pi / 2) * (math.erf((WIDTH - centre) / s) + math.erf(centre / s))


def draw_stack(params: ChipStackParams, dim: int, rng: np.random.Generator) -> Stack:
    """A sample's stack, drawn from ``rng`` (independent of the grid): layer units, then
    conductivities, then the hot spots' count, power fraction, shares, centres and widths.
    The power map integrates to ``heat_flux W^(d-1)`` over the die (W/m in 2D, W in 3D)."""
    die = int(rng.integers(DIE_UNITS[0], DIE_UNITS[1] + 1))
    bond = int(rng.integers(BOND_UNITS[0], BOND_UNITS[1] + 1))
    units = (die, bond, UNITS - die - bond)
    lo, hi = CONDUCTIVITY["bond"]
    conductivity = (
        float(rng.uniform(*CONDUCTIVITY["die"])),
        float(math.exp(rng.uniform(math.log(lo), math.log(hi)))),
        float(rng.uniform(*CONDUCTIVITY["spreader"])),
    )
    count = int(rng.integers(SPOTS[0], SPOTS[1] + 1))
    hot = float(rng.uniform(*HOT_FRACTION))
    shares = rng.dirichlet(np.ones(count))
    centres = rng.uniform(*CENTRES, size=(count, dim - 1))
    widths = params.hot_spot_width * rng.uniform(*WIDTH_SPREAD, size=count)
    t_die = THICKNESS * die / UNITS
    power = params.heat_flux * WIDTH ** (dim - 1)  # W/m in 2D, W in 3D
    amplitudes = [
        hot * power * share / (t_die * math.prod(gaussian_mass(x, w) for x in c))
        for share, c, w in zip(shares, centres, widths, strict=True)
    ]
    return Stack(
        units=units,
        conductivity=conductivity,
        background=(1 - hot) * params.heat_flux / t_die,
        amplitudes=tuple(amplitudes),
        centres=tuple(tuple(c) for c in centres.tolist()),
        widths=tuple(widths.tolist()),
    )


def layer_of_cells(units: tuple[int, ...], resolution: int) -> np.ndarray:
    """The layer (index into :data:`LAYERS`) that each grid point along the stack axis takes
    its inputs from, ``(resolution,)`` int: point ``j`` that of the cell ``[j, j+1]`` (the one
    holding its midpoint, in exact integer arithmetic), the top point the top layer's."""
    cells = resolution - 1
    j = np.minimum(np.arange(resolution), cells - 1)
    tops = np.cumsum(units)  # in units of H / UNITS
    # the midpoint of cell j is (2j + 1) H / (2 cells): below the top of layer i when
    # (2j + 1) UNITS < 2 cells tops[i]
    return np.searchsorted(2 * cells * tops, (2 * j + 1) * UNITS, side="right")


def stack_inputs(stack: Stack, grid: Grid, rows: tuple[int, int] | None = None) -> np.ndarray:
    """The input channels ``conductivity`` and ``power`` at the grid points, float64
    ``(2, X, Y, Z)`` (or the x ``rows`` only), by :func:`layer_of_cells`'s rule."""
    x = grid.mesh_grid(rows)
    s = grid.dim - 1
    layer = layer_of_cells(stack.units, grid.resolution)
    shape = [1, 1, 1]
    shape[s] = grid.resolution
    layer = layer.reshape(shape)
    k = np.asarray(stack.conductivity)[layer] * np.ones(x.shape[1:])
    q = np.where(layer == 0, stack.power_map(x[:s]), 0.0)
    return np.stack([k, q])


class ChipStack(Family):
    name = "chip_stack"
    title = "Steady heat in a layered chip stack"
    equation = r"-\nabla \cdot (k \nabla \theta) = q"
    dims = (2, 3)
    Params = ChipStackParams
    #: the 3D box (m); in 2D the box is ``(W, H)``, the stack along y (:meth:`box`)
    lengths = (WIDTH, WIDTH, THICKNESS)
    channels = (
        Channel("conductivity", "thermal conductivity", "W m-1 K-1", role="input"),
        Channel("power", "power density", "W m-3", role="input"),
        Channel("temperature", "temperature rise above the ambient", "K"),
    )
    boundary_conditions = (
        "heat sink -k dθ/dn = h θ on the top face (the stack axis's high end), "
        "adiabatic (zero flux) on every other face"
    )
    difficulty = "hot_spot_width"
    steady = True
    t_end = 0.0
    expected_rate_space = 3.0  # P2, L2
    expected_rate_time = None
    convergence_plan: ClassVar[dict[str, Any]] = {
        "space": {"cells": (8, 16, 32), "steps": 1},
        "space_3d": {"cells": (4, 8, 16), "steps": 1},
    }

    @staticmethod
    def box(dim: int) -> tuple[float, ...]:
        """The box's lengths (m) in ``dim`` dimensions: the footprint, then the stack."""
        return (WIDTH,) * (dim - 1) + (THICKNESS,)

    @classmethod
    def grid(cls, dim: int, resolution: int, snapshots: int, t_end: float | None = None) -> Grid:
        """:meth:`Family.grid` on the box of ``dim`` dimensions (:meth:`box`)."""
        grid = super().grid(dim, resolution, snapshots, t_end)
        return dataclasses.replace(grid, lengths=cls.box(dim))

    @classmethod
    def symmetric_axes(cls, dim: int) -> tuple[int, ...]:
        """The lateral axes: the layers, the sink and the hot spots' draw are alike along them,
        so their reflections (and in 3D the swap of x and y: the footprint is square) map a
        stack to another; the stack's axis, bottom to top, is no symmetry."""
        return tuple(range(dim - 1))

    @classmethod
    def unresolved(cls, grid: Grid, ranges: Mapping[str, tuple[float, float]]) -> str | None:
        """Interfaces lie on grid points only when ``resolution - 1`` is a multiple of
        :data:`UNITS` (every layer then has two spacings at least); the narrowest hot spot
        needs a lateral spacing of at most its width."""
        narrowest = ranges["hot_spot_width"][0]
        lateral = max(UNITS, UNITS * math.ceil(WIDTH / narrowest / UNITS))
        problems = []
        if grid.cells % UNITS:
            problems.append(f"{grid.cells} cells do not put the layer interfaces on grid points")
        if grid.cells < lateral:
            problems.append(
                f"a spacing of {WIDTH / grid.cells:.3g} m exceeds a hot spot's "
                f"width {narrowest:g} m"
            )
        if not problems:
            return None
        need = max(lateral, UNITS * math.ceil(grid.cells / UNITS)) + 1
        return (
            f"{cls.name}: a grid of {grid.resolution} points per axis: {'; '.join(problems)}; "
            f"use a resolution of {UNITS} n + 1 points, at least {need}"
        )

    def initial_fields(
        self, params: ChipStackParams, grid: Grid, rng: np.random.Generator, comm: Any = None
    ) -> np.ndarray:
        """The drawn stack's inputs (:func:`stack_inputs`); the temperature 0."""
        inputs = stack_inputs(draw_stack(params, grid.dim, rng), grid, grid.drawn_rows(comm))
        return np.concatenate([inputs, np.zeros_like(inputs[:1])])

    def residual(self, fields: torch.Tensor, params: torch.Tensor, grid: Grid) -> torch.Tensor:
        """The control-volume balance ``-∇·(k∇θ) - q`` (W/m³) at the interior points,
        ``(B, 1, 1, X-2, Y-2, Z')``: on all the original points after :meth:`with_walls`."""
        k, q, theta = fields.unbind(1)  # each (B, T, X, Y, Z)
        s = grid.dim - 1
        axis_s = theta.ndim - 3 + s
        n = theta.shape[axis_s]

        def lower(f: torch.Tensor) -> torch.Tensor:  # points 0..n-2 along s
            return f.narrow(axis_s, 0, n - 1)

        def upper(f: torch.Tensor) -> torch.Tensor:  # points 1..n-1 along s
            return f.narrow(axis_s, 1, n - 1)

        # along the stack: face conductivity k_{j+1/2} = k_j
        flux = lower(k) * (upper(theta) - lower(theta)) / grid.spacing[s]
        div = flux.narrow(axis_s, 1, n - 2) - flux.narrow(axis_s, 0, n - 2)
        out = stencils.interior_except(div / grid.spacing[s], grid.dim, s)
        # laterally, in the control volume's mean conductivity (k_{j-1} + k_j) / 2
        k_volume = 0.5 * (lower(k) + upper(k)).narrow(axis_s, 0, n - 2)
        theta_s = theta.narrow(axis_s, 1, n - 2)
        for a in range(s):
            axis = theta.ndim - 3 + a
            m = theta.shape[axis]
            k_face = 0.5 * (k_volume.narrow(axis, 1, m - 1) + k_volume.narrow(axis, 0, m - 1))
            step = theta_s.narrow(axis, 1, m - 1) - theta_s.narrow(axis, 0, m - 1)
            lateral = k_face * step / grid.spacing[a]
            d = (lateral.narrow(axis, 1, m - 2) - lateral.narrow(axis, 0, m - 2)) / grid.spacing[a]
            out = out + stencils.interior_except(d, s, a)
        source = 0.5 * (lower(q) + upper(q)).narrow(axis_s, 0, n - 2)
        return (-out - stencils.interior(source, s)).unsqueeze(1)

    def with_walls(
        self,
        fields: torch.Tensor,
        params: torch.Tensor,
        grid: Grid,
        ends: list[tuple[bool, bool]] | None = None,
    ) -> torch.Tensor:
        """``fields`` ``(B, C, T, X, Y, Z)`` with one ghost plane past each wall it holds
        (``ends``: per active axis, whether it holds the low and the high wall; default
        every wall), so that
        :meth:`residual` poses the balance on the walls too:

        - adiabatic walls (the lateral ones, the bottom): every channel mirrored,
          ``f_{-1} = f_1``; at the bottom the inputs take the cell mirror, ``k_{-1} = k_0``
          (point 0 holds the cell ``[0, 1]``'s, :func:`layer_of_cells`);
        - the sink (the top, point ``N-1``): ``θ_N = θ_{N-2} - 2 Δ (h / k_{N-1}) θ_{N-1}``,
          the central difference of ``-k ∂θ/∂s = h θ``, ``Δ`` the stack spacing; the inputs
          repeat the top plane's.
        """
        s = grid.dim - 1
        ends = ends or [(True, True)] * grid.dim
        lateral = [*ends[:s], (False, False)]
        out = stencils.mirrored(fields, [[False] * fields.shape[1]] * grid.dim, grid.dim, lateral)
        axis = out.ndim - 3 + s
        n = out.shape[axis]
        parts = [out]
        if ends[s][0]:
            k0, q0, _ = out.narrow(axis, 0, 1).unbind(1)
            theta1 = out[:, 2].narrow(axis - 1, 1, 1)
            parts.insert(0, torch.stack([k0, q0, theta1], dim=1))
        if ends[s][1]:
            k, q, theta = out.narrow(axis, n - 1, 1).unbind(1)
            h = stencils.broadcast_param(params, self.Params.names().index("sink_coefficient"), k)
            below = out[:, 2].narrow(axis - 1, n - 2, 1)
            ghost = below - 2 * grid.spacing[s] * h / k * theta
            parts.append(torch.stack([k, q, ghost], dim=1))
        return torch.cat(parts, dim=axis)
