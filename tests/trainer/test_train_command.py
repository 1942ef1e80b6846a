"""`pdeladder train` ends with the families' held-out nRMSE beside their baselines, a table
within 100 columns (issue 37), not a Python dict."""

from pathlib import Path

from typer.testing import CliRunner

from pdeladder.cli import app


def test_train_ends_with_the_families_table(tiny, tmp_path: Path, ray_local):
    _, url, path = tiny
    args = ["train", str(path), "--store", url, "--workers", "1", "--stage", "s1"]
    result = CliRunner().invoke(
        app, [*args, "--run-dir", str(tmp_path / "run")], env={"COLUMNS": "100"}
    )
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "held_out_nrmse" not in out and "{" not in out  # the metrics dict is gone
    assert max(map(len, out.splitlines())) <= 100
    lines = out[out.index("nRMSE per family") :].splitlines()
    head = next(line for line in lines if line.startswith("┃"))
    assert all(h in head for h in ("family", "nRMSE", "baseline", "ratio", "samples scored"))
    heat = next(line for line in lines if line.startswith("│ heat "))
    assert heat.split("│")[-2].split()[0] == "2"  # s1's 12 samples, 10 % held out: 2 scored
