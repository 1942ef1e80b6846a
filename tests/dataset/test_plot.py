"""`store plot` draws a time-constant input once, every other channel over time on one colour
scale in the unit box's coordinates, and titles the sample with its seed and parameters."""

import numpy as np
import pytest

from pdeladder.dataset.plot import plot_sample, sample_figure, sample_title
from pdeladder.solvers import get_family

from .conftest import family_group


@pytest.fixture
def advection(tmp_path):
    """Advection–diffusion in 2D: u over time, the inputs bx and by constant in time."""
    grid = get_family("advection_diffusion").grid(2, 9, 8)
    return family_group(str(tmp_path / "store"), "advection_diffusion", grid, samples=2)


def test_constant_inputs_are_drawn_once_and_the_rest_over_time(advection):
    fields = advection.read(1)  # (T, C, X, Y, Z): u, bx, by
    fig = sample_figure(fields, advection.grid, advection.meta.channels, "title")
    drawn: dict[str, list] = {}
    for ax in fig.axes:
        for im in ax.get_images():
            drawn.setdefault(ax.get_title().split(" ")[0], []).append((ax, im))
    assert {name: len(v) for name, v in drawn.items()} == {"bx": 1, "by": 1, "u": 6}
    assert all("constant in time" in ax.get_title() for ax, _ in drawn["bx"] + drawn["by"])
    u = fields[:, 0]
    assert {im.get_clim() for _, im in drawn["u"]} == {(float(u.min()), float(u.max()))}
    h = 0.5 * advection.grid.h
    for ax, im in drawn["u"] + drawn["bx"]:
        assert im.get_extent() == pytest.approx((-h, 1 + h, -h, 1 + h))
        assert (ax.get_xlim(), ax.get_ylim()) == ((0, 1), (0, 1))
        assert (ax.get_xlabel(), ax.get_ylabel()) == ("x", "y")


def test_an_input_that_changes_in_time_is_drawn_over_time(advection):
    fields = advection.read(0).copy()
    fields[1:, 1] += 1.0  # bx no longer constant: drawn as u is
    fig = sample_figure(fields, advection.grid, advection.meta.channels, "title")
    titles = [ax.get_title() for ax in fig.axes if ax.get_images()]
    assert sum(t.startswith("bx ") for t in titles) == 6


def test_the_title_holds_the_seed_and_parameters(advection, tmp_path):
    first = advection.meta.parameters[0]
    value = advection.info(1)["params"][first.name]
    title = sample_title(advection, 1)
    assert title.startswith(f"{advection.path} sample 1\nseed 11: ")
    assert f"{first.name} = {value:.4g}" in title
    assert len(title.split(", ")) == len(advection.meta.parameters)
    out = plot_sample(advection, 1, tmp_path / "pic.png")
    assert out.read_bytes()[:4] == b"\x89PNG"


def test_1d_curves_are_on_x_in_the_unit_box(tmp_path):
    grid = get_family("heat").grid(1, 9, 4)
    g = family_group(str(tmp_path / "store"), "heat", grid, samples=1)
    fig = sample_figure(g.read(0), grid, g.meta.channels, "title")
    lines = [line for ax in fig.axes for line in ax.get_lines()]
    assert len(lines) == 4  # every snapshot of u
    for line in lines:
        np.testing.assert_allclose(line.get_xdata(), np.linspace(0, 1, 9))


def test_a_masked_domain_is_drawn_inside_only_with_its_outline(tmp_path):
    """channel_flow (a mask input): the outputs blank outside the fluid, their colour scale
    over the inside, the outline on every image; the box in metres (2 m x 2 m)."""
    from pdeladder.dataset.format import ChannelMeta

    fam = get_family("channel_flow")
    grid = fam.grid(2, 17, 1)
    fields = np.random.default_rng(0).standard_normal((1, 4, *grid.shape)).astype(np.float32)
    x = grid.mesh_grid()
    fields[0, 0] = np.hypot(x[0] - 1, x[1] - 1) > 0.3  # the mask: a hole of radius 0.3 m
    fields[0, 1:, fields[0, 0] == 0] = 100.0  # outside: nothing to draw, nothing to scale
    channels = [ChannelMeta(c.name, c.long_name, c.units, c.role) for c in fam.channels_for(2)]
    fig = sample_figure(fields, grid, channels, "title")
    for ax in fig.axes:
        for im in ax.get_images():
            name = ax.get_title().split(" ")[0]
            data = np.ma.getdata(im.get_array()).T  # (X, Y)
            assert len(ax.collections) == 1, name  # the outline
            assert (ax.get_xlim(), ax.get_ylim()) == ((0, 2), (0, 2))
            if name != "mask":
                assert np.isnan(data[fields[0, 0, :, :, 0] == 0]).all(), name
                assert im.get_clim()[1] < 100, name
