"""Darcy: the family contract, plus the discrete maximum principle, linearity in the source and
convergence to the exact 1D solution (the integrated flux) for a rough sampled permeability."""

from mpi4py import MPI  # noqa: I001

import numpy as np
import pytest

import ufl
from dolfinx import fem

from pdeladder.solvers import get_family
from pdeladder.solvers.darcy.fem import solve_darcy
from pdeladder.solvers.fem import box_mesh
from pdeladder.solvers.testing import FamilyContract


class TestDarcy(FamilyContract):
    family = "darcy"
    studies = {  # noqa: RUF012
        (1, "space"): (None, None),
        (2, "space"): (None, None),
        (3, "space"): ((4, 8, 16), None),
    }


@pytest.fixture(scope="module")
def fam():
    return get_family("darcy")


@pytest.mark.parametrize("dim", [2, 3])
def test_pressure_obeys_the_maximum_principle(fam, dim):
    # f > 0 and p = 0 on the walls: p >= 0 (the P1 stiffness on these meshes is an M-matrix).
    grid = fam.grid(dim, 17 if dim == 2 else 9, 1)
    sample = fam.run(fam.Params(log_permeability_std=2.5, length_scale=0.1), grid, seed=5)
    p = sample.fields[0, 1]
    walls = np.ones(grid.shape, dtype=bool)
    walls[tuple(slice(1, -1) if n > 1 else slice(None) for n in grid.shape)] = False
    assert np.all(p[walls] == 0.0)
    assert p.min() >= -1e-7 * p.max() and p.max() > 0


def test_pressure_is_linear_in_the_source(fam):
    grid = fam.grid(2, 17, 1)
    one = fam.run(fam.Params(source=1.0), grid, seed=2)
    three = fam.run(fam.Params(source=3.0), grid, seed=2)
    np.testing.assert_array_equal(one.fields[0, 0], three.fields[0, 0])  # same permeability
    np.testing.assert_allclose(three.fields[0, 1], 3 * one.fields[0, 1], rtol=1e-5, atol=1e-9)


def test_one_dimensional_pressure_converges_to_the_integrated_flux(fam):
    # In 1D the flux is q = -k p' = f x + q0, so p = -∫ (f s + q0) / k ds with p(0) = p(1) = 0:
    # an exact solution for a sample's own rough permeability (a piecewise linear on its grid),
    # which the P1 solution on refined meshes must approach at second order.
    params = fam.Params(log_permeability_std=1.5, length_scale=0.1, source=2.0)
    grid = fam.grid(1, 17, 1)
    a = fam.run(params, grid, seed=4).fields[0, 0, :, 0, 0].astype(np.float64)
    x = np.linspace(0.0, 1.0, 1000 * grid.cells + 1)
    inv_k = np.exp(-np.interp(x, grid.axis(0), a))

    def integral(g):  # cumulative trapezoid from 0
        return np.concatenate([[0.0], np.cumsum(0.5 * (g[1:] + g[:-1]) * np.diff(x))])

    i0, i1 = integral(inv_k), integral(x * inv_k)
    exact = -params.source * (i1 - i1[-1] / i0[-1] * i0)
    errors = []
    for refine in (1, 2, 4):
        msh = box_mesh(MPI.COMM_SELF, 1, refine * grid.cells)
        V = fem.functionspace(msh, ("Lagrange", 1))
        a_h = fem.Function(V)
        a_h.interpolate(lambda y: np.interp(y[0], grid.axis(0), a))
        p_h, _ = solve_darcy(V, ufl.exp(a_h), params.source)
        nodes = msh.geometry.x[:, 0]
        order = np.argsort(nodes)
        p_grid = np.interp(grid.axis(0), nodes[order], p_h.x.array[order])  # the sample's nodes
        errors.append(np.abs(p_grid - exact[::1000]).max() / exact.max())
    assert errors[0] < 0.1
    assert errors[1] < errors[0] / 3 and errors[2] < errors[1] / 3, errors
