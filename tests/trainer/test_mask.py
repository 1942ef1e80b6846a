"""A domain that is not its whole box (the channel ``mask``): losses, scores, baselines, figures
and normalisation statistics count the points inside only, the mask reaches the model as 0/1,
predictions are written with 0 outside, and without a mask every number is what it was."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from pdeladder.dataset.moments import mask_channel, merge_moments, sample_moments
from pdeladder.dataset.slots import Normaliser, SlotLayout
from pdeladder.solvers.family import MASK
from pdeladder.solvers.registry import get_family
from pdeladder.trainer import evaluate, figures, metrics
from pdeladder.trainer.baselines import mean_field
from pdeladder.trainer.losses import relative_errors, relative_loss, trapezoid_weights
from pdeladder.trainer.predict import written
from pdeladder.trainer.processor import DataProcessor

#: The unmasked scores of :func:`unmasked_scores`, computed before masks existed.
REFERENCE = Path(__file__).parent / "data" / "unmasked_scores.json"
N, T = 17, 5  # a 2D grid N² with T snapshots


def unmasked_scores() -> dict:
    """Every score and the moments on seeded random fields in 1D, 2D and 3D, no mask."""
    out = {}
    g = torch.Generator().manual_seed(11)
    for dim, shape in ((1, (3, 2, 5, 16, 1, 1)), (2, (2, 3, 4, 9, 8, 1)), (3, (2, 2, 3, 6, 5, 4))):
        u = torch.randn(shape, generator=g)
        p = u + 0.3 * torch.randn(shape, generator=g)
        predicted = torch.tensor([[True] * (shape[1] - 1) + [False]] * shape[0])
        r = {
            "l2": relative_errors(p, u).tolist(),
            "h1": relative_errors(p, u, h1=True).tolist(),
            "loss": relative_loss(p, u, predicted).item(),
            "loss_h1": relative_loss(p, u, predicted, h1=True).item(),
            "channel_nrmse": metrics.channel_nrmse(p, u, predicted).tolist(),
            "bands": [metrics.band_rmse(p[:, c] - u[:, c], dim) for c in range(shape[1])],
            "conservation": [metrics.conservation_error(p[:, c], u[:, c]) for c in range(shape[1])],
            "boundary": [metrics.boundary_error(p[:, c], u[:, c], dim) for c in range(shape[1])],
            "vrmse": metrics.well_vrmse(p, u).tolist(),
        }
        r.update({k: v.tolist() for k, v in metrics.pdebench_scores(p, u, dim).items()})
        fields = (3 + u[0].movedim(0, 1)).numpy()  # (T, C, X, Y, Z)
        r["moments"] = sample_moments(fields).tolist()
        out[f"{dim}d"] = r
    return out


def test_without_a_mask_every_number_is_unchanged():
    """Bit for bit the values computed before masks existed."""
    found, stored = unmasked_scores(), json.loads(REFERENCE.read_text())
    for dim, scores in stored.items():
        for key, value in scores.items():
            np.testing.assert_array_equal(found[dim][key], value, err_msg=f"{dim} {key}")


def disk_hole(b: int = 2) -> torch.Tensor:
    """``(B, 1, 1, N, N, 1)``: 1 outside a disk of radius 0.25 (one centre per sample)."""
    x = torch.linspace(0, 1, N)
    xx, yy = torch.meshgrid(x, x, indexing="ij")
    out = torch.ones(b, 1, 1, N, N, 1)
    for i in range(b):
        cx, cy = 0.4 + 0.1 * i, 0.5
        out[i, 0, 0, :, :, 0] = (((xx - cx) ** 2 + (yy - cy) ** 2) >= 0.25**2).float()
    return out


def masked_pair(seed: int = 0):
    """``(pred, truth, inside)``: truth ``(2, 2, T, N, N, 1)`` 0 outside, pred near it."""
    g = torch.Generator().manual_seed(seed)
    inside = disk_hole()
    truth = torch.randn(2, 2, T, N, N, 1, generator=g) * inside
    pred = (truth + 0.2 * torch.randn(truth.shape, generator=g)) * inside
    return pred, truth, inside


def garbage(f: torch.Tensor, inside: torch.Tensor, seed: int, nan: bool = False) -> torch.Tensor:
    """``f`` with large random values (or NaN) outside the domain."""
    noise = 1e3 * torch.randn(f.shape, generator=torch.Generator().manual_seed(seed))
    return torch.where(inside != 0, f, float("nan") if nan else noise)


def restricted_h1(p: torch.Tensor, u: torch.Tensor, inside: torch.Tensor) -> torch.Tensor:
    """The relative H1 error ``(B, C)`` written out: trapezoid weights on the points inside and
    on the grid edges with both ends inside (2D, in float64)."""
    p, u, m = p.double().numpy(), u.double().numpy(), inside.double().numpy()
    w = trapezoid_weights((T, N, N, 1)).double().numpy()
    num = (w * m * (p - u) ** 2).sum((2, 3, 4, 5))
    den = (w * m * u**2).sum((2, 3, 4, 5))
    for axis in (3, 4):
        shape = [T, N, N, 1]
        shape[axis - 2] -= 1
        wg = trapezoid_weights(tuple(shape)).double().numpy()
        both = np.take(m, range(N - 1), axis) * np.take(m, range(1, N), axis)
        num += (wg * both * (np.diff(p - u, axis=axis) * (N - 1)) ** 2).sum((2, 3, 4, 5))
        den += (wg * both * (np.diff(u, axis=axis) * (N - 1)) ** 2).sum((2, 3, 4, 5))
    return torch.from_numpy(np.sqrt(num / (den + 1e-12)))


@pytest.mark.parametrize("nan", [False, True], ids=["noise", "nan"])
def test_nrmse_and_data_loss_count_only_the_points_inside(nan: bool):
    pred, truth, inside = masked_pair()
    bad_p, bad_u = garbage(pred, inside, 1, nan), garbage(truth, inside, 2, nan)
    predicted = torch.tensor([[True, False], [True, True]])
    for h1 in (False, True):
        clean = relative_errors(pred, truth, h1=h1, inside=inside)
        torch.testing.assert_close(relative_errors(bad_p, bad_u, h1=h1, inside=inside), clean)
        loss = relative_loss(bad_p, bad_u, predicted, h1=h1, inside=inside)
        torch.testing.assert_close(loss, (clean * predicted).sum() / 3)
    # the unmasked formula restricted to the points (and edges) inside
    w = trapezoid_weights((T, N, N, 1)) * inside
    l2 = (w * (pred - truth) ** 2).sum((2, 3, 4, 5)) / ((w * truth**2).sum((2, 3, 4, 5)) + 1e-12)
    torch.testing.assert_close(metrics.nrmse(bad_p, bad_u, inside=inside), l2.sqrt())
    torch.testing.assert_close(
        relative_errors(bad_p, bad_u, h1=True, inside=inside),
        restricted_h1(pred, truth, inside).float(),
    )
    torch.testing.assert_close(
        metrics.channel_nrmse(bad_p, bad_u, predicted, inside), l2.sqrt() * predicted
    )


def test_the_data_loss_has_no_gradient_outside():
    pred, truth, inside = masked_pair()
    pred = garbage(pred, inside, 3).requires_grad_()
    relative_loss(
        pred, truth, torch.ones(2, 2, dtype=torch.bool), h1=True, inside=inside
    ).backward()
    assert pred.grad[(inside == 0).expand_as(pred)].abs().max() == 0
    assert pred.grad[(inside != 0).expand_as(pred)].abs().max() > 0


def test_a_mask_of_ones_is_the_whole_box():
    g = torch.Generator().manual_seed(5)
    u = torch.randn(2, 2, T, N, N, 1, generator=g)
    p = u + 0.1 * torch.randn(u.shape, generator=g)
    ones = torch.ones(2, 1, 1, N, N, 1)
    for h1 in (False, True):
        torch.testing.assert_close(
            relative_errors(p, u, h1=h1, inside=ones), relative_errors(p, u, h1=h1)
        )
    for k, v in metrics.pdebench_scores(p, u, 2).items():
        torch.testing.assert_close(
            metrics.pdebench_scores(p, u, 2, inside=ones)[k], v, equal_nan=True
        )
    torch.testing.assert_close(metrics.well_vrmse(p, u, inside=ones), metrics.well_vrmse(p, u))
    e, one = p[:, 0] - u[:, 0], ones[:, 0]
    assert metrics.band_rmse(e, 2, one) == pytest.approx(metrics.band_rmse(e, 2), rel=1e-6)
    for score in (
        metrics.conservation_error,
        lambda a, b, m=None: metrics.boundary_error(a, b, 2, m),
    ):
        assert score(p[:, 0], u[:, 0], one) == pytest.approx(score(p[:, 0], u[:, 0]), rel=1e-6)


def test_the_other_conventions_are_their_formulas_over_the_points_inside():
    pred, truth, inside = masked_pair()
    bad_p, bad_u = garbage(pred, inside, 4), garbage(truth, inside, 5)
    p, u, m = pred[:, :, 1:].double(), truth[:, :, 1:].double(), (inside != 0)  # scored steps
    count = m.sum((-3, -2, -1))
    mse = ((p - u) ** 2).sum((-3, -2, -1)) / count  # (B, C, T')
    torch.testing.assert_close(
        metrics.pdebench_rmse(bad_p, bad_u, inside=inside), mse.sqrt().mean(-1)
    )
    rms_u = ((u**2).sum((-3, -2, -1)) / count).sqrt()
    torch.testing.assert_close(
        metrics.pdebench_nrmse(bad_p, bad_u, inside=inside), (mse.sqrt() / rms_u).mean(-1)
    )
    # sample 0's variance over its points inside, unbiased
    var = torch.stack([u[0, c, k][m[0, 0, 0]].var() for c in range(2) for k in range(T - 1)])
    torch.testing.assert_close(
        metrics.well_vrmse(bad_p, bad_u, inside=inside)[0].flatten(),
        (mse[0].flatten() / (var + metrics.WELL_EPS)).sqrt(),
    )
    for k, v in metrics.pdebench_scores(pred, truth, 2, inside=inside).items():
        torch.testing.assert_close(
            metrics.pdebench_scores(bad_p, bad_u, 2, inside=inside)[k], v, equal_nan=True
        )


def masked_batch(b: int = 2):
    """A batch of 2D heat-like samples whose layout has a mask slot: ``(layout, batch)``; its
    ``u`` is 0 outside a disk hole."""
    fam = get_family("heat")
    grid = fam.grid(2, N, T)
    layout = SlotLayout(["heat"], ["u", MASK], 2, {"heat": {"mean": [0.0, 0.0], "std": [1.0, 1.0]}})
    inside = disk_hole(b)
    g = torch.Generator().manual_seed(7)
    u = torch.randn(b, 1, T, N, N, 1, generator=g) * inside
    fields = torch.cat([u, inside.expand(b, 1, T, N, N, 1)], dim=1)
    batch = {
        "fields": fields,
        "present": torch.ones(b, 2, dtype=torch.bool),
        "predicted": torch.tensor([[True, False]] * b),
        "params": torch.full((b, 2), 0.01),
        "params_norm": torch.zeros(b, 2),
        "family": torch.zeros(b, dtype=torch.int64),
        "grid": grid,
        "index": torch.arange(b),
    }
    return layout, batch


def test_the_processor_finds_the_mask_once_and_leaves_it_unnormalised():
    layout, batch = masked_batch()
    processor = DataProcessor(layout)
    torch.testing.assert_close(processor.inside(batch), disk_hole())
    layout.set_normalisation({"heat": {"u": (0.5, 2.0), MASK: (0.7, 0.4)}})
    assert layout.normalisation["heat"] == {"mean": [0.5, 0.0], "std": [2.0, 1.0]}
    processor = DataProcessor(layout)
    x, _ = processor.inputs(batch)
    assert torch.equal(x[:, 1], batch["fields"][:, 1])  # the mask, 0/1 into the model
    plain = SlotLayout.for_families(["heat"], [2])
    assert plain.mask_slot is None and DataProcessor(plain).inside({"present": None}) is None
    batch["present"][:, 1] = False  # a family without the mask in a layout that has one
    assert layout.inside(batch) is None


def leaves(tree) -> dict[str, float | None]:
    """A report's nested scores by their path (NaN for an undefined one)."""
    if not isinstance(tree, dict):
        return {"": float("nan") if tree is None else tree}
    return {f"{k}/{p}": v for k, sub in tree.items() for p, v in leaves(sub).items()}


def test_group_scores_ignore_the_values_outside():
    layout, batch = masked_batch()
    inside = disk_hole()
    truth = batch["fields"]
    g = torch.Generator().manual_seed(8)
    pred = truth + 0.1 * torch.randn(truth.shape, generator=g) * inside
    baseline = truth[:, :, :1].expand_as(truth)
    clean = evaluate.group_report(pred, truth, batch, layout, baseline, ("pdebench", "well"))
    dirty = evaluate.group_report(
        garbage(pred, inside, 9), truth, batch, layout, garbage(baseline, inside, 10),
        ("pdebench", "well"),
    )  # fmt: skip
    for key in (
        "nrmse", "baseline_nrmse", "nrmse_per_channel", "rmse_bands", "conservation_error",
        "boundary_error", "pdebench", "well",
    ):  # fmt: skip
        assert leaves(dirty[key]) == pytest.approx(leaves(clean[key]), rel=1e-5, nan_ok=True), key
    expected = metrics.nrmse(pred, truth, inside=inside)[:, 0].mean()
    assert clean["nrmse"] == pytest.approx(float(expected), rel=1e-6)


def test_the_mean_field_baseline_is_over_the_samples_inside():
    layout, batch = masked_batch(3)

    class Data:  # what mean_field reads: batches of a group by sample indices
        def load(self, path, indices):
            return {
                **batch,
                "fields": batch["fields"][indices],
                "present": batch["present"][indices],
            }

    mean = mean_field(DataProcessor(layout), Data(), "g", np.arange(3), batch_size=2)
    inside = disk_hole(3)
    expected = (batch["fields"][:, 0].sum(0) / inside.sum(0)[0].clamp_min(1)).float()
    torch.testing.assert_close(mean[0], expected)


def test_figures_draw_the_outside_blank(monkeypatch, tmp_path: Path):
    layout, batch = masked_batch()
    drawn = {}
    real = figures.rollout_figure

    def capture(pred, truth, *args):
        drawn["pred"], drawn["truth"] = pred, truth
        return real(pred, truth, *args)

    monkeypatch.setattr(figures, "rollout_figure", capture)
    truth = batch["fields"]
    figures.plot_group(
        "g", garbage(truth, disk_hole(), 11), truth, batch, layout, tmp_path / "f.png"
    )
    outside = disk_hole()[0].numpy() == 0
    for key in ("pred", "truth"):
        assert np.isnan(drawn[key][np.broadcast_to(outside, drawn[key].shape)]).all()
        assert np.isfinite(drawn[key][np.broadcast_to(~outside, drawn[key].shape)]).all()
    assert (tmp_path / "f.png").stat().st_size > 0


def test_normalisation_statistics_count_only_the_points_inside():
    rng = np.random.default_rng(3)
    inside = disk_hole(1)[0, 0].numpy()  # (1, N, N, 1)
    u = (5 + rng.standard_normal((T, 2, N, N, 1))).astype(np.float32)
    fields = np.concatenate([u, np.broadcast_to(inside, (T, 1, N, N, 1))], axis=1)
    fields[:, :2] = np.where(inside != 0, fields[:, :2], 1e4)  # garbage outside
    mask = mask_channel(["u", "v", MASK])
    assert mask == 2 and mask_channel(["u", "v"]) is None
    moments = sample_moments(fields, mask)
    keep = np.broadcast_to(inside != 0, (T, N, N, 1))
    for c in range(2):
        values = fields[:, c][keep].astype(np.float64)
        assert moments[c, 0] == values.size
        assert moments[c, 1] == pytest.approx(values.mean(), rel=1e-12)
        assert moments[c, 2] == pytest.approx(((values - values.mean()) ** 2).sum(), rel=1e-9)
    assert moments[2, 0] == fields[:, 2].size  # the mask over every point: the domain's share
    assert moments[2, 1] == pytest.approx(inside.mean(dtype=np.float64), rel=1e-12)
    parts = [fields[:2, :, :5], fields[:2, :, 5:], fields[2:, :, :5], fields[2:, :, 5:]]
    merged = merge_moments(np.stack([sample_moments(p, mask) for p in parts]))
    np.testing.assert_allclose(merged, moments, rtol=1e-9)
    # the statistics normalise the inside to mean 0, std 1 and leave the mask as it is
    layout = SlotLayout.for_families(["heat"], [2])
    layout = SlotLayout(["heat"], ["u", "v", MASK], 0, layout.normalisation)
    layout.normalisation["heat"] = {"mean": [0.0] * 3, "std": [1.0] * 3}
    std = np.sqrt(moments[:, 2] / moments[:, 0])
    layout.set_normalisation(
        {"heat": {n: (moments[c, 1], std[c]) for c, n in enumerate(["u", "v", MASK])}}
    )
    batch = torch.from_numpy(fields).movedim(1, 0)[None]  # (1, C, T, X, Y, Z)
    norm = Normaliser(layout).normalise(
        batch, torch.zeros(1, dtype=torch.int64), torch.ones(1, 3, dtype=torch.bool)
    )
    inner = norm[0, 0][torch.from_numpy(keep.copy())].double()
    assert float(inner.mean()) == pytest.approx(0.0, abs=1e-5)
    assert float(inner.std(correction=0)) == pytest.approx(1.0, rel=1e-5)
    assert torch.equal(norm[0, 2], batch[0, 2])


def test_predictions_are_written_with_zero_outside():
    fam = get_family("heat")
    grid = fam.grid(2, N, T)
    inside = disk_hole()
    g = torch.Generator().manual_seed(12)
    given = torch.randn(2, 1, T, N, N, 1, generator=g) * inside
    pred = torch.randn(given.shape, generator=g)  # a model's: not 0 outside
    out = written(pred, given, fam, grid, inside)
    assert torch.equal(out[:, :, 0], given[:, :, 0])  # the initial condition, copied
    outside = (inside == 0).expand_as(out)
    assert out[outside].abs().max() == 0
    assert torch.equal(out[:, :, 1:][~outside[:, :, 1:]], pred[:, :, 1:][~outside[:, :, 1:]])
    assert torch.equal(written(pred, given, fam, grid, None)[:, :, 1:], pred[:, :, 1:])
