"""Allen–Cahn: the family contract, the maximum principle and the decay of the free energy."""

from mpi4py import MPI

import numpy as np
import pytest
import ufl
from dolfinx import fem

from pdeladder.solvers import get_family
from pdeladder.solvers.fem import GridSampler, grid_mesh
from pdeladder.solvers.lumped_mass import VERTEX_QUADRATURE
from pdeladder.solvers.testing import FamilyContract


class TestAllenCahn(FamilyContract):
    family = "allen_cahn"
    studies = {  # noqa: RUF012
        (1, "space"): (None, None),
        (1, "time"): (None, None),
        (2, "space"): (None, None),
        (2, "time"): (None, None),
    }


@pytest.fixture(scope="module")
def separating():
    """A 2D sample from data that touches ±1, with thin interfaces."""
    fam = get_family("allen_cahn")
    params = fam.Params(epsilon=0.02, ic_amplitude=1.0, ic_length_scale=0.1)
    return fam.run(params, fam.grid(2, 33, 21), seed=4)


def test_maximum_principle(separating):
    u = separating.fields[:, 0]
    assert np.abs(u[0]).max() == pytest.approx(1.0, abs=1e-6)
    assert np.abs(u).max() <= 1.0 + 1e-6
    # Phases separate: most of the box ends near ±1.
    assert np.mean(np.abs(u[-1]) > 0.9) > 0.5


def test_free_energy_does_not_increase(separating):
    grid, eps = separating.grid, separating.params.epsilon
    msh = grid_mesh(MPI.COMM_SELF, grid)
    V = fem.functionspace(msh, ("Lagrange", 1))
    sampler, u = GridSampler(V, grid), fem.Function(V)
    # The discrete energy of the scheme: exact gradient term, lumped (vertex) double well.
    energy = fem.form(
        0.5 * eps**2 * ufl.inner(ufl.grad(u), ufl.grad(u)) * ufl.dx
        + 0.25 * (1 - u**2) ** 2 * ufl.dx(metadata=VERTEX_QUADRATURE)
    )
    values = []
    for frame in separating.fields[:, 0]:
        sampler.from_grid(u, frame.astype(np.float64))
        values.append(fem.assemble_scalar(energy))
    values = np.array(values)
    assert np.all(np.diff(values) <= 1e-6 * values[0]), values
    assert values[-1] < 0.5 * values[0]
