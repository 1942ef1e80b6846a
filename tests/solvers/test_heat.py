"""Heat: the family contract, conservation of the mean under zero-flux walls, and a failed solve
that releases what it made."""

from mpi4py import MPI

import numpy as np
import pytest
import ufl
from dolfinx import fem

from pdeladder.errors import SolveError
from pdeladder.solvers import get_family
from pdeladder.solvers.family import SolveStats
from pdeladder.solvers.fem import GridSampler, grid_mesh
from pdeladder.solvers.grid import Grid
from pdeladder.solvers.heat.fem import ImplicitEuler
from pdeladder.solvers.testing import FamilyContract


class TestHeat(FamilyContract):
    family = "heat"
    studies = {  # noqa: RUF012
        (1, "space"): (None, None),
        (1, "time"): (None, 128),
        (2, "space"): ((8, 16, 32), None),
        (2, "time"): ((8, 16, 32), 32),
    }


def test_zero_flux_heat_keeps_its_mean():
    fam = get_family("heat")
    grid = fam.grid(2, 25, 9)
    sample = fam.run(fam.Params(diffusivity=0.05), grid, seed=11)
    msh = grid_mesh(MPI.COMM_SELF, grid)
    V = fem.functionspace(msh, ("Lagrange", 1))
    sampler, u = GridSampler(V, grid), fem.Function(V)
    integral = fem.form(u * ufl.dx)
    means = []
    for frame in sample.fields[:, 0]:
        sampler.from_grid(u, frame.astype(np.float64))
        means.append(fem.assemble_scalar(integral))
    # The field decays by orders of magnitude of variance, yet its mean stays (float32 storage).
    assert np.std(sample.fields[-1]) < 0.5 * np.std(sample.fields[0])
    np.testing.assert_allclose(means, means[0], atol=1e-6)


def test_a_failed_step_releases_the_petsc_objects_and_keeps_the_statistics():
    """A fault injected into step 3 of 5 reaches the caller; leaving the stepper's block destroys
    every PETSc object it made, and the statistics count the two steps solved."""

    class FailingStep(ImplicitEuler):
        def step(self, n: int) -> int:
            if n == 3:
                raise SolveError("injected fault")
            return super().step(n)

    grid, stats = Grid(1, 9, 2, 1.0), SolveStats()
    stepper = FailingStep(grid_mesh(MPI.COMM_SELF, grid), 0.02, 0.2)
    made = [stepper.M, stepper.A, stepper.ksp, stepper.b]
    assert all(made)
    one = ImplicitEuler(grid_mesh(MPI.COMM_SELF, grid), 0.02, 0.2)
    with one:
        one.advance(1)
        per_step = one.ksp.getIterationNumber()
    with pytest.raises(SolveError, match="injected fault"), stepper:
        stepper.sampled(5, 1, lambda n, u: u.x.array[None, :, None, None].copy(), stats)
    assert not any(made)  # every handle destroyed
    assert (stats.dofs, stats.steps, stats.krylov_iterations) == (9, 5, 2 * per_step)


def test_a_stepper_that_fails_while_assembling_releases_what_it_made():
    made = []

    class FailingSetup(ImplicitEuler):
        def __init__(self, *args):
            super().__init__(*args)
            made.extend([self.M, self.A, self.ksp, self.b])
            raise SolveError("injected fault")

    with pytest.raises(SolveError, match="injected fault"):
        FailingSetup(grid_mesh(MPI.COMM_SELF, Grid(1, 9, 2, 1.0)), 0.02, 0.2)
    assert len(made) == 4 and not any(made)
