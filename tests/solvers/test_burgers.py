"""Burgers: the family contract, the Cole–Hopf solution in 1D, energy decay and the maximum
principle."""

from mpi4py import MPI

import math

import numpy as np
import pytest

from pdeladder.solvers import get_family
from pdeladder.solvers.burgers.fem import SemiImplicitBdf2
from pdeladder.solvers.fem import box_mesh
from pdeladder.solvers.testing import FamilyContract


class TestBurgers(FamilyContract):
    family = "burgers"
    studies = {  # noqa: RUF012
        (1, "space"): (None, None),
        (1, "time"): (None, None),
        (2, "space"): (None, None),
        (2, "time"): (None, None),
        (3, "space"): (None, None),
        (3, "time"): (None, 4),
    }


def cole_hopf(x: np.ndarray, t: float, nu: float, terms: int = 60) -> np.ndarray:
    """Exact Burgers solution on (0, 1) with u = 0 at both ends and u(x, 0) = sin(πx):
    u = -2ν θ_x / θ, θ solving the heat equation with zero flux from θ_0 = exp(-∫u_0 / 2ν)."""
    s = np.linspace(0.0, 1.0, 4001)
    theta0 = np.exp(-(1 - np.cos(np.pi * s)) / (2 * np.pi * nu))
    n = np.arange(terms)
    a = np.trapezoid(theta0 * np.cos(np.pi * n[:, None] * s), s, axis=1) * np.where(n == 0, 1, 2)
    decay = a * np.exp(-((n * np.pi) ** 2) * nu * t)
    theta = decay @ np.cos(np.pi * n[:, None] * x)
    theta_x = -(decay * n * np.pi) @ np.sin(np.pi * n[:, None] * x)
    return -2 * nu * theta_x / theta


def final_velocity(
    nu: float, cells: int, steps: int, t_end: float
) -> tuple[np.ndarray, np.ndarray]:
    """Dof coordinates and values of the 1D solver's velocity at ``t_end`` from sin(πx)."""
    with SemiImplicitBdf2(box_mesh(MPI.COMM_SELF, 1, cells), nu, t_end / steps) as stepper:
        stepper.u.interpolate(lambda x: np.sin(np.pi * x[:1]))
        stepper.advance(steps)
        u = stepper.u
    return u.function_space.tabulate_dof_coordinates()[:, 0], u.x.array


@pytest.mark.parametrize(("nu", "tolerance"), [(0.1, 3e-5), (0.02, 1.5e-3)])
def test_one_dimensional_burgers_matches_cole_hopf(nu, tolerance):
    """The nonlinear term, checked without a manufactured source: the classic sin(πx) start
    steepens into a front near x = 1 (|u_x| ~ 1/ν) and decays; the maximum error falls at second
    order as space and time are refined together."""
    t_end, errors = 0.5, []
    for cells in (64, 128):
        x, u = final_velocity(nu, cells, cells, t_end)
        errors.append(np.abs(u - cole_hopf(x, t_end, nu)).max())
    assert errors[1] < tolerance, errors
    assert math.log2(errors[0] / errors[1]) > 1.8, errors


def test_energy_decays_in_1d_and_speed_obeys_the_maximum_principle():
    fam = get_family("burgers")
    for dim in (1, 2):
        grid = fam.grid(dim, 33, 11)
        sample = fam.run(fam.Params(viscosity=0.01), grid, seed=5)
        assert sample.ok, sample.stats.reason
        speed = np.sqrt(np.sum(sample.fields.astype(np.float64) ** 2, axis=1))  # (T, X, Y, Z)
        # max |u(t)| <= max |u0| (P1 Galerkin keeps it up to small overshoots at fronts)
        assert speed.max(axis=(1, 2, 3)).max() <= 1.02 * speed[0].max()
        # no-slip walls hold exactly
        walls = [np.take(speed, [0, -1], axis=1 + a) for a in range(dim)]
        assert all(np.all(w == 0) for w in walls)
        if dim == 1:  # ∫ u·(u·∇)u = 0 in 1D: kinetic energy can only fall
            energy = np.sum(speed**2, axis=(1, 2, 3))
            assert np.all(np.diff(energy) < 0), energy
            assert energy[-1] < 0.9 * energy[0]


def test_vector_channels_follow_the_dimension():
    fam = get_family("burgers")
    assert [fam.channel_names(d) for d in (1, 2, 3)] == [["u"], ["u", "v"], ["u", "v", "w"]]
