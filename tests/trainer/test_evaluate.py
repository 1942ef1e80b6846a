"""`pdeladder evaluate` reports each group's trivial baseline beside the model's nRMSE: checked
against hand computations on a store of known fields."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from pdeladder.cli import app
from pdeladder.dataset.catalog import split
from pdeladder.dataset.format import OK
from pdeladder.dataset.store import open_store
from pdeladder.errors import UserInputError
from pdeladder.trainer.evaluate import evaluate_checkpoint
from pdeladder.trainer.metrics import boundary_error
from pdeladder.trainer.models.checkpoint import load_model, save_model

HELD_OUT = 0.3
EXE = Path(sys.executable).with_name("pdeladder")


def trapezoid(n: int) -> np.ndarray:
    w = np.ones(n)
    w[0] = w[-1] = 0.5
    return w


def test_persistence_and_mean_field_baselines_match_hand_computation(
    known_store, operator_checkpoint, tmp_path: Path
):
    url, (heat, darcy) = known_store.url, known_store.paths
    ckpt = operator_checkpoint(tmp_path / "model", url, known_store.paths, persistence=True)
    report = evaluate_checkpoint(ckpt, url, tmp_path / "eval", held_out=HELD_OUT)
    train, test = split(np.arange(known_store.samples), HELD_OUT)
    assert len(test) == 3

    # Persistence of u = a_i(t) phi(x): the spatial factor cancels in the relative error.
    w = trapezoid(known_store.heat_grid.snapshots)
    a = np.array([known_store.heat(i)[:, 0, 0, 0, 0] for i in test])  # (samples, T)
    hand = np.sqrt((w * (a[:, :1] - a) ** 2).sum(1) / (w * a**2).sum(1)).mean()
    r = report["groups"][heat]
    assert r["baseline"] == "persistence"
    assert r["baseline_nrmse"] == pytest.approx(hand, rel=1e-5)
    assert r["baseline_nrmse_per_channel"] == {"u": pytest.approx(hand, rel=1e-5)}
    # This model returns its input state: it is the baseline, ratio 1, and does not beat it.
    assert r["nrmse"] == pytest.approx(hand, rel=1e-5)
    assert r["ratio"] == pytest.approx(1.0, abs=1e-5)
    assert r["ratio_per_channel"]["u"] == pytest.approx(1.0, abs=1e-5)
    assert not r["beats_baseline"] and not report["families"]["heat"]["beats_baseline"]

    # Mean field of the training samples p = c_i psi(x): error |c_j - mean c| / c_j.
    c = 1.0 + np.arange(known_store.samples)
    hand = (np.abs(c[test] - c[train].mean()) / c[test]).mean()
    r = report["groups"][darcy]
    assert r["baseline"] == "training mean field"
    assert list(r["baseline_nrmse_per_channel"]) == ["p"]  # the input channel a is not scored
    assert r["baseline_nrmse"] == pytest.approx(hand, rel=1e-5)
    # Its model predicts p's mean over every sample, a constant: scored the same way.
    p = np.array([known_store.darcy(i)[0, 1, :, 0, 0] for i in test])
    mean = np.array([known_store.darcy(i)[0, 1] for i in range(known_store.samples)]).mean()
    wx = trapezoid(p.shape[1])
    model = np.sqrt((wx * (p - mean) ** 2).sum(1) / (wx * p**2).sum(1)).mean()
    assert r["nrmse"] == pytest.approx(model, rel=1e-4)
    assert r["ratio"] == pytest.approx(model / hand, rel=1e-4) and r["ratio"] < 1
    assert r["beats_baseline"]

    fam = report["families"]["darcy"]
    assert fam["baseline_nrmse"] == pytest.approx(hand, rel=1e-5)
    assert fam["ratio"] == pytest.approx(r["ratio"]) and fam["beats_baseline"]
    md = (tmp_path / "eval" / "report.md").read_text()
    assert "not better than baseline" in md and "training mean field" in md
    assert json.loads((tmp_path / "eval" / "report.json").read_text()) == report


def test_evaluate_command_prints_baseline_and_ratio(
    known_store, operator_checkpoint, tmp_path: Path
):
    """Within 100 columns: each group beside its baseline, ending with the families' table."""
    url, paths = known_store.url, known_store.paths
    ckpt = operator_checkpoint(tmp_path / "model", url, paths)
    result = CliRunner().invoke(
        app, ["evaluate", str(ckpt), "--store", url], env={"COLUMNS": "100"}
    )
    assert result.exit_code == 0, result.output
    out = result.stdout
    for text in ("baseline", "ratio", "persistence", "training mean field", paths[0]):
        assert text in out
    assert max(map(len, out.splitlines())) <= 100
    last = out[out.rindex("nRMSE per family") :].splitlines()
    assert [line.split()[1] for line in last if line.startswith("│")] == ["darcy", "heat"]


@pytest.mark.parametrize("domain_ranks", [1, 2])
def test_evaluate_tells_its_progress(
    known_store, operator_checkpoint, tmp_path: Path, domain_ranks
):
    """The samples to score first, then every group's as it is scored (or predicted, on
    domain ranks), adding up to them."""
    url, paths = known_store.url, known_store.paths
    ckpt = operator_checkpoint(tmp_path / "model", url, paths)
    told = []

    def progress(samples: int):
        told.append(samples)
        return lambda path, n: told.append((path, n))

    report = evaluate_checkpoint(ckpt, url, domain_ranks=domain_ranks, progress=progress)
    total, *scored = told
    assert total == sum(r["samples"] for r in report["groups"].values())
    assert {p for p, _ in scored} == set(paths) and sum(n for _, n in scored) == total


def test_evaluate_json_keeps_stdout_clean_of_its_progress(
    known_store, operator_checkpoint, tmp_path: Path
):
    url, paths = known_store.url, known_store.paths
    ckpt = operator_checkpoint(tmp_path / "model", url, paths)
    result = CliRunner().invoke(app, ["evaluate", str(ckpt), "--store", url, "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["groups"].keys() == set(paths)
    assert "scored" in result.stderr and "left" in result.stderr


def test_held_out_share_is_the_models_record_or_asked(
    known_store, operator_checkpoint, tmp_path: Path
):
    """The samples scored of a trained group are its held-out share: 0.1 by default, the
    model's recorded ``held_out``, or the one asked; a share outside (0, 1) is one line, exit 2,
    nothing written."""
    url, (heat, _) = known_store.url, known_store.paths
    ckpt = operator_checkpoint(tmp_path / "model", url, [heat])
    assert evaluate_checkpoint(ckpt, url, groups=[heat])["groups"][heat]["samples"] == 1
    assert (
        evaluate_checkpoint(ckpt, url, held_out=0.5, groups=[heat])["groups"][heat]["samples"] == 5
    )
    model, meta = load_model(ckpt)
    recorded = save_model(model, tmp_path / "recorded", {**meta, "held_out": 0.3})
    assert evaluate_checkpoint(recorded, url, groups=[heat])["groups"][heat]["samples"] == 3
    for share in (0.0, float("nan"), -0.5):
        with pytest.raises(UserInputError, match=r"held-out share .*: must lie in \(0, 1\)"):
            evaluate_checkpoint(ckpt, url, tmp_path / "eval", held_out=share)
    args = ["evaluate", ckpt, "--store", url, "--held-out", "1.5", "--out", tmp_path / "eval"]
    result = subprocess.run([EXE, *map(str, args)], capture_output=True, text=True)
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        "error: held-out share 1.5: must lie in (0, 1)"
    ]
    assert not (tmp_path / "eval").exists()


@pytest.mark.parametrize("symmetrize", [False, True])
def test_two_domain_ranks_score_what_one_process_scores(
    known_store, operator_checkpoint, tmp_path: Path, symmetrize
):
    """`evaluate --domain-ranks 2` runs the model on x slabs in two processes and scores the
    stored predictions: every score equals the one-process evaluation's, symmetrized too (the
    x reflection moves the slabs, 5 and 4 points, across the ranks), and the prediction store
    holds the evaluated (held-out) samples only."""
    url, paths = known_store.url, known_store.paths
    ckpt = operator_checkpoint(tmp_path / "model", url, paths)
    one = evaluate_checkpoint(ckpt, url, symmetrize=symmetrize)
    two = evaluate_checkpoint(ckpt, url, tmp_path / "eval", domain_ranks=2, symmetrize=symmetrize)
    assert one["symmetrize"] is two["symmetrize"] is symmetrize
    assert all(r["symmetrized"] is symmetrize for r in two["groups"].values())
    assert two["groups"].keys() == one["groups"].keys()
    for path, r in one["groups"].items():
        got = two["groups"][path]
        for key in ("nrmse", "baseline_nrmse", "residual", "conservation_error"):
            assert got[key] == pytest.approx(r[key], rel=1e-4, abs=1e-6), key
        for channel, bands in r["rmse_bands"].items():
            assert got["rmse_bands"][channel] == pytest.approx(bands, rel=1e-4, abs=1e-6)
    held_out = open_store(str(tmp_path / "eval" / "predictions.zarr")).group(paths[0]).status()
    assert (held_out == OK).sum() == one["groups"][paths[0]]["samples"] < len(held_out)


@pytest.mark.parametrize("dim", [1, 2])
def test_boundary_error_is_on_the_fields_scale_where_the_walls_hold_zero(dim):
    """A field that is 0 on its walls (a Dirichlet condition), predicted exactly inside and off
    by ``c`` on every wall point: the report's boundary error is ``c`` over the field's RMS (a
    ratio to the truth's wall values would divide by zero)."""
    n, c = 9, 0.25
    x = torch.linspace(0, 1, n)
    wave = torch.sin(torch.pi * x)
    truth = (wave[:, None] * (wave[None, :] if dim == 2 else torch.ones(1)))[None, None, :, :, None]
    truth = truth.expand(2, 3, n, n if dim == 2 else 1, 1).clone()  # (B, T, X, Y, Z)
    pred = truth.clone()
    walls = torch.zeros(truth.shape[2:], dtype=torch.bool)
    walls[[0, -1]] = True
    if dim == 2:
        walls[:, [0, -1]] = True
    pred[..., walls] += c
    expected = c / float(truth.square().mean().sqrt())
    assert boundary_error(pred, truth, dim) == pytest.approx(expected, rel=1e-6)
    assert boundary_error(truth, truth, dim) == 0.0


def test_groups_are_chosen_by_pattern(known_store, operator_checkpoint, tmp_path: Path):
    """``--groups`` takes paths and shell-style patterns; a pattern that matches no group is one
    line, exit 2, naming it, and nothing is written."""
    url, (heat, darcy) = known_store.url, known_store.paths
    ckpt = operator_checkpoint(tmp_path / "model", url, known_store.paths)
    family = heat.split("/")[1]
    pattern = heat.replace(family, "*")  # every family's group at the heat group's place
    assert evaluate_checkpoint(ckpt, url, groups=[f"*/{family}/*"])["groups"].keys() == {heat}
    assert evaluate_checkpoint(ckpt, url, groups=[heat, darcy])["groups"].keys() == {heat, darcy}
    assert heat in evaluate_checkpoint(ckpt, url, groups=[pattern])["groups"]
    args = ["evaluate", ckpt, "--store", url, "--groups", heat, "--groups", "*/ns/*"]
    result = subprocess.run(
        [EXE, *map(str, args), "--out", str(tmp_path / "eval")], capture_output=True, text=True
    )
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: {url}: no group matches '*/ns/*'; groups: ")
    assert not (tmp_path / "eval").exists()
