"""The chip_stack family (solvers/chip_stack): the contract in 2D (3D slow); the stack drawn alike
at every resolution, interfaces on grid points, inputs by the layer-above rule; energy balance
and the hot spot of a sample; the residual exact on the layered 1D solution once completed by
the walls, and pinned by the sink; the spreading-resistance series reproduced by the FEM; grids
that cut a layer refused in one line."""

from mpi4py import MPI  # noqa: F401  (before DOLFINx)

import dataclasses
import math

import numpy as np
import pytest
import torch

from pdeladder.errors import UserInputError
from pdeladder.solvers.checks import run_checks
from pdeladder.solvers.chip_stack import (
    THICKNESS,
    UNITS,
    WIDTH,
    ChipStack,
    draw_stack,
    layer_of_cells,
)
from pdeladder.solvers.family import sample_generator
from pdeladder.solvers.testing import FamilyContract

FAMILY = ChipStack()


class TestChipStack(FamilyContract):
    family = "chip_stack"


@pytest.mark.slow
def test_the_contract_holds_in_3d():
    failed = [r for r in run_checks(FAMILY, dim=3) if not r.passed]
    assert not failed, failed


def as_batch(fields: np.ndarray) -> torch.Tensor:
    """A stored ``(T, C, X, Y, Z)`` as the residual's float64 ``(1, C, T, X, Y, Z)``."""
    return torch.from_numpy(np.asarray(fields, dtype=np.float64)).movedim(0, 1)[None]


def walled_rms(fields: torch.Tensor, params: np.ndarray, grid) -> float:
    p = torch.from_numpy(params)[None]
    r = FAMILY.residual(FAMILY.with_walls(fields, p, grid), p, grid)
    return float(r.pow(2).mean().sqrt())


@pytest.fixture(scope="module")
def sample():
    s = FAMILY.run(FAMILY.Params(), FAMILY.grid(2, 33, 1), seed=3)
    assert s.ok, s.stats.reason
    return s


@pytest.mark.parametrize("dim", [2, 3])
def test_the_seed_draws_one_stack_at_every_resolution(dim):
    coarse, fine = FAMILY.grid(dim, 17, 1), FAMILY.grid(dim, 33, 1)
    a, b = (FAMILY.draw_inputs(FAMILY.Params(), g, seed=5) for g in (coarse, fine))
    np.testing.assert_array_equal(a, b[(slice(None), *[slice(None, None, 2)] * dim)])
    assert not a[2].any()  # the temperature is the solve's
    stack = draw_stack(FAMILY.Params(), dim, sample_generator(5))
    assert sum(stack.units) == UNITS and min(stack.units) >= 2
    assert stack.interfaces[-1] == pytest.approx(THICKNESS)
    # point j holds the layer of the cell [j, j+1] above it; the interfaces are grid points
    k = a[0].reshape(-1, 17)[0] if dim == 2 else a[0][0, 0]
    tops = np.cumsum(stack.units) * 16 // UNITS  # grid indices of the layers' tops at 17
    expected = np.repeat(stack.conductivity, np.diff([0, *tops]))
    np.testing.assert_array_equal(k, np.append(expected, expected[-1]).astype(np.float32))
    assert not np.array_equal(a, FAMILY.draw_inputs(FAMILY.Params(), coarse, seed=6))


def test_a_cell_midpoint_on_an_interface_takes_the_layer_above():
    # at 9 points (a grid the solve refuses, 2 units a cell) the midpoints of cells 1 and 2
    # are the tops of the 3-unit die and of the 2-unit bond
    np.testing.assert_array_equal(layer_of_cells((3, 2, 11), 9), [0, 1, 2, 2, 2, 2, 2, 2, 2])


def test_the_heat_through_the_sink_is_the_power_and_the_hot_spot_is_in_the_die(sample):
    p = sample.provenance
    power = sample.params.heat_flux * WIDTH  # W/m
    assert p["power"] == pytest.approx(power, rel=1e-9)
    assert p["sink_heat_flow"] == pytest.approx(power, rel=1e-8)
    theta = sample.fields[0, 2]
    assert theta.max() <= p["hot_spot_temperature"] * (1 + 1e-6)
    assert theta.max() >= 0.99 * p["hot_spot_temperature"]
    die = p["layers"][0]["thickness"]
    assert 0 <= p["hot_spot_location"][1] <= die and 0 <= p["hot_spot_location"][0] <= WIDTH
    # the sink's mean temperature is the power over h W: the hot spot is hotter
    assert p["hot_spot_temperature"] > power / (sample.params.sink_coefficient * WIDTH)
    assert theta.min() > 0


@pytest.mark.parametrize("dim", [2, 3])
def test_the_residual_is_exact_on_the_layered_solution_with_its_walls(dim):
    # a uniform die power, laterally constant: θ is quadratic in the die and linear above it,
    # which the control-volume balance, the mirror and the sink's ghost hold exactly
    grid = FAMILY.grid(dim, 17, 1)
    params = FAMILY.Params()
    inputs = FAMILY.draw_inputs(params, grid, seed=2).astype(np.float64)
    stack = draw_stack(params, dim, sample_generator(2))
    q = params.heat_flux / stack.die_thickness
    inputs[1] = np.where(inputs[1] > 0, q, 0.0)
    z = grid.axis(dim - 1)
    t = np.array(stack.interfaces)
    k = np.array(stack.conductivity, dtype=np.float32).astype(np.float64)  # as the channel
    theta = params.heat_flux / params.sink_coefficient + np.zeros_like(z)  # at the sink
    for i in (2, 1):  # linear through spreader and bond
        theta += params.heat_flux / k[i] * np.clip(t[i] - np.maximum(z, t[i - 1]), 0, None)
    theta += np.where(z < t[0], q * (t[0] ** 2 - z**2) / (2 * k[0]), 0.0)
    shape = [1, 1, 1]
    shape[dim - 1] = -1
    inputs[2] = theta.reshape(shape) * np.ones(grid.shape)
    fields = as_batch(inputs[None])
    scale = walled_rms(torch.cat([fields[:, :2], 0 * fields[:, 2:]], 1), params.vector(), grid)
    assert walled_rms(fields, params.vector(), grid) < 1e-10 * scale
    walled = FAMILY.with_walls(fields, torch.from_numpy(params.vector())[None], grid)
    assert walled.shape[3:] == tuple(n + 2 if a < dim else 1 for a, n in enumerate(grid.shape))


def test_the_residual_is_small_on_the_solution_and_pinned_by_the_sink(sample):
    fields, params, grid = as_batch(sample.fields), sample.params.vector(), sample.grid
    solved = walled_rms(fields, params, grid)
    q = float(fields[:, 1].pow(2).mean().sqrt())
    assert solved < 0.02 * q
    offset = fields.clone()
    offset[:, 2] += 0.01 * float(fields[:, 2].max())  # a level the sink does not hold
    assert walled_rms(offset, params, grid) > 3 * solved
    noisy = fields.clone()
    noisy[:, 2] += 1e-3 * float(fields[:, 2].max()) * torch.randn_like(noisy[:, 2])
    assert walled_rms(noisy, params, grid) > 10 * solved


def test_walls_complete_only_the_ends_a_slab_holds(sample):
    fields, grid = as_batch(sample.fields), sample.grid
    params = torch.from_numpy(sample.params.vector())[None]
    whole = FAMILY.with_walls(fields, params, grid)
    left = FAMILY.with_walls(fields[:, :, :, :20], params, grid, [(True, False), (True, True)])
    right = FAMILY.with_walls(fields[:, :, :, 15:], params, grid, [(False, True), (True, True)])
    assert left.shape[3] == 21 and right.shape[3] == 19
    torch.testing.assert_close(left, whole[:, :, :, :21], rtol=0, atol=0)
    torch.testing.assert_close(right, whole[:, :, :, 16:], rtol=0, atol=0)


def test_grids_that_cut_a_layer_or_miss_a_hot_spot_are_refused_in_one_line():
    ranges = dict(FAMILY.Params.ranges())
    resolved = {**ranges, "hot_spot_width": (1e-3, 2e-3)}
    assert FAMILY.unresolved(FAMILY.grid(2, 17, 1), resolved) is None
    cut = FAMILY.unresolved(FAMILY.grid(3, 25, 1), resolved)
    assert "\n" not in cut and "24 cells" in cut and "at least 33" in cut
    narrow = FAMILY.unresolved(FAMILY.grid(2, 17, 1), ranges)
    assert "0.0005 m" in narrow and "at least 33" in narrow
    with pytest.raises(UserInputError, match="resolution of 16 n"):
        FAMILY.run(FAMILY.Params(), FAMILY.grid(2, 25, 1), seed=0)
    other = dataclasses.replace(FAMILY.grid(2, 17, 1), lengths=(WIDTH, 2 * THICKNESS))
    with pytest.raises(UserInputError, match="box"):
        FAMILY.run(FAMILY.Params(), other, seed=0)


# -- the spreading-resistance benchmark ----------------------------------------------------------


def test_the_series_converges_as_its_tail_says():
    # the terms fall as m^-3, so the tail past M as M^-2: tenfold terms, a hundredfold closer
    # (2D); twice the terms per axis, four times closer (3D)
    from pdeladder.solvers.chip_stack.fem import (
        BENCHMARK_CHANNEL,
        BENCHMARK_STRIP,
        series_source_temperature,
    )

    for channel, terms, factor in ((BENCHMARK_STRIP, 1000, 10), (BENCHMARK_CHANNEL, 250, 2)):
        values = [series_source_temperature(channel, terms * factor**i) for i in range(3)]
        ratio = (values[1] - values[0]) / (values[2] - values[1])
        assert ratio == pytest.approx(factor**2, rel=0.1), channel


def test_the_strip_reproduces_the_series():
    # measured: mean patch temperature 1.2e-5, spreading resistance 6.1e-5 below the series
    from pdeladder.solvers.chip_stack.fem import (
        BENCHMARK_STRIP,
        fem_source_temperature,
        reference_source_temperature,
    )

    c = BENCHMARK_STRIP
    exact = reference_source_temperature(c)
    fem, _ = fem_source_temperature(c, (160, 64))
    assert fem == pytest.approx(exact, rel=5e-5)
    one_d = c.one_dimensional_resistance()
    spreading = (fem / c.power - one_d, exact / c.power - one_d)
    assert spreading[0] == pytest.approx(spreading[1], rel=2e-4)


def test_the_rectangular_channel_reproduces_the_series_at_second_order():
    # the patch's edges (a jump of the flux) bound the order at 2: measured errors 6.9e-3 and
    # 1.7e-3 at 20² x 4 and 40² x 8 cells, and 1.5e-5 for their Richardson extrapolation
    from pdeladder.solvers.chip_stack.fem import (
        BENCHMARK_CHANNEL,
        fem_source_temperature,
        reference_source_temperature,
    )

    exact = reference_source_temperature(BENCHMARK_CHANNEL)
    coarse, fine = (
        fem_source_temperature(BENCHMARK_CHANNEL, cells)[0] for cells in ((20, 20, 4), (40, 40, 8))
    )
    assert fine == pytest.approx(exact, rel=2.5e-3)
    assert math.log2((exact - coarse) / (exact - fine)) > 1.9
    assert fine + (fine - coarse) / 3 == pytest.approx(exact, rel=1e-4)
