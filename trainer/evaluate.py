"""Evaluation of a trained model on a store's groups: accuracy, physics and super-resolution.

For every group of a family the model knows (the held-out samples of the groups it trained on,
all samples of groups at other resolutions, which test zero-shot super-resolution when finer):

- nRMSE per channel (relative L2 with trapezoidal weights over space-time, physical units, mean
  over samples), beside the same nRMSE of the trivial baseline on the same samples and the ratio
  model / baseline (below 1: the model beats it). The baseline is persistence ``u(t) = u(0)``
  for time-dependent groups and, for steady ones, the mean field of the group's training
  samples (the trainer's held-out rule, :func:`pdeladder.dataset.catalog.split`; for a
  group the model never trained on, the mean field of all its samples, the evaluated ones
  among them, which is harder to beat);
- RMSE in low / mid / high spatial-frequency bands (thirds of the resolved radial wavenumbers);
- conservation error: change of the spatial mean over time, prediction against truth, relative
  to the truth's spread;
- boundary error: RMSE on the boundary points, relative to the truth's RMS there;
- the relative PDE residual of the prediction and of the solver data (its floor).

The nRMSE is pdeladder's one definition, :func:`pdeladder.trainer.metrics.nrmse` (the training
validation's too). With ``metrics`` ``pdebench``, ``well`` or ``all``, each group's report also
holds the other conventions under their own names (:mod:`pdeladder.trainer.metrics`), for the
model and its baseline alike: ``pdebench`` (nRMSE, RMSE, cRMSE, bRMSE, fRMSE low/mid/high per
channel) and ``well`` (VRMSE per channel).

Writes ``report.json``, ``report.md`` and, per group, a PNG of prediction, truth and error for the
first sample at the final snapshot.
"""

import itertools
import json
import math
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pdeladder.dataset.catalog import Catalog
from pdeladder.dataset.loader import StoreDataset
from pdeladder.dataset.slots import SlotLayout
from pdeladder.dataset.store import open_store
from pdeladder.errors import UserInputError
from pdeladder.outputs import check_apart, check_writable
from pdeladder.solvers.registry import get_family
from pdeladder.trainer.metrics import nrmse, pdebench_scores, well_vrmse
from pdeladder.trainer.models.checkpoint import load_model
from pdeladder.trainer.predict import knows, predict_store
from pdeladder.trainer.refine import check_steps, refine_batch
from pdeladder.trainer.training.processor import DataProcessor
from pdeladder.trainer.training.validation import predict, sample_scores, symmetrized

#: Scores averaged over a family's groups, weighted by their samples.
FAMILY_SCORES = ("nrmse", "baseline_nrmse", "residual")
#: Samples of a group evaluated (its first held-out ones).
EVALUATED = 16
#: Relative margin by which a model's nRMSE must undercut its baseline's to beat it.
BEAT_MARGIN = 1e-4
#: The metric conventions ``evaluate --metrics`` names, and the report sections each adds to
#: pdeladder's own (always there: the family scores and the closed loop read them).
CONVENTIONS: dict[str, tuple[str, ...]] = {
    "ours": (),
    "pdebench": ("pdebench",),
    "well": ("well",),
    "all": ("pdebench", "well"),
}


def band_rmse(err: torch.Tensor, dim: int) -> list[float]:
    """RMSE of ``err`` ``(B, T, X, Y, Z)`` in three radial wavenumber bands of the space axes."""
    spec = torch.fft.fftn(err, dim=tuple(range(2, 2 + dim)), norm="ortho").abs().square()
    k = torch.stack(
        torch.meshgrid(*[torch.fft.fftfreq(n) * n for n in err.shape[2 : 2 + dim]], indexing="ij")
    )
    radius = k.square().sum(0).sqrt()
    radius = radius.reshape(*radius.shape, *([1] * (3 - dim)))
    edges = torch.linspace(0, float(radius.max()) + 1e-9, 4)
    n = err[0, 0].numel()
    return [
        float((spec * ((radius >= lo) & (radius < hi))).sum() / (err.shape[0] * err.shape[1] * n))
        ** 0.5
        for lo, hi in itertools.pairwise(edges.tolist())
    ]


def boundary_mask(shape: tuple[int, int, int], dim: int) -> torch.Tensor:
    """``(X, Y, Z)`` mask of the grid points on the box's walls (the active axes' ends)."""
    m = torch.zeros(shape, dtype=torch.bool)
    for a in range(dim):
        idx = [slice(None)] * 3
        for end in (0, -1):
            idx[a] = end
            m[tuple(idx)] = True
    return m


def boundary_error(pred: torch.Tensor, truth: torch.Tensor, dim: int) -> float:
    """RMS of ``pred - truth`` (``(B, T, X, Y, Z)``, one channel) on the walls, relative to the
    RMS of ``truth`` over the whole grid: how far the prediction misses the boundary values, on
    the field's scale (on a Dirichlet wall the truth is 0, so a ratio to its values there would
    be undefined)."""
    walls = boundary_mask(truth.shape[2:], dim)
    miss = (pred - truth)[..., walls].square().mean()
    return float((miss / truth.square().mean().clamp_min(1e-20)).sqrt())


def channel_nrmse(pred: torch.Tensor, truth: torch.Tensor, predicted: torch.Tensor) -> torch.Tensor:
    """nRMSE ``(B, C)`` of ``pred`` against ``truth`` (``(B, C, T, X, Y, Z)``, physical): the
    relative trapezoidal L2 error per sample and channel, 0 where ``predicted`` ``(B, C)`` is
    false. A group's nRMSE is its mean over samples and predicted channels, for the model and
    the baseline alike (as the trainer's held-out score)."""
    return nrmse(pred, truth) * predicted.to(pred.dtype)


def _finite(v: float) -> float | None:
    """A score for JSON: None where it is undefined (an empty PDEBench band)."""
    return v if math.isfinite(v) else None


def convention_scores(
    pred: torch.Tensor,
    truth: torch.Tensor,
    slots: list[int],
    names: list[str],
    dim: int,
    conventions: tuple[str, ...],
) -> dict[str, Any]:
    """PDEBench's and The Well's scores per channel of ``pred`` against ``truth``
    (``(B, C, T, X, Y, Z)``, physical), for the ``conventions`` asked for."""
    out: dict[str, Any] = {}
    p, t = pred[:, slots], truth[:, slots]
    if "pdebench" in conventions:
        s = pdebench_scores(p, t, dim)
        out["pdebench"] = {
            name: {
                **{k: _finite(float(s[k][i])) for k in ("nrmse", "rmse", "crmse", "brmse")},
                "frmse": dict(
                    zip(("low", "mid", "high"), map(_finite, s["frmse"][i].tolist()), strict=True)
                ),
            }
            for i, name in enumerate(names)
        }
    if "well" in conventions:
        v = well_vrmse(p, t).mean((0, 2))
        out["well"] = {name: {"vrmse": _finite(float(v[i]))} for i, name in enumerate(names)}
    return out


def mean_field(
    processor: DataProcessor,
    data: StoreDataset,
    path: str,
    indices: np.ndarray,
    batch_size: int = 8,
) -> torch.Tensor:
    """Mean over samples ``indices`` of ``data``'s group ``path``, ``(C, T, X, Y, Z)``
    physical, in channel slots; read batch by batch (float64 sum)."""
    total = None
    for start in range(0, len(indices), batch_size):
        fields = processor.fields(data.load(path, indices[start : start + batch_size]))
        part = fields.sum(0, dtype=torch.float64)
        total = part if total is None else total + part
    return (total / len(indices)).float()


def baseline_prediction(truth: torch.Tensor, mean: torch.Tensor | None) -> torch.Tensor:
    """The trivial baseline of a batch's physical fields ``truth`` ``(B, C, T, X, Y, Z)``, the
    same shape: persistence of snapshot 0 when the batch has several snapshots, else the steady
    mean field ``mean`` ``(C, 1, X, Y, Z)``."""
    if truth.shape[2] > 1:
        return truth[:, :, :1].expand_as(truth)
    return mean[None].expand_as(truth)


def ratio(model: float, baseline: float) -> float | None:
    """model / baseline nRMSE; None where the baseline is exact (nothing to beat)."""
    return model / baseline if baseline > 0 else None


def beats(model: float, baseline: float) -> bool:
    """Whether the model's nRMSE is below its baseline's by more than float32 rounding (a model
    that computes the baseline itself, as an untrained zero update does, does not beat it)."""
    return model < (1 - BEAT_MARGIN) * baseline


def group_report(
    pred: torch.Tensor,
    truth: torch.Tensor,
    batch: dict[str, Any],
    layout: SlotLayout,
    baseline: torch.Tensor,
    conventions: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Metrics of one batch: ``pred``, ``truth`` (the batch's fields) and ``baseline`` are
    ``(B, C, T, X, Y, Z)`` physical; ``conventions``: the other metric conventions to add
    (:data:`CONVENTIONS`)."""
    grid = batch["grid"]
    slots = [i for i, p in enumerate(batch["predicted"][0].tolist()) if p]
    _, residual = sample_scores(pred, truth, batch, layout)
    _, truth_residual = sample_scores(truth, truth, batch, layout)
    scores = {
        who: channel_nrmse(p, truth, batch["predicted"])
        for who, p in (("model", pred), ("baseline", baseline))
    }  # (B, C) each
    per_channel = {
        who: {layout.slots[s]: float(e[:, s].mean()) for s in slots} for who, e in scores.items()
    }
    bands, conservation, boundary = {}, {}, {}
    for s in slots:
        p, t = pred[:, s], truth[:, s]  # (B, T, X, Y, Z)
        name = layout.slots[s]
        bands[name] = dict(zip(("low", "mid", "high"), band_rmse(p - t, grid.dim), strict=True))
        drift_p = p.mean((2, 3, 4)) - p.mean((2, 3, 4))[:, :1]
        drift_t = t.mean((2, 3, 4)) - t.mean((2, 3, 4))[:, :1]
        conservation[name] = float((drift_p - drift_t).abs().max() / t.std().clamp_min(1e-20))
        boundary[name] = boundary_error(p, t, grid.dim)
    group = {who: float(e[:, slots].mean()) for who, e in scores.items()}
    names = [layout.slots[s] for s in slots]
    others = {
        who: convention_scores(p, truth, slots, names, grid.dim, conventions)
        for who, p in (("model", pred), ("baseline", baseline))
    }
    extra = {c: {who: others[who][c] for who in others} for c in conventions}
    return {
        "samples": truth.shape[0],
        "nrmse": group["model"],
        "nrmse_per_channel": per_channel["model"],
        "baseline_nrmse": group["baseline"],
        "baseline_nrmse_per_channel": per_channel["baseline"],
        "ratio": ratio(group["model"], group["baseline"]),
        "ratio_per_channel": {
            c: ratio(v, per_channel["baseline"][c]) for c, v in per_channel["model"].items()
        },
        "beats_baseline": beats(group["model"], group["baseline"]),
        "rmse_bands": bands,
        "conservation_error": conservation,
        "boundary_error": boundary,
        "residual": float(residual.mean()),
        "residual_of_data": float(truth_residual.mean()),
        **extra,
    }


def evaluate_checkpoint(
    checkpoint: str | Path,
    store_url: str,
    out_dir: str | Path | None = None,
    held_out: float = 0.1,
    metrics: str = "ours",
    domain_ranks: int = 1,
    symmetrize: bool | None = None,
    refine: int | str = 0,
    groups: list[str] | None = None,
) -> dict[str, Any]:
    """Evaluate the model in ``checkpoint`` on ``store_url``; returns the report (per group and
    per family) and writes it under ``out_dir`` when given. ``metrics``: a key of
    :data:`CONVENTIONS` (``ours``, ``pdebench``, ``well``, ``all``).

    ``domain_ranks > 1``: the model runs on that many processes, each on an x slab of every
    sample (:func:`~pdeladder.trainer.predict.predict_store` into ``out_dir/predictions.zarr``,
    or a temporary store), and the scores are computed from the stored predictions: one process
    then holds the evaluated samples' fields, never the model's activations on them.

    ``symmetrize``: score the model's mean over the box's symmetries
    (:func:`~pdeladder.trainer.training.validation.predict`; default:
    :func:`~pdeladder.trainer.training.validation.symmetrized`).

    ``refine``: score the predictions improved by that many iterations against each family's
    residual (:mod:`pdeladder.trainer.refine`); each group's report then also holds the
    unrefined scores (``unrefined``) and the refinement's nRMSE after every iteration and its
    time per sample (``refinement``; the curve only in one process).

    ``groups``: the group paths to score (default: every group the model knows)."""
    refine = check_steps(refine)
    if metrics not in CONVENTIONS:
        raise UserInputError(f"--metrics {metrics!r}: choose one of {', '.join(CONVENTIONS)}")
    if out_dir is not None:
        check_apart(out_dir, [store_url, checkpoint])
        check_writable(out_dir)  # before the evaluation, not after it
    model, meta = load_model(checkpoint)
    model.eval()
    symmetrize = symmetrized(meta, symmetrize)
    layout = SlotLayout.from_json(meta["layout"])
    processor = DataProcessor(layout)
    store = open_store(store_url)
    trained = set(meta.get("paths", []))
    trained_res = {p.split("/")[1] + "/" + p.split("/")[2].split("_n")[0] for p in trained}
    chosen = {}  # path -> (group, seen, its data, the baseline's samples, evaluated samples)
    available = store.groups()
    if unknown := [p for p in groups or [] if p not in available]:
        raise UserInputError(
            f"{store_url}: no group {unknown[0]!r}; groups: {', '.join(available)}"
        )
    for path in groups or available:
        g = store.group(path)
        if not knows(layout, g, model.config.modes):
            continue  # a family, or a dimension of it, the model has no channel slots for
        seen = path in trained
        catalog = Catalog.build(
            store_url, groups=[path], layout=layout, held_out=held_out if seen else 1.0
        )
        split = catalog.groups[path]
        test = split.test if seen else np.concatenate([split.train, split.test])
        if len(test):
            data = StoreDataset(catalog, batch_size=8)
            chosen[path] = (g, seen, data, split.train if seen else test, test[:EVALUATED])
    if not chosen:
        raise UserInputError(f"{store_url}: no groups of the model's families {layout.families}")
    with ExitStack() as stack:
        if domain_ranks > 1:
            if out_dir is not None:
                pred_url = str(Path(out_dir, "predictions.zarr"))
            else:
                pred_url = str(Path(stack.enter_context(tempfile.TemporaryDirectory()), "p.zarr"))
            job = dict(
                domain_ranks=domain_ranks, samples={p: c[4].tolist() for p, c in chosen.items()},
                symmetrize=symmetrize, force=True,
            )  # fmt: skip
            started = time.perf_counter()
            predict_store(checkpoint, store_url, pred_url, list(chosen), refine=refine, **job)
            seconds = time.perf_counter() - started
            if refine:
                plain_url = str(Path(stack.enter_context(tempfile.TemporaryDirectory()), "p.zarr"))
                started = time.perf_counter()
                predict_store(checkpoint, store_url, plain_url, list(chosen), **job)
                seconds -= time.perf_counter() - started  # the refinement's share
                per_sample = seconds / sum(len(c[4]) for c in chosen.values())
        groups, plots = {}, []
        for path, (g, seen, data, train, test) in chosen.items():
            batch = data.load(path, test)
            truth = processor.fields(batch)
            refinement = None
            if domain_ranks > 1:
                pred = stored_prediction(processor, pred_url, path, test)
                if refine:
                    plain = stored_prediction(processor, plain_url, path, test)
                    refinement = {"steps": refine, "seconds_per_sample": per_sample}
            else:
                pred = predict(model, processor, batch, symmetrize=symmetrize)
                if refine:
                    plain, (pred, refinement) = pred, refined(pred, truth, batch, layout, refine)
            mean, baseline = None, "persistence"
            if g.grid.snapshots == 1:
                mean = mean_field(processor, data, path, train)
                baseline = "training mean field" if seen else "group mean field"
            report = group_report(
                pred, truth, batch, layout, baseline_prediction(truth, mean), CONVENTIONS[metrics]
            )
            report["baseline"] = baseline
            if refinement is not None:
                unrefined = group_report(
                    plain, truth, batch, layout, baseline_prediction(truth, mean)
                )
                report["unrefined"] = {k: unrefined[k] for k in ("nrmse", "ratio", "residual")}
                report["refinement"] = refinement
            fam_dim = f"{g.family}/{g.grid.dim}d"
            report["kind"] = (
                "held_out" if seen else ("other_resolution" if fam_dim in trained_res else "unseen")
            )
            groups[path] = report
            plots.append((path, pred, truth, batch))
    families: dict[str, dict[str, Any]] = {}
    for path, r in groups.items():
        f = families.setdefault(
            path.split("/")[1], {**dict.fromkeys(FAMILY_SCORES, 0.0), "samples": 0}
        )
        for key in FAMILY_SCORES:
            f[key] += r[key] * r["samples"]
        f["samples"] += r["samples"]
        if "unrefined" in r:
            f["unrefined_nrmse"] = (
                f.get("unrefined_nrmse", 0.0) + r["unrefined"]["nrmse"] * r["samples"]
            )
    for f in families.values():
        for key in (*FAMILY_SCORES, "unrefined_nrmse"):
            if key in f:
                f[key] /= f["samples"]
        f["ratio"] = ratio(f["nrmse"], f["baseline_nrmse"])
        f["beats_baseline"] = beats(f["nrmse"], f["baseline_nrmse"])
    report = {
        "checkpoint": str(checkpoint),
        "store": store_url,
        "metrics": metrics,
        "symmetrized": symmetrize,
        "refine_steps": refine,
        "families": families,
        "groups": groups,
    }
    if out_dir is not None:
        write_report(report, plots, layout, Path(out_dir))
    return report


def refined(
    pred: torch.Tensor, truth: torch.Tensor, batch: dict[str, Any], layout: SlotLayout, steps: int
) -> tuple[torch.Tensor, dict[str, Any]]:
    """``pred`` ``(B, C, T, X, Y, Z)`` refined by ``steps`` iterations
    (:func:`~pdeladder.trainer.refine.refine_batch`), and the refinement's record: its steps,
    wall seconds per sample and the group's nRMSE after each iteration (``curve``, from 0)."""
    errors = torch.zeros(steps + 1, *pred.shape[:2], dtype=torch.float64)  # (steps + 1, B, C)

    def observe(name: str, rows: torch.Tensor, k: int, fields: torch.Tensor) -> None:
        slots = layout.slot_indices(get_family(name), batch["grid"].dim)
        mask = batch["predicted"][rows][:, slots]
        errors[k, rows[:, None], slots] = channel_nrmse(
            fields.float(), truth[rows][:, slots], mask
        ).double()

    started = time.perf_counter()
    out, _ = refine_batch(pred, truth, batch, layout, steps, observe=observe)
    seconds = (time.perf_counter() - started) / len(pred)
    predicted = batch["predicted"].to(torch.float64)
    curve = (errors * predicted).sum((1, 2)) / predicted.sum()
    return out, {"steps": steps, "seconds_per_sample": seconds, "curve": curve.tolist()}


def stored_prediction(
    processor: DataProcessor, url: str, path: str, indices: np.ndarray
) -> torch.Tensor:
    """The predictions of samples ``indices`` of group ``path`` in the prediction store at
    ``url``, ``(B, C, T, X, Y, Z)`` physical in ``processor``'s channel slots."""
    catalog = Catalog.build(url, groups=[path], layout=processor.layout)
    return processor.fields(StoreDataset(catalog, batch_size=len(indices)).load(path, indices))


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


def plot_refinement(report: dict[str, Any], file: Path) -> None:
    """nRMSE against refinement steps, one curve per group (those refined in one process)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = {
        p: r["refinement"]["curve"]
        for p, r in report["groups"].items()
        if "curve" in r.get("refinement", {})
    }
    if not curves:
        return
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for path, curve in curves.items():
        ax.semilogy(range(len(curve)), curve, label=path)
    ax.set_xlabel("refinement step (L-BFGS iteration)")
    ax.set_ylabel("held-out nRMSE")
    ax.set_title("Refinement at inference against the PDE residual")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(file, dpi=110)
    plt.close(fig)


def write_report(report: dict[str, Any], plots: list, layout: SlotLayout, out: Path) -> None:
    """``report.json``, ``report.md`` and one prediction/truth/error PNG per group."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=2))
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
            f"Refinement at inference ({report['refine_steps']} L-BFGS steps against the "
            "residual): nRMSE before and after, seconds per sample.",
            "",
            "| group | unrefined | refined | refined / unrefined | residual before / after | "
            "s per sample |",
            "|---|---|---|---|---|---|",
        ]
        lines += ["| " + " | ".join(row) + " |" for row in refinements]
        plot_refinement(report, out / "refinement.png")
    for title, header, rows in convention_tables(report):
        lines += ["", title, "", "| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
    (out / "report.md").write_text("\n".join(lines) + "\n")
    for path, pred, truth, batch in plots:
        s = int(np.flatnonzero(batch["predicted"][0].numpy())[0])
        p, t = pred[0, s, -1].numpy(), truth[0, s, -1].numpy()  # (X, Y, Z) at t_end
        fig, axes = plt.subplots(1, 3, figsize=(12, 3.5))
        for ax, img, title in zip(
            axes, (p, t, p - t), ("prediction", "truth", "error"), strict=True
        ):
            if batch["grid"].dim == 1:
                ax.plot(img[:, 0, 0])
            else:
                im = ax.imshow(img[:, :, img.shape[2] // 2].T, origin="lower")
                fig.colorbar(im, ax=ax)
            ax.set_title(f"{title} ({layout.slots[s]}, t_end)")
        fig.suptitle(path)
        fig.tight_layout()
        fig.savefig(out / (path.replace("/", "__") + ".png"), dpi=90)
        plt.close(fig)
