"""Unsolved samples for self-improvement: drawn by the families themselves, within the stage's
ranges, for seeds the solver data does not use."""

from mpi4py import MPI  # noqa: F401  (before DOLFINx)

import numpy as np
import pytest
import torch

from pdeladder.dataset.slots import SlotLayout
from pdeladder.solvers.registry import get_family
from pdeladder.trainer.processor import DataProcessor
from pdeladder.trainer.refine import direct
from pdeladder.trainer.training.loop import targeted
from pdeladder.trainer.training.unsolved import (
    UnsolvedSpec,
    draw_unsolved,
    solver_seeds,
    unsolved_samples,
)

RANGES = {  # a stage's ranges per family: a log range, a fixed parameter, defaults elsewhere
    "advection_diffusion": {"peclet": (10.0, 2000.0, "log"), "speed": (1.5, 1.5, "linear")},
    "darcy": {"log_permeability_std": (0.1, 2.5, "linear"), "length_scale": (0.03, 0.5, "log")},
}


def spec_of(family: str, grid) -> UnsolvedSpec:
    fam = get_family(family)
    ranges = {
        row["name"]: (row["default"], row["default"], "linear") for row in fam.Params.describe()
    }
    return UnsolvedSpec(family, grid, ranges | RANGES[family])


@pytest.mark.parametrize(("family", "snapshots"), [("advection_diffusion", 5), ("darcy", 1)])
def test_snapshot_zero_is_the_familys_own_draw_and_later_snapshots_are_unknown(family, snapshots):
    fam = get_family(family)
    spec = spec_of(family, fam.grid(2, 17, snapshots))
    layout = SlotLayout.for_families([family], [2])
    batch = draw_unsolved(layout, spec, 3, seed=[7, 0])
    params, seeds = unsolved_samples(spec, 3, seed=[7, 0])
    slots = layout.slot_indices(fam, 2)
    fields = batch["fields"].numpy()  # (B, C_slots, T, X, Y, Z)
    for i in range(3):
        drawn = fam.draw_inputs(fam.Params.from_vector(params[i]), spec.grid, int(seeds[i]))
        np.testing.assert_array_equal(fields[i, slots, 0], drawn)
    assert not np.any(fields[:, :, 1:])
    assert not batch["solved"].any()
    np.testing.assert_array_equal(
        batch["params"].numpy()[:, : params.shape[1]], params.astype(np.float32)
    )


def test_parameters_stay_in_the_stages_ranges_and_seeds_avoid_the_solver_datas():
    fam = get_family("darcy")
    spec = spec_of("darcy", fam.grid(1, 9, 1))
    params, seeds = unsolved_samples(spec, 200, seed=1)
    for j, name in enumerate(fam.Params.names()):
        lo, hi, _ = spec.ranges[name]
        assert np.all((lo <= params[:, j]) & (params[:, j] <= hi)), name
    ell = params[:, fam.Params.names().index("length_scale")]
    assert np.mean(ell < np.sqrt(0.03 * 0.5)) == pytest.approx(0.5, abs=0.1)  # log-uniform
    again, taken = unsolved_samples(spec, 200, seed=1)[1], set(seeds[:100].tolist())
    np.testing.assert_array_equal(again, seeds)
    avoiding = unsolved_samples(spec, 200, seed=1, taken=taken)[1]
    assert not taken & set(avoiding.tolist())


def test_solver_seeds_are_read_from_the_store(tiny):
    from pdeladder.curriculum.plan import plan_stage

    spec, url, _ = tiny
    plans = plan_stage(spec, spec.stages[0]).groups
    seeds = solver_seeds(url, [p.path for p in plans])
    assert seeds == {int(s) for p in plans for s in p.seeds}


@pytest.mark.parametrize("n, within", [(17, 0.03), (65, 0.01)])
def test_a_draws_target_is_its_residuals_minimiser_and_that_of_the_solve(n, within):
    """`self_improvement.refine_steps`: a 2D heat draw's target keeps its initial state and is
    its residual's minimiser (Gauss–Newton over all snapshots, converged in one iteration):
    within 3 % of the FEM solve of the same draw (parameters and seed) at 17², 1 % at 65²
    (where L-BFGS stalled far off), and the initial state held 20 % or more off."""
    fam = get_family("heat")
    grid = fam.grid(2, n, 9)
    ranges = {"diffusivity": (0.02, 0.05, "linear"), "ic_length_scale": (0.3, 0.3, "linear")}
    layout = SlotLayout.for_families(["heat"], [2])
    layout.set_normalisation({"heat": {"u": (0.0, 1.0)}})
    processor = DataProcessor(layout)
    spec = UnsolvedSpec("heat", grid, ranges)
    draw = draw_unsolved(layout, spec, 1, seed=[3, 0])
    (target,) = targeted(processor, [draw], 200)
    assert bool(target["target"][0])
    fields, given = target["fields"][0, 0], draw["fields"][0, 0]  # (T, X, Y, Z)
    assert torch.equal(fields[0], given[0])
    (params,), (seed,) = unsolved_samples(spec, 1, seed=[3, 0])
    solve = torch.from_numpy(fam.run(fam.Params.from_vector(params), grid, int(seed)).fields[:, 0])
    torch.testing.assert_close(solve[0], given[0])  # the draw is the solver's initial state

    def error(u):
        return float((u - solve).norm() / solve.norm())

    assert error(given[:1].expand_as(solve)) > 0.2
    assert error(fields) < within


def test_a_steady_draws_target_is_its_residuals_exact_minimiser():
    """A 2D Darcy draw's target is the Gauss–Newton minimiser of its residual: within 3 % of
    the FEM solve of the same draw at 17², 0.5 % at 129² (16 129 unknowns: a sparse solve), its
    permeability the draw's; a draw beyond a direct solve (1100²) would keep none."""
    fam = get_family("darcy")
    layout = SlotLayout.for_families(["darcy"], [2])
    layout.set_normalisation({"darcy": {c.name: (0.0, 1.0) for c in fam.channels_for(2)}})
    processor = DataProcessor(layout)
    spec = spec_of("darcy", fam.grid(2, 17, 1))
    draw = draw_unsolved(layout, spec, 1, seed=[5, 0])
    (target,) = targeted(processor, [draw], 10)
    assert bool(target["target"][0])
    (params,), (seed,) = unsolved_samples(spec, 1, seed=[5, 0])
    solve = torch.from_numpy(fam.run(fam.Params.from_vector(params), spec.grid, int(seed)).fields)
    fields = target["fields"][0, layout.slot_indices(fam, 2)]  # (C, T, X, Y, Z)
    torch.testing.assert_close(fields[0], solve[:, 0])  # the permeability, given
    pressure, solved = fields[1], solve[:, 1]
    assert float((pressure - solved).norm() / solved.norm()) < 0.03
    big = spec_of("darcy", fam.grid(2, 129, 1))
    (target,) = targeted(processor, [draw_unsolved(layout, big, 1, seed=[5, 0])], 10)
    (params,), (seed,) = unsolved_samples(big, 1, seed=[5, 0])
    solve = fam.run(fam.Params.from_vector(params), big.grid, int(seed)).fields[:, 1]
    pressure = target["fields"][0, layout.slot_indices(fam, 2)][1].numpy()
    assert bool(target["target"][0]) and np.linalg.norm(pressure - solve) < 0.005 * np.linalg.norm(
        solve
    )
    predicted = torch.tensor([c.role != "input" for c in fam.channels_for(2)])
    assert direct("darcy", predicted, (1, 129, 129, 1), 2)
    assert not direct("darcy", predicted, (1, 1100, 1100, 1), 2)
