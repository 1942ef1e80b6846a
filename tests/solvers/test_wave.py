"""Wave: the family contract, conservation of the discrete energy, and time reversibility."""

from mpi4py import MPI

import contextlib
from collections.abc import Iterator

import numpy as np
import pytest
import ufl
from dolfinx import fem

from pdeladder.solvers import get_family
from pdeladder.solvers.fem import GridSampler, grid_mesh
from pdeladder.solvers.grid import Grid
from pdeladder.solvers.random_fields import gaussian_random_field, wall_bubble
from pdeladder.solvers.testing import FamilyContract
from pdeladder.solvers.wave.fem import CrankNicolson


class TestWave(FamilyContract):
    family = "wave"
    studies = {  # noqa: RUF012
        (1, "space"): (None, None),
        (1, "time"): (None, None),
        (2, "space"): (None, None),
        (2, "time"): (None, None),
        (3, "space"): (None, None),
        (3, "time"): (None, 4),
    }


def energy(u: fem.Function, v: fem.Function, c: float) -> fem.Form:
    """The discrete energy ½ (M v, v) + ½ c² (K u, u) as a form."""
    return fem.form(0.5 * (v**2 + c**2 * ufl.inner(ufl.grad(u), ufl.grad(u))) * ufl.dx)


def random_state(grid: Grid, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Smooth random displacement and velocity, zero on the walls: ``(X, Y, Z)`` each."""
    rng = np.random.default_rng(seed)
    return tuple(wall_bubble(grid) * gaussian_random_field(grid.shape, 0.15, rng) for _ in range(2))


@contextlib.contextmanager
def started(
    grid: Grid, c: float, u0: np.ndarray, v0: np.ndarray
) -> Iterator[tuple[CrankNicolson, GridSampler]]:
    """The stepper at Courant number 1/2 from the grid values ``(u0, v0)``, and its sampler."""
    tau = 0.5 * grid.h / c
    with CrankNicolson(grid_mesh(MPI.COMM_SELF, grid), c, tau) as stepper:
        sampler = GridSampler(stepper.V, grid)
        sampler.from_grid(stepper.u, u0)
        sampler.from_grid(stepper.v, v0)
        yield stepper, sampler


@pytest.mark.parametrize(("dim", "resolution", "steps"), [(1, 129, 500), (2, 33, 200), (3, 9, 100)])
def test_crank_nicolson_conserves_the_discrete_energy(dim, resolution, steps):
    """Exactly, up to the linear solver: Cholesky in 1D/2D, CG (rtol 1e-10) in 3D. Energy moves
    between its kinetic and potential parts meanwhile."""
    grid, c = Grid(dim, resolution, 2, 1.0), 1.5
    u0, v0 = random_state(grid, seed=dim)
    total, kinetic = [], []
    with started(grid, c, u0, v0) as (stepper, _):
        forms = energy(stepper.u, stepper.v, c), fem.form(0.5 * stepper.v**2 * ufl.dx)
        for _ in stepper.run(steps):  # the state is stepped in place
            total.append(fem.assemble_scalar(forms[0]))
            kinetic.append(fem.assemble_scalar(forms[1]))
    total, kinetic = np.array(total), np.array(kinetic)
    drift = np.abs(total / total[0] - 1).max()
    assert drift < 1e-8, drift
    assert np.ptp(kinetic) > 0.2 * total[0]


def test_crank_nicolson_is_time_reversible():
    """Running back from (u_N, -v_N) for N steps returns to (u_0, -v_0)."""
    grid, c, steps = Grid(2, 25, 2, 1.0), 1.0, 80
    u0, v0 = random_state(grid, seed=4)

    def final(u: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        with started(grid, c, u, v) as (stepper, sampler):
            stepper.advance(steps)
            return sampler.to_grid(stepper.u)[0], sampler.to_grid(stepper.v)[0]

    u_n, v_n = final(u0, v0)
    assert np.abs(u_n - u0).max() > 0.1 * np.abs(u0).max()  # it did move
    u_back, v_back = final(u_n, -v_n)
    np.testing.assert_allclose(u_back, u0, atol=1e-10 * np.abs(u0).max())
    np.testing.assert_allclose(v_back, -v0, atol=1e-9 * np.abs(v0).max())


def test_stored_samples_keep_their_energy():
    """The stored (u, v) frames are the solver's state: their energy holds to float32 rounding,
    while a displacement-only start turns into motion."""
    fam = get_family("wave")
    grid = fam.grid(2, 33, 11)
    params = fam.Params(wave_speed=1.2)
    sample = fam.run(params, grid, seed=2)
    assert sample.ok, sample.stats.reason
    V = fem.functionspace(grid_mesh(MPI.COMM_SELF, grid), ("Lagrange", 1))
    sampler, u, v = GridSampler(V, grid), fem.Function(V), fem.Function(V)
    form = energy(u, v, params.wave_speed)
    energies = []
    for frame in sample.fields.astype(np.float64):
        sampler.from_grid(u, frame[0])
        sampler.from_grid(v, frame[1])
        energies.append(fem.assemble_scalar(form))
    np.testing.assert_allclose(energies, energies[0], rtol=1e-5)
    assert np.all(sample.fields[0, 1] == 0) and np.abs(sample.fields[-1, 1]).max() > 0.1
