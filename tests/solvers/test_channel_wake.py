"""The channel_wake family (solvers/channel_wake): the drag and lift summaries and their
Strouhal number, the channel's wall conditions for the residual, a contract-sized sample (mask,
outputs 0 outside the fluid, wall values, provenance, residual on solved and perturbed data),
the BDF2 time order on the obstacle mesh; slow: the whole contract and DFG 2D-3 against the
published bounds."""

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from pdeladder.errors import UserInputError
from pdeladder.solvers import checks
from pdeladder.solvers.channel_flow import draw_domain
from pdeladder.solvers.channel_wake import (
    DFG_2D3_BOUNDS,
    ChannelWake,
    force_summary,
)
from pdeladder.solvers.family import sample_generator
from pdeladder.solvers.testing import FamilyContract

FAMILY = ChannelWake()
BENCHMARK = Path(__file__).parents[2] / "benchmarks" / "dfg_unsteady.py"


@pytest.mark.slow
class TestChannelWake(FamilyContract):
    family = "channel_wake"
    pure_inputs = False  # snapshot 0 is the end of the spin-up: the FEM part solves it
    studies = {(2, "space"): (None, None), (2, "time"): (None, None)}  # noqa: RUF012


@pytest.fixture(scope="module")
def sample():
    params = FAMILY.check_params(2)
    s = FAMILY.run(params, FAMILY.grid(2, 17, FAMILY.check_snapshots, FAMILY.check_t_end), 3)
    assert s.ok, s.stats.reason
    return s


def as_batch(fields: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(fields).double().movedim(0, 1)[None]


def residual_rms(fields: np.ndarray, sample) -> float:
    params = torch.from_numpy(sample.params.vector())[None]
    r = FAMILY.with_walls(as_batch(fields), params, sample.grid)
    return float(torch.sqrt(torch.mean(FAMILY.residual(r, params, sample.grid) ** 2)))


def test_the_lift_history_gives_its_strouhal_number():
    tau, mean, diameter, period = 0.01, 0.2, 0.6, 1.7
    t = tau * np.arange(1, 1001)
    history = np.stack(
        [3 + 0.1 * np.cos(4 * math.pi * t / period), 0.5 * np.sin(2 * math.pi * t / period)], axis=1
    )
    summary = force_summary(history, tau, mean, diameter)
    assert summary["strouhal"] == pytest.approx(diameter / (mean * period), rel=1e-4)
    assert summary["c_D_max"] == pytest.approx(3.1, rel=1e-6)
    assert summary["c_L_amplitude"] == pytest.approx(0.5, rel=1e-3)  # sampled every τ
    steady = force_summary(np.full((100, 2), 2.0), tau, mean, diameter)
    assert steady["strouhal"] is None and steady["c_L_max"] == 2.0


@pytest.mark.parametrize("ends", [[(True, True), (True, True)], [(False, True), (True, True)]])
def test_the_walls_are_the_inflow_and_no_slip_where_the_fields_hold_them(ends):
    grid = FAMILY.grid(2, 9, 3)
    fields = torch.randn(2, 4, 3, *grid.shape, dtype=torch.float64)
    params = torch.tensor([[250.0, 0.2, 5.0], [300.0, 0.5, 5.0]], dtype=torch.float64)
    out = FAMILY.with_walls(fields, params, grid, ends)
    y = torch.linspace(0, 2, 9, dtype=torch.float64)
    speed = params[:, 1, None, None, None]
    inflow = speed * (y * (2 - y))[None, None, :, None]  # 4 U y (H - y) / H², H = 2 m
    assert not out[:, 1:3, :, :, [0, -1]].any()  # the walls y = 0, H
    if ends[0][0]:
        torch.testing.assert_close(out[:, 1, :, 0, 1:-1], inflow.expand(2, 3, 9, 1)[:, :, 1:-1])
        assert not out[:, 2, :, 0].any()
    else:
        torch.testing.assert_close(out[:, :, :, 0, 1:-1], fields[:, :, :, 0, 1:-1])
    torch.testing.assert_close(out[:, :, :, 1:, 1:-1], fields[:, :, :, 1:, 1:-1])  # the rest
    torch.testing.assert_close(out[:, [0, 3]], fields[:, [0, 3]])  # the mask and pressure


def test_a_sample_is_zero_outside_the_fluid_holds_its_walls_and_reports_forces(sample):
    f = sample.fields
    mask = f[:, 0]
    assert np.array_equal(mask, np.broadcast_to(mask[0], mask.shape)) and 0 < mask.mean() < 1
    assert not f[:, 1:][np.broadcast_to(mask[:, None] == 0, f[:, 1:].shape)].any()
    params = torch.from_numpy(sample.params.vector())[None]
    walled = FAMILY.with_walls(as_batch(f), params, sample.grid)[0].movedim(1, 0).numpy()
    np.testing.assert_allclose(walled, f, rtol=0, atol=1e-6 * np.abs(f).max())
    assert np.abs(np.diff(f[:, 1:3], axis=0)).max() > 1e-3  # it moves
    obstacles = sample.provenance["obstacles"]
    assert len(obstacles) == len(draw_domain(sample_generator(sample.seed)).obstacles)
    assert all(o["c_D_max"] >= o["c_D_mean"] > 0 for o in obstacles)
    assert sample.provenance["spin_up"]["seconds"] >= 9.0  # one convective time at 0.1 m/s


def test_the_residual_is_small_on_the_solution_and_not_on_a_perturbed_one(sample):
    solved = residual_rms(sample.fields, sample)
    noise = np.random.default_rng(0).standard_normal(sample.fields.shape).astype(np.float32)
    noise[:, 0] = 0
    noise *= sample.fields[:, :1]  # the outputs stay 0 outside the fluid
    scale = np.abs(sample.fields[:, 1:3]).max()
    perturbed = residual_rms(sample.fields + 0.1 * scale * noise, sample)
    # measured: 8.7e-3 against 8.7e-2 (17 points: the boundary layers are under a spacing)
    assert 0 < solved < perturbed / 5, (solved, perturbed)


def test_the_steps_are_second_order_in_time_on_the_obstacle_mesh():
    result = checks.convergence(checks.Target(FAMILY, 2), "time")
    assert result.passed, result


@pytest.mark.slow
def test_dfg_2d3_is_within_the_published_bounds():
    """The benchmark's default run (benchmarks/dfg_unsteady.py: cells of 0.018 m, 0.0045 m on
    the cylinder, 3200 steps of 0.0025 s; about nine minutes): every quantity in its bounds."""
    spec = importlib.util.spec_from_file_location("dfg_unsteady", BENCHMARK)
    benchmark = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(benchmark)
    values = benchmark.solve(benchmark.SIZE, benchmark.STEPS)["values"]
    for name, (lo, hi) in DFG_2D3_BOUNDS.items():
        assert lo <= values[name] <= hi, (name, values[name])


def test_a_grid_too_coarse_for_the_obstacles_is_one_line():
    with pytest.raises(UserInputError) as err:
        FAMILY.run(FAMILY.check_params(2), FAMILY.grid(2, 9, 3), seed=3)
    message = str(err.value)
    assert "\n" not in message and "grid 9" in message and "at least 17" in message
