"""The terminal tables of `evaluate` and `train` (issue 37): one line per row within 100
columns, headers whole, and the families' scores beside their baselines."""

import io
from pathlib import Path

from rich.console import Console

from pdeladder.trainer.evaluate import evaluate_checkpoint
from pdeladder.trainer.report import FEW_SAMPLES, family_table, group_table, residual_table

#: A long group path, as a 3D stage's groups have.
LONG = "stage_refined/navier_stokes/3d_n129_t41"


def rendered(table) -> list[str]:
    """``table`` as a 100-column terminal prints it, line by line."""
    out = io.StringIO()
    Console(file=out, width=100, color_system=None).print(table)
    return out.getvalue().splitlines()


def test_tables_fit_100_columns_one_line_per_row(known_store, operator_checkpoint, tmp_path: Path):
    url, (heat, darcy) = known_store.url, known_store.paths
    report = evaluate_checkpoint(operator_checkpoint(tmp_path / "model", url, [heat, darcy]), url)
    report["groups"][LONG] = report["groups"].pop(heat)
    report["groups"][LONG]["kind"] = "other_resolution"
    report["families"]["navier_stokes"] = report["families"].pop("heat")
    for table, header in (
        (family_table(report), ("family", "nRMSE", "baseline", "ratio", "samples scored")),
        (group_table(report), ("group", "kind", "nRMSE", "baseline", "ratio", "samples")),
        (residual_table(report), ("group", "prediction", "solver data")),
    ):
        lines = rendered(table)
        assert max(map(len, lines)) <= 100
        head = next(line for line in lines if line.startswith("┃"))  # the header row
        assert all(h in head for h in header), head
    lines = rendered(family_table(report))
    for name, f in report["families"].items():  # every cell of a family on its one line
        row = next(line for line in lines if name in line)
        cells = (f"{f['nrmse']:.4g}", f"{f['baseline_nrmse']:.4g}", f"{f['ratio']:.3g}")
        assert all(c in row for c in cells) and f" {f['samples']} " in row, row
    assert f["samples"] < FEW_SAMPLES and any("rough" in line for line in lines)
    row = next(line for line in rendered(group_table(report)) if LONG in line)
    assert "other res" in row and str(report["groups"][LONG]["samples"]) in row
