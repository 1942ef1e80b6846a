"""Advection–diffusion: the family contract, a discretely divergence-free velocity that is
tangential on the walls, and conservation of the total under zero-flux walls."""

from mpi4py import MPI

import numpy as np
import pytest
import torch
import ufl
from dolfinx import fem

from pdeladder.solvers import checks, get_family, stencils
from pdeladder.solvers.checks import Target
from pdeladder.solvers.fem import GridSampler, grid_mesh
from pdeladder.solvers.testing import FamilyContract, assert_passed


class TestAdvectionDiffusion(FamilyContract):
    family = "advection_diffusion"
    studies = {  # noqa: RUF012
        (1, "space"): (None, None),
        (1, "time"): (None, None),
        (2, "space"): (None, None),
        (2, "time"): (None, None),
    }


def grid_divergence(fields: np.ndarray, grid) -> float:
    """rms of the central-difference ∇·b over rms of |∇b|, for the stored velocity channels."""
    b = torch.from_numpy(fields[0, 1 : 1 + grid.dim]).double()  # (dim, X, Y, Z)
    div = stencils.divergence(b, grid, channel_axis=0)
    grads = torch.stack([d for a in range(grid.dim) for d in stencils.grad(b[a], grid)])
    return float(div.pow(2).mean().sqrt() / grads.pow(2).mean().sqrt())


def fem_divergence(fields: np.ndarray, grid) -> float:
    """‖∇·b_h‖ / ‖∇b_h‖ in L2 for the P1 interpolant ``b_h`` of the stored velocity."""
    msh = grid_mesh(MPI.COMM_SELF, grid)
    b = fem.Function(fem.functionspace(msh, ("Lagrange", 1, (grid.dim,))))
    GridSampler(b.function_space, grid).from_grid(b, fields[0, 1:].astype(np.float64))
    div = fem.assemble_scalar(fem.form(ufl.div(b) ** 2 * ufl.dx))
    grad = fem.assemble_scalar(fem.form(ufl.inner(ufl.grad(b), ufl.grad(b)) * ufl.dx))
    return float(np.sqrt(div / grad))


@pytest.mark.parametrize("dim", [2, 3])
def test_velocity_is_divergence_free_and_tangential_on_walls(dim):
    fam = get_family("advection_diffusion")
    params = fam.Params(velocity_length_scale=0.2)
    fem_ratios = []
    for res in (9, 17) if dim == 3 else (17, 33):
        sample = fam.run(params, fam.grid(dim, res, 2), seed=5)
        b = sample.fields[:, 1:]
        assert np.array_equal(b[0], b[-1])  # static, repeated over time
        for a in range(dim):  # normal component on both walls of axis a
            assert np.all(np.take(b[0, a], [0, res - 1], axis=a) == 0.0)
        # Central differences along different axes commute: zero up to float32 rounding.
        assert grid_divergence(sample.fields, sample.grid) < 1e-6
        fem_ratios.append(fem_divergence(sample.fields, sample.grid))
    # The P1 interpolant is divergence-free to first order in h.
    assert fem_ratios[0] < 0.4 and fem_ratios[1] < 0.6 * fem_ratios[0], fem_ratios


@pytest.mark.parametrize("dim", [1, 2])
def test_zero_flux_walls_conserve_the_total(dim):
    fam = get_family("advection_diffusion")
    grid = fam.grid(dim, 33, 9)
    peclet = 60.0 if dim == 1 else 500.0  # 1D: what 33 points resolve (at most 64)
    assert fam.unresolved(grid, {"peclet": (peclet, peclet)}) is None
    sample = fam.run(fam.Params(peclet=peclet), grid, seed=11)
    assert sample.ok, sample.stats.reason
    msh = grid_mesh(MPI.COMM_SELF, grid)
    V = fem.functionspace(msh, ("Lagrange", 1))
    sampler, u = GridSampler(V, grid), fem.Function(V)
    integral = fem.form(u * ufl.dx)
    totals = []
    for frame in sample.fields[:, 0]:
        sampler.from_grid(u, frame.astype(np.float64))
        totals.append(fem.assemble_scalar(integral))
    # The field is transported (it changes by its own size), yet its total stays (float32 storage).
    change = np.abs(sample.fields[-1, 0] - sample.fields[0, 0]).max()
    assert change > 0.3 * np.abs(sample.fields[0, 0]).max()
    np.testing.assert_allclose(totals, totals[0], atol=1e-6)


def test_in_1d_the_residual_falls_with_resolution_and_the_initial_field_meets_the_walls():
    """The 1D contract sample (Pe = 10, :meth:`check_params`): its residual falls under
    refinement (it grew 1.6-fold when the initial field ignored the walls' zero total flux, a
    layer of width sqrt(ε t) no grid resolves), and snapshot 0 is 0 on the walls."""
    fam = get_family("advection_diffusion")
    target = Target(fam, 1)
    assert target.sample.params.peclet == 10.0
    assert_passed(checks.residual(target))
    u0 = target.sample.fields[0, 0, :, 0, 0]
    assert max(abs(u0[0]), abs(u0[-1])) < 1e-12 * np.abs(u0).max()


@pytest.mark.parametrize("completion", ["total_flux", "mirrored"])
def test_in_1d_the_walls_hold_the_zero_total_flux(completion):
    """The steady outflow layer ``u = e^{Pe (x - 1)}`` (``b = U``, ``ε = U / Pe``) has zero total
    flux on both walls: completed by the family's walls, its residual, posed on the walls too,
    falls ``2^1.5``-fold when ``h`` halves (first order at the two wall points, whose ghost
    values carry the condition's ``h³ u‴ / 3``, second order inside: an rms over ``1/h``
    points); completed by mirrored planes (``∂u/∂x = 0``, the 2D/3D condition), it stays at
    the walls' mismatch."""
    fam = get_family("advection_diffusion")
    params = torch.tensor([[20.0, 1.0, 0.25, 0.15]], dtype=torch.float64)

    def rms(n: int) -> float:
        grid = fam.grid(1, n, 3)
        x = torch.linspace(0, 1, n, dtype=torch.float64)
        u = torch.exp(20.0 * (x - 1)).expand(3, n)
        fields = torch.stack([u, torch.ones_like(u)])[None, ..., None, None]  # (1, 2, T, X, 1, 1)
        if completion == "total_flux":
            walled = fam.with_walls(fields, params, grid)
        else:
            walled = stencils.with_walls(fields, ["no_flux", None], [[False, True]], 1)
        assert walled.shape[3] == n + 2
        return float(fam.residual(walled, params, grid).square().mean().sqrt())

    ratio = rms(65) / rms(129)
    if completion == "total_flux":
        assert ratio == pytest.approx(2**1.5, rel=0.1)
    else:
        assert ratio < 1.5, ratio


@pytest.mark.parametrize(("resolution", "peclet", "says"), [
    (17, 100.0, "use a resolution of at least 51 or a Péclet number of at most 32"),
    (17, 32.0, None),
    (129, 200.0, None),
])  # fmt: skip
def test_a_1d_grid_that_cannot_resolve_the_outflow_layer_is_named(resolution, peclet, says):
    fam = get_family("advection_diffusion")
    why = fam.unresolved(fam.grid(1, resolution, 5), {"peclet": (10.0, peclet)})
    assert why == says or (says is not None and why.endswith(says)), why
    assert fam.unresolved(fam.grid(2, 17, 5), {"peclet": (10.0, 2000.0)}) is None  # no layer
