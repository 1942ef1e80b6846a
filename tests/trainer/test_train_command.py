"""`pdeladder train` ends with the families' held-out nRMSE beside their baselines, a table
within 100 columns (issue 37), not a Python dict; it holds out the curriculum's
``training.held_out`` share of each group; its loss curves show the stages' boundaries and the
held-out scores; its models record the share for ``evaluate``."""

import json
from pathlib import Path

from typer.testing import CliRunner

from pdeladder.cli import app
from pdeladder.trainer.models.checkpoint import read_model_json
from pdeladder.trainer.training.metrics_log import curves_figure


def test_train_ends_with_the_families_table(tiny, tmp_path: Path, ray_local):
    _, url, path = tiny
    half = tmp_path / "half.yaml"  # half of each group's samples held out
    every = ("      batch_size: 2\n", "      batch_size: 2\n      held_out: 0.5\n")
    half.write_text(path.read_text().replace(*every))
    args = ["train", str(half), "--store", url, "--workers", "1"]
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
    assert heat.split("│")[-2].split()[0] == "3"  # the last model's: half of s2's 6 samples
    for stage in ("s1", "s2"):  # recorded where a later evaluate finds it
        assert read_model_json(run / "stages" / stage / "model")["metadata"]["held_out"] == 0.5
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert records[0]["step"] / records[0]["epochs"] == 3  # s1: 6 of 12 in batches of 2

    # s1: 8 supervised + 4 self-improvement steps, then s2: 4 steps
    loss = curves_figure(records).axes[0]
    assert (run / "loss_curves.png").stat().st_size > 0
    starts = [line.get_xdata()[0] for line in loss.lines if line.get_linestyle() == "--"]
    assert starts == [0, 12] and [t.get_text() for t in loss.texts] == [
        "s1",
        "s2",
        "self-improvement",
    ]
    phases = [line.get_xdata()[0] for line in loss.lines if line.get_linestyle() == ":"]
    assert phases == [8]
    held = {line.get_label(): line.get_xydata().tolist() for line in loss.lines}
    end = records[-1]["held_out_nrmse_after"]
    before = next(r["held_out_nrmse_before"] for r in records if "held_out_nrmse_before" in r)
    assert held["held-out nRMSE, before self-improvement"] == [[8, before]]
    assert [x for x, _ in held["held-out nRMSE, stage's end"]] == [12, 16]
    assert held["held-out nRMSE, stage's end"][1][1] == end
