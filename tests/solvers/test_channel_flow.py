"""The channel_flow family (solvers/channel_flow): obstacles drawn from the seed alike at every
resolution, the fluid mask against the obstacles and against the mesh, outputs 0 outside the
fluid, one rank against two, the residual on solved and perturbed data, and a grid too coarse
for the obstacles refused in one line."""

from mpi4py import MPI

import textwrap

import numpy as np
import pytest
import torch

from pdeladder.errors import UserInputError
from pdeladder.solvers.channel_flow import RADII, ChannelFlow, draw_domain, fluid_mask
from pdeladder.solvers.family import sample_generator

FAMILY = ChannelFlow()
#: Largest |2 ranks - 1 rank| / max |1 rank| of a sample (measured: 3e-18).
TWO_RANKS_BOUND = 1e-10


@pytest.fixture(scope="module")
def sample():
    s = FAMILY.run(FAMILY.Params(), FAMILY.grid(2, 17, 1), seed=3)
    assert s.ok, s.stats.reason
    return s


def distances(domain, grid) -> np.ndarray:
    """Each grid point's distance to the nearest obstacle's edge, ``(X, Y, Z)`` (m)."""
    x = grid.mesh_grid()
    return np.min(
        [np.hypot(x[0] - c.centre[0], x[1] - c.centre[1]) - c.radius for c in domain.obstacles],
        axis=0,
    )


def residual_rms(fields: np.ndarray, sample) -> float:
    f = torch.from_numpy(fields).double().movedim(0, 1)[None]
    params = torch.from_numpy(sample.params.vector())[None]
    return float(torch.sqrt(torch.mean(FAMILY.residual(f, params, sample.grid) ** 2)))


def test_the_seed_draws_the_obstacles_alike_at_every_resolution():
    a, b = draw_domain(sample_generator(5)), draw_domain(sample_generator(5))
    assert a == b and a != draw_domain(sample_generator(6))
    assert 1 <= len(a.obstacles) <= 3
    assert all(RADII[0] <= c.radius <= RADII[1] for c in a.obstacles)
    coarse, fine = FAMILY.grid(2, 17, 1), FAMILY.grid(2, 33, 1)
    drawn = [FAMILY.draw_inputs(FAMILY.Params(), g, seed=5) for g in (coarse, fine)]
    np.testing.assert_array_equal(drawn[0], drawn[1][:, ::2, ::2])
    np.testing.assert_array_equal(drawn[0], FAMILY.draw_inputs(FAMILY.Params(), coarse, seed=5))
    assert not np.array_equal(drawn[0], FAMILY.draw_inputs(FAMILY.Params(), coarse, seed=6))
    assert not drawn[0][1:].any()  # the outputs are the solve's


def test_the_mask_is_the_fluid_and_the_outputs_are_zero_outside_it(sample):
    domain = draw_domain(sample_generator(sample.seed))
    d = distances(domain, sample.grid)
    mask, outputs = sample.fields[0, 0], sample.fields[0, 1:]
    np.testing.assert_array_equal(mask, (d > 0).astype(np.float32))
    assert 0 < mask.mean() < 1
    assert not outputs[:, mask == 0].any()
    assert np.abs(outputs[:2, mask == 1]).max() > 0.1  # a flow, not zeros
    obstacles = sample.provenance["obstacles"]
    assert [o["radius"] for o in obstacles] == [c.radius for c in domain.obstacles]
    assert all(o["reynolds"] <= sample.params.reynolds and o["c_D"] > 0 for o in obstacles)


def test_the_mask_agrees_with_the_mesh_but_within_rounding_of_the_obstacles():
    from dolfinx import fem

    from pdeladder.solvers.geometry import domain_mesh, sample_on_grid

    grid = FAMILY.grid(2, 33, 1)
    domain = draw_domain(sample_generator(3))
    dm = domain_mesh(domain, MPI.COMM_SELF, grid.h, order=2)
    _, meshed = sample_on_grid(
        fem.Function(fem.functionspace(dm.mesh, ("Lagrange", 1))), domain, 33
    )
    differ = meshed != fluid_mask(domain, grid)
    assert np.abs(distances(domain, grid)[differ]).max(initial=0.0) < 1e-4


_TWO_RANKS = textwrap.dedent(
    """
    import sys
    from mpi4py import MPI
    import numpy as np
    from pdeladder.solvers.channel_flow import ChannelFlow

    fam = ChannelFlow()
    s = fam.run(fam.Params(), fam.grid(2, 17, 1), seed=3, comm=MPI.COMM_WORLD)
    assert s.ok, s.stats.reason
    same = MPI.COMM_WORLD.allgather(s.fields.tobytes()) == [s.fields.tobytes()] * 2
    if MPI.COMM_WORLD.rank == 0:
        np.savez(sys.argv[1], fields=s.fields, same=same)
    """
)


@pytest.mark.mpi
def test_two_ranks_solve_the_one_rank_sample(sample, tmp_path, two_ranks):
    out = tmp_path / "two.npz"
    two_ranks(_TWO_RANKS, str(out))
    two = np.load(out)
    assert two["same"]  # every rank returns the whole sample
    gap = np.abs(two["fields"] - sample.fields).max() / np.abs(sample.fields).max()
    assert gap <= TWO_RANKS_BOUND


def test_the_residual_is_small_on_the_solution_and_not_on_a_perturbed_one(sample):
    solved = residual_rms(sample.fields, sample)
    noise = np.random.default_rng(0).standard_normal(sample.fields.shape).astype(np.float32)
    noise[:, 0] = 0  # the mask stays
    noise *= sample.fields[:, :1]  # and the outputs 0 outside the fluid
    perturbed = residual_rms(
        sample.fields + 0.1 * np.abs(sample.fields[:, 1:3]).max() * noise, sample
    )
    # at 17 points the boundary layers are a spacing thick: the residual is at its floor
    assert 0 < solved < perturbed / 3, (solved, perturbed)


def test_a_grid_too_coarse_for_the_obstacles_is_one_line():
    with pytest.raises(UserInputError) as err:
        FAMILY.run(FAMILY.Params(), FAMILY.grid(2, 9, 1), seed=3)
    message = str(err.value)
    assert "\n" not in message and "grid 9" in message and "at least 17" in message


def test_the_inflow_makes_the_zero_flow_no_solution():
    """Completed by the family's walls (the inflow at x = 0, no slip at y = 0, H), the zero
    flow, which solves the interior equations, has a residual far above the solution's (rms
    ratio measured 1.5, 4.6, 20 at 17, 33, 65 points: the solution's falls with h, the zero
    flow's inlet grows); a slab without the inlet keeps its own values at x = 0."""
    sample = FAMILY.run(FAMILY.Params(), FAMILY.grid(2, 33, 1), seed=3)
    f = torch.from_numpy(sample.fields).double().movedim(0, 1)[None]
    params = torch.from_numpy(sample.params.vector())[None]
    grid = sample.grid

    def rms(fields: torch.Tensor) -> float:
        walled = FAMILY.with_walls(fields, params, grid)
        return float(FAMILY.residual(walled, params, grid).square().mean().sqrt())

    zero = f.clone()
    zero[:, 1:] = 0
    inlet = FAMILY.with_walls(zero, params, grid)[0, 1, 0, 0, :, 0]
    np.testing.assert_allclose(inlet, f[0, 1, 0, 0, :, 0], atol=1e-6)  # the solver's profile
    assert rms(f) < rms(zero) / 3, (rms(f), rms(zero))
    slab = FAMILY.with_walls(zero, params, grid, ends=[(False, True), (True, True)])
    assert slab[:, 1, :, 0].abs().max() == 0 and slab[:, 1:3, :, :, 0].abs().max() == 0
