"""Heat: the family contract, plus conservation of the mean under zero-flux walls."""

from mpi4py import MPI

import numpy as np
import ufl
from dolfinx import fem

from pdeladder.solvers import get_family
from pdeladder.solvers.fem import GridSampler, grid_mesh
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
