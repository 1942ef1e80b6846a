"""Data and equation losses, checked on heat-equation solver data."""

from mpi4py import MPI  # noqa: F401  (before DOLFINx)

import numpy as np
import pytest
import torch

from pdeladder.dataset.collate import make_batch
from pdeladder.dataset.slots import SlotLayout
from pdeladder.solvers import stencils
from pdeladder.solvers.registry import get_family
from pdeladder.trainer.distributed.slab import Slab
from pdeladder.trainer.losses import relative_errors, relative_loss, trapezoid_weights
from pdeladder.trainer.losses.equation import (
    equation_loss,
    family_views,
    relative_residual,
    step_residual,
    walled,
)
from pdeladder.trainer.training.processor import DataProcessor


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
    # the one boundary: the batch's (B, T, C, X, Y, Z) fields in the model's (B, C, T, X, Y, Z)
    assert truth.shape == (2, len(layout.slots), 9, 17, 17, 1)
    for t in range(9):
        assert torch.equal(truth[:, :, t], batch["fields"][:, t])
    back = proc.physical(proc.normalised(batch), family)
    torch.testing.assert_close(back, truth)


def test_trapezoid_weights_of_slabs_tile_the_whole_grid_bitwise():
    from pdeladder.trainer.distributed.slab import DomainTiling

    shape = (17, 9, 5, 1)
    layout = DomainTiling(t=4, x=2)
    whole = trapezoid_weights(shape)
    for i in range(layout.size):
        slab = layout.slab(shape, i)
        part = whole[slab.lo[0] : slab.hi[0], slab.lo[1] : slab.hi[1]]
        assert torch.equal(trapezoid_weights(shape, slab=slab), part)


def test_a_later_time_slab_needs_the_initial_state(heat_batch):
    from pdeladder.trainer.distributed.slab import DomainTiling
    from pdeladder.trainer.losses.equation import family_views

    batch, layout, truth = heat_batch
    slab = DomainTiling(t=2).slab(truth.shape[2:], 1)
    part = truth[:, :, slab.lo[0] :]
    with pytest.raises(ValueError, match="initial"):
        family_views(part, part, batch, layout, slab)
    ((_, _, _, trivial, _),) = family_views(part, part, batch, layout, slab, truth[:, :, :1])
    torch.testing.assert_close(trivial, truth[:, :, :1].expand_as(trivial))


def test_step_residual_is_the_implicit_midpoint_rule(heat_batch):
    """Row ``k`` is ``(u_{k+1} - u_k) / Δt - κ Δ((u_k + u_{k+1}) / 2)``: one equation per
    snapshot interval, ``T - 1`` of them."""
    batch, _, truth = heat_batch
    grid, fam = batch["grid"], get_family("heat")
    params = batch["params"][:, : len(fam.Params.names())]
    u = truth.double()
    got = step_residual(fam, u, params.double(), grid)
    kappa = params[:, 0].double().reshape(-1, 1, 1, 1, 1)
    mid = 0.5 * (u[:, 0, 1:] + u[:, 0, :-1])
    du = stencils.interior((u[:, 0, 1:] - u[:, 0, :-1]) / grid.dt, grid.dim)
    expected = du - kappa * stencils.laplacian(mid, grid)
    assert got.shape == (2, 1, grid.snapshots - 1, 15, 15, 1)
    torch.testing.assert_close(got[:, 0], expected)


@pytest.mark.parametrize("kind", ["zero", "no_flux"])
def test_with_walls_imposes_each_wall_the_slab_holds(kind):
    torch.manual_seed(0)
    f = torch.randn(2, 2, 3, 6, 5, 1, dtype=torch.float64, requires_grad=True)
    out = stencils.with_walls(f, [kind, None], 2, ends=[(False, True), (True, True)])
    u = out[:, 0]
    for axis, wall, near, next_ in ((2, -1, -2, -3), (3, 0, 1, 2), (3, -1, -2, -3)):
        w, n1, n2 = (u.select(axis, i) for i in (wall, near, next_))
        torch.testing.assert_close(
            w if kind == "zero" else 3 * w - 4 * n1 + n2, torch.zeros_like(w)
        )
    inside = (slice(None), slice(None), slice(0, -1), slice(1, -1))  # x's low wall: not held
    torch.testing.assert_close(u[inside], f[:, 0][inside])
    assert torch.equal(out[:, 1], f[:, 1])  # a channel without a wall condition
    (grad,) = torch.autograd.grad(out[:, 0].sum(), f)
    if kind == "zero":  # a zeroed wall point no longer depends on the prediction there
        assert grad[:, 0, :, -1].abs().max() == 0.0


def test_no_flux_walls_are_second_order_in_the_normal_derivative():
    """On ``g(x) + g(y)``, ``g = x²(1 - x)²``, whose normal derivative vanishes on every wall
    (and whose third does not), the no-flux completion moves the wall values by O(h³), its
    one-sided derivative being second order: 8x less on twice the points."""

    def moved(n: int) -> float:
        x = torch.linspace(0, 1, n, dtype=torch.float64)
        g = x.square() * (1 - x).square()
        f = (g[:, None] + g[None, :])[..., None]
        f = f[None, None, None]  # (1, 1, 1, X, Y, 1)
        change = stencils.with_walls(f, ["no_flux"], 2) - f
        return float(change[..., 0, 1:-1, :].abs().max())  # the x = 0 wall, corners aside

    coarse, fine = moved(17), moved(33)
    assert 0 < fine < coarse < 0.05
    assert coarse / fine == pytest.approx(8.0, rel=0.1)


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
    """Given only the initial state, the prediction that minimises the equation loss's residual,
    completed by its walls, is the solver's trajectory up to the discretisation: 2 % from it on
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

    completed = walled(
        _minimised(views, grid, ours), ["no_flux"], grid.dim, Slab.whole(u.shape[2:])
    )
    held, determined = error(trivial), error(completed)
    free = error(_minimised(views, grid, centred))
    assert held > 0.3
    assert determined < 0.05
    assert free > 5 * determined
