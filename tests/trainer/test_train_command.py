"""`pdeladder train` ends with the families' held-out nRMSE beside their baselines, a table
within 100 columns (issue 37), not a Python dict; it holds out the curriculum's
``training.held_out`` share of each group."""

import json
from pathlib import Path

from typer.testing import CliRunner

from pdeladder.cli import app


def test_train_ends_with_the_families_table(tiny, tmp_path: Path, ray_local):
    _, url, path = tiny
    half = tmp_path / "half.yaml"  # half of s1's 12 samples held out: 6 trained on, 6 scored
    every = ("      batch_size: 2\n", "      batch_size: 2\n      held_out: 0.5\n")
    half.write_text(path.read_text().replace(*every))
    args = ["train", str(half), "--store", url, "--workers", "1", "--stage", "s1"]
    run = tmp_path / "run"
    result = CliRunner().invoke(app, [*args, "--run-dir", str(run)], env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "held_out_nrmse" not in out and "{" not in out  # the metrics dict is gone
    assert max(map(len, out.splitlines())) <= 100
    lines = out[out.index("nRMSE per family") :].splitlines()
    head = next(line for line in lines if line.startswith("┃"))
    assert all(h in head for h in ("family", "nRMSE", "baseline", "ratio", "samples scored"))
    heat = next(line for line in lines if line.startswith("│ heat "))
    assert heat.split("│")[-2].split()[0] == "6"
    first = json.loads((run / "metrics.jsonl").read_text().splitlines()[0])
    assert first["step"] / first["epochs"] == 3  # steps per epoch: 6 samples in batches of 2
