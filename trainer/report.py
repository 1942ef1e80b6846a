"""An evaluation report rendered for people: the tables of ``report.md``, written beside
``report.json`` and the figures (:mod:`pdeladder.trainer.figures`), and the terminal tables of
``evaluate`` and ``train`` (:func:`group_table`, :func:`family_table`; 100 columns wide).
"""

import json
from pathlib import Path
from typing import Any

from rich.table import Column, Table

from pdeladder.trainer.figures import plot_refinement


def ratio_cell(scores: dict[str, Any]) -> str:
    """A report's ratio, flagged where the model does not beat its baseline."""
    r = scores["ratio"]
    text = "-" if r is None else f"{r:.3g}"
    return text if scores["beats_baseline"] else f"{text} (not better than baseline)"


def channel_cell(scores: dict[str, Any]) -> str:
    """``u: 0.12 / 0.5, v: ...``: a group's nRMSE per channel, model / baseline."""
    base = scores["baseline_nrmse_per_channel"]
    return ", ".join(
        f"{c}: {v:.3g} / {base[c]:.3g}" for c, v in scores["nrmse_per_channel"].items()
    )


#: Samples below which a score is flagged as rough.
FEW_SAMPLES = 10


#: How the terminal tables name a group's kind (report.json's ``kind``).
KIND_LABELS = {"held_out": "held out", "other_resolution": "other res", "unseen": "unseen"}


def group_table(report: dict[str, Any]) -> Table:
    """Every group's nRMSE beside its baseline's, the ratio and the samples scored; a group of
    several channels has a row per channel under it."""
    table = Table(
        Column("group", overflow="fold"), "kind", "nRMSE", "baseline", "ratio", "samples",
        title="nRMSE per group against the trivial baseline on the same samples "
        "(ratio < 1: beats it)",
        caption="baseline: persistence u(t) = u(0); steady groups: the training mean field (of "
        "a group not trained on: the group mean field)",
    )  # fmt: skip
    for path, r in report["groups"].items():
        table.add_row(
            path, KIND_LABELS[r["kind"]], f"{r['nrmse']:.4g}", f"{r['baseline_nrmse']:.4g}",
            _flagged(r), str(r["samples"]),
        )  # fmt: skip
        model, base = r["nrmse_per_channel"], r["baseline_nrmse_per_channel"]
        if len(model) > 1:
            for c, v in model.items():
                share = r["ratio_per_channel"][c]
                table.add_row(
                    f"  channel {c}", "", f"{v:.4g}", f"{base[c]:.4g}",
                    "-" if share is None else f"{share:.3g}",
                )  # fmt: skip
    return table


def residual_table(report: dict[str, Any]) -> Table:
    """Every group's relative PDE residual: of the prediction and of the solver's data."""
    table = Table(
        "group", "prediction", "solver data",
        title="Relative PDE residual (the solver data's: the floor)",
    )  # fmt: skip
    for path, r in report["groups"].items():
        table.add_row(path, f"{r['residual']:.3g}", f"{r['residual_of_data']:.3g}")
    return table


def family_table(report: dict[str, Any]) -> Table:
    """Each family's nRMSE beside its baseline's, the ratio and the samples scored: the table
    ``train`` and ``evaluate`` end with."""
    families = report["families"]
    table = Table(
        "family", "nRMSE", "baseline", "ratio", "samples scored",
        title="nRMSE per family against the trivial baseline (ratio < 1: beats it)",
    )  # fmt: skip
    for name, f in families.items():
        table.add_row(
            name, f"{f['nrmse']:.4g}", f"{f['baseline_nrmse']:.4g}", _flagged(f),
            f"{f['samples']}" + (" (few: rough)" if f["samples"] < FEW_SAMPLES else ""),
        )  # fmt: skip
    if any(f["samples"] < FEW_SAMPLES for f in families.values()):
        table.caption = (
            f"Under {FEW_SAMPLES} samples a score is rough: raise training.held_out or the "
            "groups' samples."
        )
    return table


def _flagged(scores: dict[str, Any]) -> str:
    """The ratio to the baseline, in red and marked where the model does not beat it."""
    r = scores["ratio"]
    text = "-" if r is None else f"{r:.3g}"
    return text if scores["beats_baseline"] else f"[red]{text} no gain"


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.4g}"


def convention_tables(report: dict[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    """The other conventions' scores of a report as ``(title, header, rows)`` tables, one per
    convention present: each score as ``model / baseline`` per group and channel."""
    groups = report["groups"]
    tables = []
    if any("pdebench" in r for r in groups.values()):
        keys = ("nrmse", "rmse", "crmse", "brmse")
        rows = []
        for path, r in groups.items():
            model, base = r["pdebench"]["model"], r["pdebench"]["baseline"]
            for c, m in model.items():
                b = base[c]
                rows.append(
                    [path, c]
                    + [f"{_num(m[k])} / {_num(b[k])}" for k in keys]
                    + [
                        "/".join(_num(v) for v in m["frmse"].values())
                        + " ; "
                        + "/".join(_num(v) for v in b["frmse"].values())
                    ]
                )
        header = ["group", "channel", "nRMSE", "RMSE", "cRMSE", "bRMSE"]
        header.append("fRMSE low/mid/high (model ; baseline)")
        title = (
            "PDEBench's metrics (per time step, plain spatial means, input snapshot excluded): "
            "model / baseline"
        )
        tables.append((title, header, rows))
    if any("well" in r for r in groups.values()):
        rows = [
            [path, c, f"{_num(v['vrmse'])} / {_num(r['well']['baseline'][c]['vrmse'])}"]
            for path, r in groups.items()
            if "well" in r
            for c, v in r["well"]["model"].items()
        ]
        title = "The Well's VRMSE (RMSE over the truth's standard deviation): model / baseline"
        tables.append((title, ["group", "channel", "VRMSE"], rows))
    return tables


def refinement_rows(report: dict[str, Any]) -> list[list[str]]:
    """One row per refined group: its nRMSE unrefined and refined, their ratio, the residual
    before and after, and the refinement's seconds per sample."""
    rows = []
    for path, r in report["groups"].items():
        if "refinement" in r:
            u = r["unrefined"]
            rows.append([
                path, f"{u['nrmse']:.4g}", f"{r['nrmse']:.4g}", f"{r['nrmse'] / u['nrmse']:.3g}",
                f"{u['residual']:.3g} / {r['residual']:.3g}",
                f"{r['refinement']['seconds_per_sample']:.3g}",
            ])  # fmt: skip
    return rows


def markdown(report: dict[str, Any]) -> str:
    """``report.md``: the families' and groups' scores beside their baselines, the refinement
    and the other conventions' tables."""
    lines = [f"# Evaluation of `{report['checkpoint']}`", "", f"Store: `{report['store']}`", ""]
    lines += [
        "nRMSE of the model beside its trivial baseline on the same samples (persistence "
        "u(t) = u(0); steady: the training mean field); ratio = model / baseline.",
        "",
        "| family | nRMSE | baseline | ratio | residual | samples |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {n} | {f['nrmse']:.4g} | {f['baseline_nrmse']:.4g} | {ratio_cell(f)} | "
        f"{f['residual']:.4g} | {f['samples']} |"
        for n, f in report["families"].items()
    ]
    lines += [
        "",
        "| group | kind | nRMSE | baseline | ratio | per channel: model / baseline | "
        "residual (data) | bands low/mid/high | conservation | boundary |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for path, r in report["groups"].items():
        b = "; ".join(
            f"{c}: " + "/".join(f"{v:.2g}" for v in bb.values())
            for c, bb in r["rmse_bands"].items()
        )
        cons = ", ".join(f"{v:.2g}" for v in r["conservation_error"].values())
        bnd = ", ".join(f"{v:.2g}" for v in r["boundary_error"].values())
        lines.append(
            f"| {path} | {r['kind']} | {r['nrmse']:.4g} | {r['baseline_nrmse']:.4g} "
            f"({r['baseline']}) | {ratio_cell(r)} | {channel_cell(r)} | {r['residual']:.3g} "
            f"({r['residual_of_data']:.3g}) | {b} | {cons} | {bnd} |"
        )
    if refinements := refinement_rows(report):
        lines += [
            "",
            f"Refinement at inference ({report['refine_steps']} iterations against the "
            "residual): nRMSE before and after, seconds per sample.",
            "",
            "| group | unrefined | refined | refined / unrefined | residual before / after | "
            "s per sample |",
            "|---|---|---|---|---|---|",
        ]
        lines += ["| " + " | ".join(row) + " |" for row in refinements]
    for title, header, rows in convention_tables(report):
        lines += ["", title, "", "| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def write_report(report: dict[str, Any], out: Path) -> None:
    """``report.json``, ``report.md`` and ``refinement.png`` where groups were refined (each
    group's PNG, :func:`figure_file`, is drawn as the group is scored)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=2))
    (out / "report.md").write_text(markdown(report))
    if refinement_rows(report):
        plot_refinement(report, out / "refinement.png")


def figure_file(out: Path, path: str) -> Path:
    """The prediction/truth/error PNG of group ``path`` in the report folder ``out``
    (:func:`~pdeladder.trainer.figures.plot_group`)."""
    return out / (path.replace("/", "__") + ".png")
