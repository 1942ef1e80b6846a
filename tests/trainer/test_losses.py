"""Data and equation losses, checked on heat-equation solver data."""

from mpi4py import MPI  # noqa: F401  (before DOLFINx)

import dataclasses
import itertools
import math

import numpy as np
import pytest
import torch

from pdeladder.dataset.collate import make_batch
from pdeladder.dataset.slots import SlotLayout
from pdeladder.slabs import Slab
from pdeladder.solvers import stencils
from pdeladder.solvers.registry import get_family
from pdeladder.trainer.losses import relative_errors, relative_loss, trapezoid_weights
from pdeladder.trainer.losses.equation import (
    equation_loss,
    family_views,
    relative_residual,
    step_residual,
    walled,
)
from pdeladder.trainer.processor import DataProcessor


def solved_heat(snapshots: int, draws: list[tuple[int, dict]]):
    """A batch of real 2D heat solves on 17² (one per ``(seed, params)``), its layout and its
    physical fields ``(B, C, T, X, Y, Z)``."""
    fam = get_family("heat")
    grid = fam.grid(2, 17, snapshots)
    samples = [fam.run(fam.parse_params(p), grid, seed=s) for s, p in draws]
    layout = SlotLayout.for_families(["heat"], [2])
    fields = np.stack([s.fields for s in samples])
    params = np.stack([s.params.vector() for s in samples])
    layout.set_normalisation({"heat": {"u": (float(fields.mean()), float(fields.std()))}})
    batch = make_batch(layout, "heat", grid, fields, params, solved=True)
    return batch, layout, DataProcessor(layout).fields(batch)


@pytest.fixture(scope="module")
def heat_batch():
    return solved_heat(9, [(1, {"diffusivity": 0.005}), (2, {"diffusivity": 0.01})])


def test_trapezoid_weights_integrate_linear_functions_exactly():
    w = trapezoid_weights((5, 9, 1, 1))
    x = torch.linspace(0, 1, 9)
    assert w.sum().item() == pytest.approx(1.0)
    assert (w[..., 0, 0] * x).sum().item() == pytest.approx(0.5)


def test_relative_l2_and_h1_values():
    torch.manual_seed(0)
    u = torch.randn(3, 2, 4, 8, 8, 1)
    assert relative_errors(u, u).abs().max() < 1e-7
    torch.testing.assert_close(relative_errors(2 * u, u), torch.ones(3, 2))
    torch.testing.assert_close(relative_errors(2 * u, u, h1=True), torch.ones(3, 2))
    mask = torch.tensor([[True, False]] * 3)
    wrong = u.clone()
    wrong[:, 1] = 0  # an error in a masked-out channel does not count
    assert relative_loss(wrong, u, mask).item() < 1e-7


def test_residual_is_small_on_solver_data_and_large_when_perturbed(heat_batch):
    batch, layout, truth = heat_batch
    small, per_family = equation_loss(truth, truth, batch, layout)
    torch.manual_seed(0)
    noisy = truth + 0.05 * truth.std() * torch.randn_like(truth)
    large, _ = equation_loss(noisy, truth, batch, layout)
    assert small.item() < 2e-2
    assert large.item() > 20 * small.item()
    assert float(per_family["heat"]) == pytest.approx(small.item())


def test_equation_term_is_capped_at_the_trivial_prediction(heat_batch):
    # A prediction with more residual than the initial state held constant contributes 1 and no
    # gradient (the term never pulls toward the trivial prediction); below that it is the ratio.
    batch, layout, truth = heat_batch
    torch.manual_seed(1)
    rough = (truth + truth.std() * torch.randn_like(truth)).requires_grad_(True)
    loss, per_family = equation_loss(rough, truth, batch, layout)
    assert per_family["heat"] > 10.0  # the uncapped ratio is what is logged
    assert loss.item() == 1.0
    (grad,) = torch.autograd.grad(loss, rough)
    assert grad.abs().max().item() == 0.0
    trivial = truth[:, :, :1].expand_as(truth)
    halfway, per_family = equation_loss(0.5 * (truth + trivial), truth, batch, layout)
    assert 0.05 < halfway.item() < 1.0
    assert halfway.item() == pytest.approx(per_family["heat"])


def test_physics_loss_agrees_with_the_data(heat_batch):
    # Along any direction away from the solver data, the equation loss grows: the data sit at
    # (near) the minimum of the physics loss, so adding it does not pull the fit off the data.
    batch, layout, given = heat_batch
    truth = given.clone().requires_grad_(True)
    at_truth, _ = equation_loss(truth, given, batch, layout)
    (grad,) = torch.autograd.grad(at_truth, truth)
    torch.manual_seed(3)
    for _ in range(3):
        d = torch.randn_like(truth)
        d[:, :, 0] = 0  # the initial state is given
        d = d / d.norm() * truth.detach().norm() * 0.02
        moved, _ = equation_loss(truth.detach() + d, given, batch, layout)
        assert moved.item() > at_truth.item()
        assert abs((grad * d).sum().item()) < moved.item() - at_truth.item()


def test_processor_round_trip(heat_batch):
    batch, layout, truth = heat_batch
    proc = DataProcessor(layout)
    x, family = proc.inputs(batch)
    assert x.shape == (2, layout.in_channels, 9, 17, 17, 1)
    # the batch's fields (B, C, T, X, Y, Z) are the model's order: the processor only moves them
    assert truth.shape == (2, len(layout.slots), 9, 17, 17, 1)
    assert torch.equal(truth, batch["fields"])
    back = proc.physical(proc.normalised(batch), family)
    torch.testing.assert_close(back, truth)


def test_trapezoid_weights_of_slabs_tile_the_whole_grid_bitwise():
    from pdeladder.slabs import DomainTiling

    shape = (17, 9, 5, 1)
    layout = DomainTiling(t=4, x=2)
    whole = trapezoid_weights(shape)
    for i in range(layout.size):
        slab = layout.slab(shape, i)
        part = whole[slab.lo[0] : slab.hi[0], slab.lo[1] : slab.hi[1]]
        assert torch.equal(trapezoid_weights(shape, slab=slab), part)


def test_a_later_time_slab_needs_the_initial_state(heat_batch):
    from pdeladder.slabs import DomainTiling
    from pdeladder.trainer.losses.equation import family_views

    batch, layout, truth = heat_batch
    slab = DomainTiling(t=2).slab(truth.shape[2:], 1)
    part = truth[:, :, slab.lo[0] :]
    with pytest.raises(ValueError, match="initial"):
        family_views(part, part, batch, layout, slab)
    ((_, _, _, trivial, _),) = family_views(part, part, batch, layout, slab, truth[:, :, :1])
    torch.testing.assert_close(trivial, truth[:, :, :1].expand_as(trivial))


def test_step_residual_is_the_fourth_order_interval_rule(heat_batch):
    """Row ``k`` is ``D_k / Δt - κ Δ V_k`` at the interval's midpoint, ``D`` and ``V`` the
    derivative and value of the cubic through the four snapshots nearest it: ``(u_{k-1} - 27
    u_k + 27 u_{k+1} - u_{k+2}) / 24`` and ``(-u_{k-1} + 9 u_k + 9 u_{k+1} - u_{k+2}) / 16``
    inside the series; at its ends the quartic through the five nearest (a one-sided cubic's
    derivative would be third order); one equation per snapshot interval."""
    batch, _, truth = heat_batch
    grid, fam = batch["grid"], get_family("heat")
    params = batch["params"][:, : len(fam.Params.names())].double()
    u = truth.double()
    got = step_residual(fam, u, params, grid)
    kappa = params[:, 0].reshape(-1, 1, 1, 1)
    f64 = torch.float64
    inner_d = torch.tensor([1.0, -27, 27, -1], dtype=f64) / 24
    inner_v = torch.tensor([-1.0, 9, 9, -1], dtype=f64) / 16
    first_d = torch.tensor([-22.0, 17, 9, -5, 1], dtype=f64) / 24  # five snapshots: 4th order
    first_v = torch.tensor([35.0, 140, -70, 28, -5], dtype=f64) / 128
    assert got.shape == (2, 1, grid.snapshots - 1, 15, 15, 1)
    for k in range(grid.snapshots - 1):
        if k == 0:
            nodes, d, v = u[:, 0, 0:5], first_d, first_v
        elif k == grid.snapshots - 2:  # the first interval's rule, mirrored in time
            nodes, d, v = u[:, 0, k - 3 : k + 2], -first_d.flip(0), first_v.flip(0)
        else:
            nodes, d, v = u[:, 0, k - 1 : k + 3], inner_d, inner_v
        du = torch.einsum("j,bjxyz->bxyz", d, nodes) / grid.dt
        mid = torch.einsum("j,bjxyz->bxyz", v, nodes)
        expected = stencils.interior(du, 2) - kappa * stencils.laplacian(mid[:, None], grid)[:, 0]
        torch.testing.assert_close(got[:, 0, k], expected)


def test_step_residual_of_two_snapshots_is_the_implicit_midpoint_rule(heat_batch):
    batch, _, truth = heat_batch
    fam = get_family("heat")
    grid = dataclasses.replace(batch["grid"], snapshots=2, t_end=batch["grid"].dt)
    params = batch["params"][:, : len(fam.Params.names())].double()
    u = truth.double()[:, :, :2]
    kappa = params[:, 0].reshape(-1, 1, 1, 1, 1)
    du = stencils.interior((u[:, 0, 1:] - u[:, 0, :1]) / grid.dt, grid.dim)
    expected = du - kappa * stencils.laplacian(0.5 * (u[:, 0, 1:] + u[:, 0, :1]), grid)
    torch.testing.assert_close(step_residual(fam, u, params, grid)[:, 0], expected)


def test_the_time_rule_is_fourth_order():
    """On the space-discrete heat equation's exact solution ``e^{λ_h κ t} cos(πx) cos(πy)``
    (``λ_h`` the discrete Laplacian's eigenvalue: no spatial error), the residual is the time
    rule's error alone: it falls 16x when ``Δt`` halves."""
    fam, kappa, n = get_family("heat"), 0.05, 17

    def residual(snapshots: int) -> float:
        grid = fam.grid(2, n, snapshots)
        lam = 2 * (2 * math.cos(math.pi * grid.h) - 2) / grid.h**2
        t = torch.linspace(0, grid.t_end, snapshots, dtype=torch.float64)
        x = torch.linspace(0, 1, n, dtype=torch.float64)
        space = torch.cos(torch.pi * x)[:, None] * torch.cos(torch.pi * x)[None, :]
        u = (torch.exp(lam * kappa * t)[:, None, None] * space)[None, None, ..., None]
        params = torch.tensor([[kappa, 0.2]], dtype=torch.float64)
        r = step_residual(fam, walled(fam, u, params, grid, Slab.whole(u.shape[2:])), params, grid)
        return float(r.square().mean().sqrt())

    errors = [residual(s) for s in (9, 17, 33)]
    rates = [math.log2(a / b) for a, b in itertools.pairwise(errors)]
    assert rates == pytest.approx([4.0, 4.0], abs=0.3)


def test_zero_walls_are_set_on_the_walls_the_slab_holds():
    torch.manual_seed(0)
    f = torch.randn(2, 2, 3, 6, 5, 1, dtype=torch.float64, requires_grad=True)
    odd = [[False, False], [False, False]]
    out = stencils.with_walls(f, ["zero", None], odd, 2, ends=[(False, True), (True, True)])
    assert out.shape == f.shape
    u = out[:, 0]  # (B, T, X, Y, Z)
    for wall in (u[:, :, -1], u[:, :, :, 0], u[:, :, :, -1]):
        assert wall.abs().max() == 0
    torch.testing.assert_close(u[:, :, :-1, 1:-1], f[:, 0, :, :-1, 1:-1])  # x's low wall: not held
    assert torch.equal(out[:, 1], f[:, 1])  # a channel without a wall condition
    (grad,) = torch.autograd.grad(out[:, 0].sum(), f)
    assert grad[:, 0, :, -1].abs().max() == 0.0  # a zeroed wall no longer depends on f there


def test_no_flux_walls_mirror_every_channel_a_vector_along_its_axis_oddly():
    """Advection–diffusion's ``u`` (no flux) and its velocity ``b``: one plane past each wall
    holds ``f_1`` (``f_{n-2}``), with ``b``'s component along the axis negated."""
    torch.manual_seed(0)
    f = torch.randn(1, 3, 2, 6, 5, 1, dtype=torch.float64)
    odd = [[False, True, False], [False, False, True]]  # u, bx, by along x and along y
    out = stencils.with_walls(f, ["no_flux", None, None], odd, 2)
    assert out.shape == (1, 3, 2, 8, 7, 1)
    torch.testing.assert_close(out[..., 1:-1, 1:-1, :], f)
    sign = torch.tensor([1.0, -1.0, 1.0], dtype=f.dtype).reshape(1, 3, 1, 1, 1)
    torch.testing.assert_close(out[..., 0, 1:-1, :], sign * f[..., 1, :, :])
    torch.testing.assert_close(out[..., -1, 1:-1, :], sign * f[..., -2, :, :])
    sign = torch.tensor([1.0, 1.0, -1.0], dtype=f.dtype).reshape(1, 3, 1, 1, 1)
    torch.testing.assert_close(out[..., 1:-1, 0, :], sign * f[..., :, 1, :])
    ends = [(True, False), (True, True)]  # a slab without x's high wall
    assert stencils.with_walls(f, ["no_flux", None, None], odd, 2, ends).shape[3] == 7


def test_the_residual_is_second_order_on_the_walls_too():
    """Heat's exact solution ``e^{-2κπ²t} cos(πx) cos(πy)`` (no flux on every wall): the loss's
    residual, posed on every point including the walls, falls 4x when ``h`` and ``Δt`` halve."""
    fam = get_family("heat")
    kappa = 0.05

    def residual(n: int, snapshots: int) -> float:
        grid = fam.grid(2, n, snapshots)
        t = torch.linspace(0, grid.t_end, snapshots, dtype=torch.float64)
        x = torch.linspace(0, 1, n, dtype=torch.float64)
        space = torch.cos(torch.pi * x)[:, None] * torch.cos(torch.pi * x)[None, :]
        u = (torch.exp(-2 * kappa * torch.pi**2 * t)[:, None, None] * space)[None, None, ..., None]
        params = torch.tensor([[kappa, 0.2]], dtype=torch.float64)
        x = walled(fam, u, params, grid, Slab.whole(u.shape[2:]))
        r = step_residual(fam, x, params, grid)
        assert r.shape[3:5] == (n, n)  # the walls are residual points
        return float(r.square().mean().sqrt())

    coarse, fine = residual(17, 9), residual(33, 17)
    assert coarse / fine == pytest.approx(4.0, rel=0.15)


def _minimised(views, grid, residual) -> torch.Tensor:
    """The predicted snapshots 1.. that minimise ``residual(u)`` from the initial state held,
    the initial state given (L-BFGS to convergence)."""
    (_, _, truth, trivial, params) = views
    free = trivial[:, :, 1:].clone().requires_grad_(True)
    opt = torch.optim.LBFGS(
        [free], max_iter=600, history_size=50, line_search_fn="strong_wolfe",
        tolerance_grad=1e-12, tolerance_change=1e-14,
    )  # fmt: skip

    def closure():
        opt.zero_grad()
        loss = residual(torch.cat([truth[:, :, :1], free], dim=2), trivial, params).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return torch.cat([truth[:, :, :1], free.detach()], dim=2)


@pytest.fixture(scope="module")
def smooth_heat_batch():
    """11 snapshots of initial states that the grid resolves (length scale 0.3)."""
    return solved_heat(
        11, [(s, {"diffusivity": d, "ic_length_scale": 0.3}) for s, d in ((1, 0.01), (2, 0.05))]
    )


def test_the_residual_determines_the_solution(smooth_heat_batch):
    """Given only the initial state, the prediction that minimises the equation loss's residual
    is the solver's trajectory up to the discretisation: 1 % from it on
    17² heat with 11 snapshots, where the initial state held is 38 % off. The families' centred
    residual on the prediction as it is leaves the odd snapshots and the walls free: its
    minimiser is 29 % off."""
    batch, layout, truth = smooth_heat_batch
    grid, fam = batch["grid"], get_family("heat")
    ((_, _, u, trivial, params),) = family_views(truth, truth, batch, layout)
    u, trivial, params = u.double(), trivial.double(), params.double()
    views = (None, None, u, trivial, params)

    def ours(x, ref, p):
        return relative_residual("heat", x, ref, p, grid)

    def centred(x, ref, p):
        return fam.residual(x, p, grid).square().sum() / fam.residual(ref, p, grid).square().sum()

    def error(x):
        dims = (2, 3, 4, 5)
        return float(((x - u).square().sum(dims) / u.square().sum(dims)).sqrt().mean())

    held, determined = error(trivial), error(_minimised(views, grid, ours))
    free = error(_minimised(views, grid, centred))
    assert held > 0.3
    assert determined < 0.05
    assert free > 5 * determined
