"""The metrics of trainer/metrics.py on hand-made fields whose values are worked out by hand
(in the comments), and the one nRMSE that validation, evaluate and the metrics module share."""

import math

import numpy as np
import pytest
import torch

from pdeladder.trainer import evaluate, metrics
from pdeladder.trainer.losses import data as losses
from pdeladder.trainer.training import validation


def fields(t: int, x: int, y: int = 1, z: int = 1, b: int = 1, c: int = 1) -> torch.Tensor:
    return torch.zeros(b, c, t, x, y, z, dtype=torch.float64)


def test_one_nrmse_definition_in_validation_evaluate_and_metrics():
    assert validation.nrmse is metrics.nrmse and evaluate.channel_nrmse is metrics.channel_nrmse
    g = torch.Generator().manual_seed(0)
    u = torch.randn(3, 2, 4, 5, 6, 1, generator=g)
    p = u + 0.1 * torch.randn(u.shape, generator=g)
    ours = metrics.nrmse(p, u)
    torch.testing.assert_close(ours, losses.relative_errors(p, u))
    predicted = torch.tensor([[True, False]] * 3)
    torch.testing.assert_close(metrics.channel_nrmse(p, u, predicted), ours * predicted)


def test_nrmse_is_trapezoid_weighted_over_space_time():
    # u = 1 on a 3 x 3 (t, x) grid, error 2 at the corner (t=0, x=0) whose weight is
    # (1/2 / 2) * (1/2 / 2) = 1/16: nRMSE = sqrt(4/16 / 1) = 1/2.
    u = fields(3, 3) + 1
    p = u.clone()
    p[0, 0, 0, 0] = 3
    assert metrics.nrmse(p, u).item() == pytest.approx(0.5)


def sample_1d() -> tuple[torch.Tensor, torch.Tensor]:
    """T = 3, X = 4: t=0 is the input (any error there is not scored); at t=1 u = 1, error 2
    at the last point; at t=2 u = 2, no error."""
    u = fields(3, 4)
    u[0, 0, 1] = 1
    u[0, 0, 2] = 2
    p = u.clone()
    p[0, 0, 0] = 100
    p[0, 0, 1, 3] = 3
    return p, u


def test_pdebench_rmse_nrmse_crmse_brmse_by_hand():
    p, u = sample_1d()
    # t=1: RMS error sqrt(4/4) = 1 over RMS truth 1; t=2: 0. Mean over time 1/2.
    assert metrics.pdebench_nrmse(p, u).item() == pytest.approx(0.5)
    assert metrics.pdebench_rmse(p, u).item() == pytest.approx(0.5)
    # spatial means differ by 2/4 at t=1, 0 at t=2: cRMSE (1/2 + 0) / 2.
    assert metrics.pdebench_crmse(p, u).item() == pytest.approx(0.25)
    # end points' errors 0 and 2 at t=1: sqrt((0 + 4) / 2); 0 at t=2.
    assert metrics.pdebench_brmse(p, u, dim=1).item() == pytest.approx(math.sqrt(2) / 2)
    # two samples, the second exact: nRMSE is their mean; cRMSE the RMS over them, sqrt(1/2).
    p2, u2 = torch.cat([p, u]), torch.cat([u, u])
    assert metrics.pdebench_nrmse(p2, u2)[:, 0].tolist() == pytest.approx([0.5, 0.0])
    assert metrics.pdebench_crmse(p2, u2).item() == pytest.approx(math.sqrt(0.25 / 2) / 2)


def test_pdebench_brmse_2d_counts_each_face():
    # 3 x 3, error 1 at the corner (0, 0) (on faces x=0 and y=0) and 5 at the centre (on none):
    # sum over the four 3-point faces 1 + 1 over 12 points.
    u = fields(2, 3, 3)
    p = u.clone()
    p[0, 0, 1, 0, 0] = 1
    p[0, 0, 1, 1, 1] = 5
    assert metrics.pdebench_brmse(p, u, dim=2).item() == pytest.approx(math.sqrt(2 / 12))


def test_pdebench_frmse_1d_bands():
    # X = 32: e = cos(2π 3 i/32) + 2 cos(2π 5 i/32) + cos(π i); rfft's moduli N/2, N, N at modes
    # 3, 5 and 16 (Nyquist), divided by N: 1/2, 1, 1. Bands: modes 0-3 (mean 1/2 / 4),
    # 4-11 (1 / 8) and 12-16 (1 / 5).
    n, i = 32, torch.arange(32, dtype=torch.float64)
    e = torch.cos(2 * math.pi * 3 * i / n) + 2 * torch.cos(2 * math.pi * 5 * i / n)
    e = e + torch.cos(math.pi * i)
    u = fields(2, n)
    p = u.clone()
    p[0, 0, 1, :, 0, 0] = e
    assert metrics.pdebench_frmse(p, u, dim=1)[0].tolist() == pytest.approx([1 / 8, 1 / 8, 1 / 5])
    # a second, exact sample halves the mean spectrum: sqrt(1/2) of each band
    f2 = metrics.pdebench_frmse(torch.cat([p, u]), torch.cat([u, u]), dim=1)[0]
    assert f2.tolist() == pytest.approx([math.sqrt(0.5) * v for v in (1 / 8, 1 / 8, 1 / 5)])


def test_pdebench_frmse_2d_shells():
    # 8 x 8, e = cos(2π i/8) along x: |F|² = (64/2)² at k = (1, 0) (its twin (7, 0) lies outside
    # the non-negative quarter); shell floor(1) = 1: sqrt(1024) / 64 = 1/2. Four shells 0-3, all
    # in the low band (mean 1/8); mid and high have no modes: NaN, as in PDEBench.
    i = torch.arange(8, dtype=torch.float64)
    u = fields(2, 8, 8)
    p = u.clone()
    p[0, 0, 1, :, :, 0] = torch.cos(2 * math.pi * i / 8)[:, None]
    low, mid, high = metrics.pdebench_frmse(p, u, dim=2)[0].tolist()
    assert low == pytest.approx(1 / 8) and np.isnan(mid) and np.isnan(high)


def test_well_vrmse_by_hand():
    # scored step: u = 0, 1, 2, 3 (unbiased variance 5/3), p = u + 1 (MSE 1).
    u = fields(2, 4)
    u[0, 0, 1, :, 0, 0] = torch.arange(4.0)
    p = u + 1
    assert metrics.well_vrmse(p, u).item() == pytest.approx(math.sqrt(1 / (5 / 3 + 1e-7)))


def test_steady_groups_score_their_one_snapshot():
    u = fields(1, 4) + 2
    p = u + 1
    assert metrics.pdebench_nrmse(p, u).item() == pytest.approx(0.5)
    assert metrics.pdebench_crmse(p, u).item() == pytest.approx(1.0)


def test_evaluate_reports_pdebench_and_well_beside_the_baseline(
    known_store, operator_checkpoint, tmp_path
):
    from typer.testing import CliRunner

    from pdeladder.cli import app
    from pdeladder.dataset.catalog import split

    url, (heat, _) = known_store.url, known_store.paths
    ckpt = operator_checkpoint(tmp_path / "model", url, known_store.paths, persistence=True)
    report = evaluate.evaluate_checkpoint(ckpt, url, tmp_path / "eval", 0.3, metrics="all")
    _, test = split(np.arange(known_store.samples), 0.3)
    # persistence of u = a(t) phi(x): per step |a0 - a_t| |phi| / (|a_t| |phi|) (PDEBench) and
    # sqrt(mean((u0 - u_t)²) / (var(u_t) + 1e-7)) (The Well), over the steps t >= 1 and samples
    u = np.array([known_store.heat(i)[:, 0, :, 0, 0] for i in test], dtype=np.float64)
    rel = np.abs(u[:, :1] - u[:, 1:])[..., 0] / np.abs(u[:, 1:, 0])
    r = report["groups"][heat]
    assert r["pdebench"]["baseline"]["u"]["nrmse"] == pytest.approx(rel.mean(), rel=1e-5)
    assert r["pdebench"]["model"]["u"]["nrmse"] == pytest.approx(rel.mean(), rel=1e-5)
    mse = ((u[:, :1] - u[:, 1:]) ** 2).mean(-1)
    well = np.sqrt(mse / (np.var(u[:, 1:], axis=-1, ddof=1) + 1e-7))
    assert r["well"]["baseline"]["u"]["vrmse"] == pytest.approx(well.mean(), rel=1e-4)
    assert set(r["pdebench"]["model"]["u"]["frmse"]) == {"low", "mid", "high"}
    assert "PDEBench" in (tmp_path / "eval" / "report.md").read_text()

    wide = {"COLUMNS": "300"}
    out = CliRunner().invoke(
        app, ["evaluate", str(ckpt), "--store", url, "--metrics", "all"], env=wide
    )
    assert out.exit_code == 0, out.output
    for text in ("PDEBench", "VRMSE", "persistence", "ratio"):
        assert text in out.output
    out = CliRunner().invoke(app, ["evaluate", str(ckpt), "--store", url, "--metrics", "x"])
    assert out.exit_code == 2
