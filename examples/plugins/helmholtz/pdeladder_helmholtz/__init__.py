r"""Helmholtz equation: the steady, frequency-domain wave equation, driven by a random source.

Strong form, on the unit box :math:`\Omega = (0, 1)^d`, :math:`d = 1, 2, 3`:

.. math::
    -\Delta u - k^2 u = f \quad \text{in } \Omega, \qquad u = 0 \text{ on } \partial\Omega,

the amplitude :math:`u` of a time-harmonic wave :math:`U(x, t) = u(x) \cos \omega t` of
wavenumber :math:`k = \omega / c` (an acoustic pressure in a box with pressure-release walls,
one component of an electric field in a cavity), forced by a source :math:`f` that is a
Gaussian random field of length scale :math:`\ell` and standard deviation :math:`\sigma`.

**Well posed below the first resonance.** The Dirichlet eigenvalues of :math:`-\Delta` on the
unit box are :math:`\pi^2 (n_1^2 + \dots + n_d^2)`, the smallest :math:`d \pi^2` (mode
:math:`\prod_i \sin \pi x_i`). While :math:`k^2 < d \pi^2` the operator
:math:`-\Delta - k^2` is positive definite and every source has one solution; at an eigenvalue
the box resonates and uniqueness is lost, and between eigenvalues the operator is indefinite.
The wavenumber's range, :math:`0 \le k \le 3 < \pi`, keeps :math:`k^2 \le 9 < \pi^2 \le d \pi^2`
in every dimension, so every drawn sample is well posed. The wavenumber is the difficulty: the
solution operator multiplies the lowest mode of :math:`f` by :math:`1 / (d \pi^2 - k^2)`, which
in 1D grows elevenfold from :math:`k = 0` to :math:`k = 3`, so the map from :math:`f` to
:math:`u` depends ever more sharply on :math:`k` as it nears resonance.

This module is the physics without the FEM (no DOLFINx or PETSc import): parameters, channels,
the drawn source and the strong-form residual, so a trainer computes residuals without loading
DOLFINx. The weak form and manufactured solution are in :mod:`pdeladder_helmholtz.fem`,
imported on the first solve.
"""

from typing import Any, ClassVar

import numpy as np
import torch

from pdeladder.solvers import stencils
from pdeladder.solvers.family import Channel, Family, Parameters, parameter
from pdeladder.solvers.grid import Grid
from pdeladder.solvers.random_fields import gaussian_random_field


class HelmholtzParams(Parameters):
    wavenumber: float = parameter(
        2.0, 0.0, 3.0, "1", "wavenumber k (unit box); k < π keeps k² below the first resonance"
    )
    source_length_scale: float = parameter(
        0.15, 0.05, 0.5, "1", "correlation length ℓ of the source f"
    )
    source_std: float = parameter(1.0, 0.1, 10.0, "1", "standard deviation σ of the source f")


class Helmholtz(Family):
    name = "helmholtz"
    title = "Helmholtz equation with a random source"
    equation = r"-\Delta u - k^2 u = f"
    dims = (1, 2, 3)
    Params = HelmholtzParams
    channels = (
        Channel("f", "source", role="input"),
        Channel("u", "wave amplitude", wall="zero"),
    )
    boundary_conditions = "u = 0 (homogeneous Dirichlet) on all walls"
    box_symmetric = True  # isotropic source, the same wall everywhere, -Δ - k² commutes with both
    difficulty = "wavenumber"
    steady = True
    t_end = 0.0
    expected_rate_space = 2.0
    expected_rate_time = None
    convergence_plan: ClassVar[dict[str, Any]] = {
        "space": {"cells": (8, 16, 32), "steps": 1},
        "space_3d": {"cells": (4, 8, 16), "steps": 1},
    }

    def initial_fields(
        self, params: HelmholtzParams, grid: Grid, rng: np.random.Generator, comm: Any = None
    ) -> np.ndarray:
        f = gaussian_random_field(
            grid.shape,
            params.source_length_scale,
            rng,
            std=params.source_std,
            rows=grid.drawn_rows(comm),
        )
        return np.stack([f, np.zeros_like(f)])  # (2, X, Y, Z): the amplitude is the solve's

    def residual(self, fields: torch.Tensor, params: torch.Tensor, grid: Grid) -> torch.Tensor:
        f, u = fields[:, 0], fields[:, 1]  # (B, T, X, Y, Z), T = 1
        k = stencils.broadcast_param(params, self.Params.names().index("wavenumber"), u)
        # every term at the interior points, (B, 1, X', Y', Z'), where the stencil is defined
        lhs = -stencils.laplacian(u, grid) - k**2 * stencils.interior(u, grid.dim)
        return (lhs - stencils.interior(f, grid.dim)).unsqueeze(1)  # (B, 1, 1, X', Y', Z')
