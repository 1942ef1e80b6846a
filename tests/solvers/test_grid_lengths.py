"""Grids on a box of physical lengths: spacing and coordinates per axis, validation, the store's
record of the box, and finite differences with each axis's own spacing."""

from mpi4py import MPI  # first: DOLFINx loads libmpi through it

import json

import numpy as np
import pytest
import torch
import zarr

from pdeladder.curriculum.slab_solve import job
from pdeladder.dataset.store import open_store
from pdeladder.dataset.verify import verify
from pdeladder.errors import FormatError, UserInputError
from pdeladder.solvers import Sample, SolveStats, get_family, stencils
from pdeladder.solvers.darcy import flux_divergence
from pdeladder.solvers.grid import Grid, SlabGrid
from pdeladder.solvers.random_fields import wall_bubble

HEAT = get_family("heat")


class ChannelHeat(type(HEAT)):  # type: ignore[misc]
    """Heat on a channel 2 m long and 1 m high."""

    lengths = (2.0, 1.0, 1.0)


BOX = Grid(2, 5, 3, 1.0, (2.0, 1.0, 1.0))


def test_spacing_axes_and_points_of_a_2_by_1_box():
    assert BOX.spacing == (0.5, 0.25) and BOX.h == 0.25
    np.testing.assert_array_equal(BOX.axis(0), [0.0, 0.5, 1.0, 1.5, 2.0])
    np.testing.assert_array_equal(BOX.axis(1), [0.0, 0.25, 0.5, 0.75, 1.0])
    np.testing.assert_array_equal(BOX.axis(2), [0.0])
    points = BOX.mesh_grid()
    assert points.shape == (3, 5, 5, 1)
    assert points[:, -1, -1, 0].tolist() == [2.0, 1.0, 0.0]
    assert BOX.mesh_grid((1, 3))[0, :, 0, 0].tolist() == [0.5, 1.0]
    assert Grid(2, 5, 3, 1.0).lengths == (1.0, 1.0, 1.0) and Grid(2, 5, 3, 1.0).h == 0.25


def test_lengths_beyond_the_dimension_are_ignored_and_the_family_sets_the_box():
    assert Grid(2, 5, 3, 1.0, (2, 1)) == Grid(2, 5, 3, 1.0, (2.0, 1.0, 7.0)) == BOX
    assert ChannelHeat.grid(2, 5, 3) == BOX and HEAT.grid(2, 5, 3).lengths == (1.0, 1.0, 1.0)
    slab = SlabGrid.of(BOX, ((0, 2), (2, 5)))
    assert slab.lengths == BOX.lengths and slab.whole == BOX and slab != BOX


@pytest.mark.parametrize(
    "lengths",
    [
        *[(0.0, 1.0), (2.0, -1.0), (float("inf"), 1.0), (float("nan"), 1.0)],
        *[("2", 1.0), (True, 1.0), (2.0,), (1.0, 1.0, 1.0, 1.0), 2.0],
    ],
)
def test_invalid_lengths_are_one_line(lengths):
    with pytest.raises(
        UserInputError, match="lengths must be positive finite extents in metres along the 2 axes"
    ) as err:
        Grid(2, 5, 3, 1.0, lengths)
    assert "\n" not in str(err.value)


def test_slab_solve_spec_carries_the_box():
    spec = json.loads(json.dumps(job("heat", "out", BOX, {}, 0, "s")))
    assert Grid(*spec["grid"]) == BOX


def test_a_store_group_records_the_box(tmp_path):
    url = str(tmp_path / "store")
    fam = ChannelHeat()
    grid = fam.grid(2, 5, 3)
    group = open_store(url, mode="a").require_group("s", fam, grid, n_samples=1)
    fields = np.random.default_rng(0).normal(size=(3, 1, *grid.shape)).astype(np.float32)
    group.write(0, Sample("heat", fields, grid, fam.parse_params(), 0, SolveStats(dofs=25)))
    verify(url)
    read = open_store(url).group(group.path)
    assert read.grid == grid and read.attrs["lengths"] == [2.0, 1.0, 1.0]
    np.testing.assert_array_equal(read.read(0), fields)
    x, y = (read.array(a)[:] for a in "xy")
    assert (x[-1], y[-1]) == (2.0, 1.0) and read.array("x").attrs["units"] == "m"


def test_a_format_7_store_is_refused_with_the_regenerate_line(tmp_path):
    url = str(tmp_path / "store")
    group = open_store(url, mode="a").require_group("s", HEAT, HEAT.grid(1, 5, 2), n_samples=1)
    zarr.open_group(url, mode="r+").update_attributes({"format_version": 7})
    with pytest.raises(FormatError) as err:
        open_store(url).group(group.path)
    assert str(err.value) == (
        f"{url}: format version 7 was written by an older pdeladder; this one reads only "
        "version 8: regenerate the store with `pdeladder curriculum materialize`"
    )


def test_differences_are_exact_for_a_quadratic_on_a_2_by_1_box():
    """Central differences are exact for quadratics: with each axis's own spacing, the
    gradient, Laplacian and conservative flux divergence of ``f = x² + 3xy + 2y²`` are."""
    grid = Grid(2, 9, 1, 0.0, (2.0, 1.0))
    x, y, _ = torch.from_numpy(grid.mesh_grid())  # (X, Y, Z) each
    f = (x**2 + 3 * x * y + 2 * y**2)[None, None]  # (B, T, X, Y, Z)

    def inside(g: torch.Tensor) -> torch.Tensor:
        return stencils.interior(g[None, None], 2)

    dx, dy = stencils.grad(f, grid)
    torch.testing.assert_close(dx, inside(2 * x + 3 * y), rtol=0, atol=1e-12)
    torch.testing.assert_close(dy, inside(3 * x + 4 * y), rtol=0, atol=1e-12)
    six = torch.full_like(dx, 6.0)
    torch.testing.assert_close(stencils.laplacian(f, grid), six, rtol=0, atol=1e-11)
    torch.testing.assert_close(
        flux_divergence(torch.ones_like(f), f, grid), six, atol=1e-11, rtol=0
    )


def test_the_wall_bubble_vanishes_on_every_wall_of_a_2_by_1_box():
    b = wall_bubble(Grid(2, 9, 1, 0.0, (2.0, 1.0)))[:, :, 0]
    assert b[4, 4] == 1.0
    assert not (b[0].any() or b[-1].any() or b[:, 0].any() or b[:, -1].any())


def test_the_mesh_of_a_2_by_1_grid_has_its_points_as_vertices_and_samples_exactly():
    """``grid_mesh`` spans the grid's box, and ``GridSampler`` maps dofs to grid points by the
    grid's spacing: a linear function comes back as its values at the grid's coordinates."""
    from dolfinx import fem

    from pdeladder.solvers.fem import GridSampler, grid_mesh

    grid = Grid(2, 9, 1, 0.0, lengths=(2.0, 1.0, 1.0))
    msh = grid_mesh(MPI.COMM_SELF, grid)
    np.testing.assert_allclose(msh.geometry.x.max(axis=0)[:2], [2.0, 1.0])
    V = fem.functionspace(msh, ("Lagrange", 1))
    u = fem.Function(V)
    u.interpolate(lambda x: x[0] + 3 * x[1])
    x = grid.mesh_grid()
    np.testing.assert_allclose(GridSampler(V, grid).to_grid(u)[0], x[0] + 3 * x[1], atol=1e-12)
