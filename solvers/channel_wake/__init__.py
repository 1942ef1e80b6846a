r"""Unsteady incompressible flow through a channel around obstacles: vortex shedding.

Strong form, on the steady family's domain :math:`\Omega` (:mod:`pdeladder.solvers.channel_flow`:
the box :math:`(0, L) \times (0, H)` less its obstacles), in kinematic units (:math:`p` is the
pressure over the density):

.. math::
    \partial_t u + (u \cdot \nabla) u - \nu \Delta u + \nabla p = 0, \qquad
    \nabla \cdot u = 0 \quad \text{in } \Omega \times (0, T],

with the parabolic inflow :math:`u = (4 U y (H - y) / H^2, 0)` at :math:`x = 0` (maximum
:math:`U`, mean :math:`\bar U = 2U/3`), no slip :math:`u = 0` on the walls :math:`y = 0, H` and
on the obstacles, and the do-nothing outflow :math:`\nu \partial_n u - p n = 0` at :math:`x =
L`. Weak form (per time step, BDF2): find :math:`(u, p)` with those Dirichlet values such that
for all :math:`(v, q)` vanishing there

.. math::
    (\partial_\tau u, v) + ((u^* \cdot \nabla) u, v) + \nu (\nabla u, \nabla v)
    - (p, \nabla \cdot v) - (q, \nabla \cdot u) = 0,

:math:`\partial_\tau` the BDF2 difference and :math:`u^*` the extrapolated velocity
(:mod:`pdeladder.solvers.channel_wake.fem`).

As a family (:class:`ChannelWake`), each sample draws its obstacles as the steady family does
(:func:`~pdeladder.solvers.channel_flow.draw_domain`: 1 to 3 circles in the box 2 m x 2 m; the
seed fixes the domain and with it the asymmetry that starts the shedding). The solve starts
from the steady flow at a low Reynolds number, spins up unstored for ``spin_up`` convective
times :math:`D / \bar U` (:func:`convective_time`), and stores the window after it: snapshot 0
is the flow at the end of the spin-up. The input channel ``mask`` marks the grid points in the
fluid; the outputs ``u, v, p`` are 0 outside it. The Reynolds number (of the largest diameter
drawn, as the steady family's) is in the shedding regime.

The DFG benchmark 2D-3 (Schäfer & Turek 1996) is this problem on the DFG channel with the
inflow :math:`U(t) = 1.5 \sin(\pi t / 8)` m/s over 8 s (Re up to 100): :data:`DFG_2D3_PARAMS`,
:data:`DFG_2D3_BOUNDS`, :data:`DFG_2D3_REFERENCE` (``benchmarks/dfg_unsteady.py``).

This module is the physics without the FEM (no DOLFINx or PETSc import).
"""

from typing import Any, ClassVar

import numpy as np
import torch

from pdeladder.solvers import stencils
from pdeladder.solvers.channel_flow import (
    DIAMETER,
    Flow,
    ObstacleChannel,
    stencil_inside,
    viscosity,
)
from pdeladder.solvers.family import Parameters, parameter
from pdeladder.solvers.grid import Grid

#: The internal time step is at most this many grid spacings per inflow maximum U
#: (:func:`~pdeladder.solvers.channel_wake.fem.steps_per_snapshot`).
COURANT = 0.5


class ChannelWakeParams(Parameters):
    """Reynolds number, inflow and spin-up. A cylinder sheds vortices from Re ≈ 47 unconfined;
    the obstacles here block much of the channel, which delays it: three obstacles (seed 7, 33
    points) stayed steady at Re 200 and shed at Re 300 (Strouhal numbers 1.2, on the mean
    inflow and each diameter: the flow through the gaps is faster); at the low end of the range
    a draw may stay steady (its provenance's ``strouhal`` is then None)."""

    reynolds: float = parameter(
        300.0,
        200.0,
        300.0,
        "1",
        "Reynolds number Ū D / ν of an obstacle of the largest diameter drawn, D = 0.6 m "
        "(Ū = 2U/3 the mean inflow); sets the viscosity ν",
    )
    inflow_speed: float = parameter(
        0.3, 0.1, 1.0, "m s-1", "maximum U of the parabolic inflow (its mean Ū is 2U/3)"
    )
    spin_up: float = parameter(
        20.0,
        0.0,
        40.0,
        "1",
        "unstored time before snapshot 0, in convective times D / Ū (D = 0.6 m), from the "
        "steady flow at Re 10",
    )


def convective_time(inflow_speed: Any) -> Any:
    """``D / Ū`` in seconds for the inflow maximum ``inflow_speed`` (m/s), ``D`` =
    :data:`~pdeladder.solvers.channel_flow.DIAMETER`."""
    return DIAMETER / (2 * inflow_speed / 3)


def force_summary(
    coefficients: np.ndarray, tau: float, mean: float, diameter: float
) -> dict[str, float | None]:
    """A drag and lift history's summary: ``coefficients`` ``(steps, 2)`` (c_D, c_L) every
    ``tau`` seconds (at least one step), for an obstacle of ``diameter`` (m) in the mean inflow ``mean`` (m/s).

    Returns the maxima and means of both, the lift's amplitude (half its range) and the
    Strouhal number ``D / (Ū P)``, ``P`` the mean period between the lift's upward crossings of
    its mean (interpolated linearly); None where the history holds fewer than two periods or
    the lift does not oscillate (amplitude below 1e-3)."""
    drag, lift = coefficients[:, 0], coefficients[:, 1]
    amplitude = float(lift.max() - lift.min()) / 2
    s = lift - lift.mean()
    up = np.flatnonzero((s[:-1] < 0) & (s[1:] >= 0))
    crossings = (up + s[up] / (s[up] - s[up + 1])) * tau
    strouhal = None
    if amplitude > 1e-3 and len(crossings) >= 3:
        period = float(np.diff(crossings).mean())
        strouhal = diameter / (mean * period)
    return {
        "c_D_max": float(drag.max()),
        "c_D_mean": float(drag.mean()),
        "c_L_max": float(lift.max()),
        "c_L_mean": float(lift.mean()),
        "c_L_amplitude": amplitude,
        "strouhal": strouhal,
    }


#: The DFG 2D-3 channel and cylinder are the steady benchmark's; its flow: ν = 1e-3 m²/s and
#: the inflow maximum 1.5 sin(π t / 8) m/s over 8 s (the coefficients refer to Ū = 1 m/s).
DFG_2D3_PARAMS = Flow(viscosity=1e-3, inflow_speed=1.5)
DFG_2D3_T_END = 8.0

#: Bounds on the maxima of c_D and c_L over (0, 8] s and on Δp = p(0.15, 0.2) - p(0.25, 0.2) at
#: t = 8 s (m²/s², ρ = 1), published by Schäfer & Turek (1996) for 2D-3.
DFG_2D3_BOUNDS = {"c_D_max": (2.93, 2.97), "c_L_max": (0.47, 0.49), "delta_p": (-0.115, -0.105)}

#: Reference values computed on fine meshes by V. John, "Reference values for drag and lift of
#: a two-dimensional time-dependent flow around a cylinder", Int. J. Numer. Meth. Fluids 44
#: (2004) 777-788 (c_D's maximum at t = 3.93625 s, c_L's at 5.693125 s), as FeatFlow's
#: dfg_benchmark3_re100 page lists them.
DFG_2D3_REFERENCE = {"c_D_max": 2.950921575, "c_L_max": 0.47795, "delta_p": -0.1116}


class ChannelWake(ObstacleChannel):
    name = "channel_wake"
    title = "Unsteady Navier–Stokes around obstacles in a channel (vortex shedding)"
    equation = (
        r"\partial_t u + (u \cdot \nabla) u - \nu \Delta u + \nabla p = 0, \ \nabla \cdot u = 0"
    )
    Params = ChannelWakeParams
    #: the window: four convective times D / Ū at the default inflow (Ū = 0.2 m/s), about
    #: five shedding periods of the three obstacles at Re 300 (2.5 s)
    t_end = 12.0
    expected_rate_time = 2.0  # BDF2
    convergence_plan: ClassVar[dict[str, Any]] = {
        "space": {"cells": (4, 8, 16), "steps": 4},
        "time": {"steps": (8, 16, 32), "cells": 4},
    }
    # the contract's window: one convective time at its inflow (check_params), 4 intervals
    check_snapshots = 5
    check_t_end = 9.0

    @classmethod
    def check_params(cls, dim: int) -> ChannelWakeParams:
        """The contract sample: the slowest inflow, spun up for one convective time only (9 s;
        its solves take seconds)."""
        return cls.Params(inflow_speed=0.1, spin_up=1.0)

    def initial_fields(
        self, params: ChannelWakeParams, grid: Grid, rng: np.random.Generator, comm: Any = None
    ) -> np.ndarray:
        """Snapshot 0 is the flow at the end of the spin-up: the FEM part solves it."""
        return self.fem().initial_fields(self, params, grid, rng, comm)

    def residual(self, fields: torch.Tensor, params: torch.Tensor, grid: Grid) -> torch.Tensor:
        """Momentum x, y (with the central time derivative) and continuity times the inflow
        maximum ``U`` (so that every row is an acceleration, m/s²) at the interior snapshots
        and points whose stencil lies in the fluid (:func:`stencil_inside`), 0 elsewhere:
        ``(B, 3, T-2, X-2, Y-2, 1)``."""
        mask, u, v, p = fields.unbind(1)  # each (B, T, X, Y, Z)
        names = self.Params.names()
        speed = stencils.broadcast_param(params, names.index("inflow_speed"), u)
        nu = viscosity(stencils.broadcast_param(params, names.index("reynolds"), u), speed)
        u_mid, v_mid, p_mid = (stencils.time_interior(f) for f in (u, v, p))
        u_c, v_c = stencils.interior(u_mid, 2), stencils.interior(v_mid, 2)
        rows = [
            stencils.interior(stencils.time_derivative(w, grid), 2)
            + u_c * stencils.diff(w_mid, 0, grid)
            + v_c * stencils.diff(w_mid, 1, grid)
            - nu * stencils.laplacian(w_mid, grid)
            + stencils.diff(p_mid, a, grid)
            for a, (w, w_mid) in enumerate(((u, u_mid), (v, v_mid)))
        ]
        rows.append(speed * (stencils.diff(u_mid, 0, grid) + stencils.diff(v_mid, 1, grid)))
        inside = stencil_inside(stencils.time_interior(mask))
        return torch.stack(rows, dim=1) * inside[:, None]
