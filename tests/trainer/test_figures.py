"""evaluate's pictures do not mislead: prediction and truth of a channel on one colour scale, the
error on its own symmetric one, the unit box's coordinates on the axes, every predicted channel
at several times, 1D curves overlaid."""

from pathlib import Path

import numpy as np
import pytest

from pdeladder.solvers.family import Channel
from pdeladder.solvers.grid import Grid
from pdeladder.trainer.evaluate import evaluate_checkpoint
from pdeladder.trainer.figures import ERROR_CMAP, rollout_figure, shown_times

CHANNELS = [Channel("u", "x velocity"), Channel("p", "pressure", units="Pa")]


def fields(grid: Grid, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(C, T, X, Y, Z)`` truth of two channels and a prediction on another scale (u's truth
    peaks at 0.05, its prediction at 0.35, as Burgers' did when the picture misled)."""
    g = np.random.default_rng(seed)
    shape = (len(CHANNELS), grid.snapshots, *grid.shape)
    truth = g.standard_normal(shape)
    truth[0] *= 0.05 / np.abs(truth[0]).max()
    pred = truth + 0.1 * g.standard_normal(shape)
    pred[0] *= 0.35 / np.abs(pred[0]).max()
    return pred.astype(np.float32), truth.astype(np.float32)


def panels(fig) -> dict[str, object]:
    """The figure's image axes by title (``u prediction, t = 0.5``)."""
    return {ax.get_title(): ax for ax in fig.axes if ax.get_images()}


@pytest.mark.parametrize("dim", [2, 3])
def test_prediction_and_truth_share_a_scale_and_the_error_is_symmetric(dim):
    grid = Grid(dim, 9, 11, 0.5)
    pred, truth = fields(grid)
    fig = rollout_figure(pred, truth, grid, CHANNELS, "s/burgers/2d_n9_t11, sample 0")
    times = shown_times(grid.snapshots)
    assert times == [1, 5, 10]  # the first predicted snapshot, the middle and the last
    found = panels(fig)
    assert len(found) == 3 * len(CHANNELS) * len(times)
    z = grid.shape[2] // 2
    for c, chan in enumerate(CHANNELS):
        p, u = pred[c, times, :, :, z], truth[c, times, :, :, z]
        joint = (min(p.min(), u.min()), max(p.max(), u.max()))
        worst = np.abs(p - u).max()
        for k in times:
            t = f"t = {grid.times()[k]:.3g}"
            for kind in ("prediction", "truth"):
                (im,) = found[f"{chan.name} {kind}, {t}"].get_images()
                assert im.get_clim() == pytest.approx(joint)
            (err,) = found[f"{chan.name} error, {t}"].get_images()
            assert err.get_clim() == pytest.approx((-worst, worst))
            assert err.get_cmap().name == ERROR_CMAP
    # the units a channel declares label its colour bar; 3D shows its z = 0.5 plane
    assert "p, pressure [Pa]" in [ax.get_ylabel() for ax in fig.axes]
    assert fig.get_suptitle().endswith("(z = 0.5 plane)") is (dim == 3)


def test_axes_are_the_unit_box_with_pixels_on_the_grid_points():
    grid = Grid(2, 5, 3, 1.0)
    pred, truth = fields(grid)
    fig = rollout_figure(pred, truth, grid, CHANNELS, "title")
    for ax in panels(fig).values():
        (im,) = ax.get_images()
        h = 0.5 / (grid.resolution - 1)  # half a cell: pixel centres on x_i = i / (X - 1)
        assert im.get_extent() == pytest.approx((-h, 1 + h, -h, 1 + h))
        assert ax.get_xlim() == (0, 1) and ax.get_ylim() == (0, 1)
    labels = {(ax.get_xlabel(), ax.get_ylabel()) for ax in panels(fig).values()}
    assert labels == {("x", "y"), ("", "y"), ("x", ""), ("", "")}  # on the outer panels


def test_a_steady_group_shows_its_one_snapshot():
    grid = Grid(2, 5, 1, 0.0)
    pred, truth = fields(grid)
    titles = set(panels(rollout_figure(pred, truth, grid, CHANNELS, "t")))
    assert titles == {
        f"{c.name} {k}, steady" for c in CHANNELS for k in ("prediction", "truth", "error")
    }


def test_1d_overlays_truth_solid_and_prediction_dashed_on_x():
    grid = Grid(1, 17, 6, 1.0)
    pred, truth = fields(grid)
    fig = rollout_figure(pred, truth, grid, CHANNELS, "t")
    times = shown_times(grid.snapshots)
    x = np.linspace(0, 1, 17)
    for c, chan in enumerate(CHANNELS):
        for k in times:
            (ax,) = [
                a for a in fig.axes if a.get_title() == f"{chan.name}, t = {grid.times()[k]:.3g}"
            ]
            solid, dashed = ax.get_lines()
            assert (solid.get_linestyle(), dashed.get_linestyle()) == ("-", "--")
            np.testing.assert_allclose(solid.get_xdata(), x)
            np.testing.assert_allclose(solid.get_ydata(), truth[c, k, :, 0, 0])
            np.testing.assert_allclose(dashed.get_ydata(), pred[c, k, :, 0, 0])
        (err,) = [a for a in fig.axes if a.get_title().startswith(f"{chan.name} error")]
        lo, hi = err.get_ylim()
        assert lo == pytest.approx(-hi) and len(err.get_lines()) == len(times) + 1  # + zero line


def test_evaluate_writes_one_picture_per_group(known_store, operator_checkpoint, tmp_path: Path):
    url, paths = known_store.url, known_store.paths
    ckpt = operator_checkpoint(tmp_path / "model", url, paths)
    evaluate_checkpoint(ckpt, url, tmp_path / "eval", held_out=0.3)
    for path in paths:
        png = tmp_path / "eval" / (path.replace("/", "__") + ".png")
        assert png.read_bytes()[:4] == b"\x89PNG" and png.stat().st_size > 10_000
