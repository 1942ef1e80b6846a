"""Evaluation of a trained model on a store's groups: accuracy, physics and super-resolution.

For every group of a family the model knows (the held-out samples of the groups it trained on,
all samples of groups at other resolutions, which test zero-shot super-resolution when finer):

- nRMSE per channel (relative L2, physical units);
- RMSE in low / mid / high spatial-frequency bands (thirds of the resolved radial wavenumbers);
- conservation error: change of the spatial mean over time, prediction against truth, relative
  to the truth's spread;
- boundary error: RMSE on the boundary points, relative to the truth's RMS there;
- the relative PDE residual of the prediction and of the solver data (its floor).

Writes ``report.json``, ``report.md`` and, per group, a PNG of prediction, truth and error for the
first sample at the final snapshot.
"""

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pdeladder.dataset.store import open_store
from pdeladder.errors import UserInputError
from pdeladder.solvers.registry import get_family
from pdeladder.trainer.models.checkpoint import load_model
from pdeladder.trainer.training.data import StoreBatches
from pdeladder.trainer.training.layout import SlotLayout
from pdeladder.trainer.training.processor import DataProcessor
from pdeladder.trainer.training.validation import predict, sample_scores


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
    m = torch.zeros(shape, dtype=torch.bool)
    for a in range(dim):
        idx = [slice(None)] * 3
        for end in (0, -1):
            idx[a] = end
            m[tuple(idx)] = True
    return m


def group_report(pred: torch.Tensor, batch: dict[str, Any], layout: SlotLayout) -> dict[str, Any]:
    """Metrics of one batch: ``pred`` and truth are ``(B, C, T, X, Y, Z)`` physical."""
    truth = batch["fields"].movedim(2, 1)
    grid = batch["grid"]
    slots = [i for i, p in enumerate(batch["predicted"][0].tolist()) if p]
    nrmse, residual = sample_scores(pred, batch, layout)
    _, truth_residual = sample_scores(truth, batch, layout)
    per_channel, bands, conservation, boundary = {}, {}, {}, {}
    bmask = boundary_mask(grid.shape, grid.dim)
    for s in slots:
        p, t = pred[:, s], truth[:, s]  # (B, T, X, Y, Z)
        name = layout.slots[s]
        per_channel[name] = float(
            ((p - t).square().mean() / t.square().mean().clamp_min(1e-20)).sqrt()
        )
        bands[name] = dict(zip(("low", "mid", "high"), band_rmse(p - t, grid.dim), strict=True))
        drift_p = p.mean((2, 3, 4)) - p.mean((2, 3, 4))[:, :1]
        drift_t = t.mean((2, 3, 4)) - t.mean((2, 3, 4))[:, :1]
        conservation[name] = float((drift_p - drift_t).abs().max() / t.std().clamp_min(1e-20))
        pb, tb = p[..., bmask], t[..., bmask]
        boundary[name] = float(
            ((pb - tb).square().mean() / tb.square().mean().clamp_min(1e-20)).sqrt()
        )
    return {
        "samples": len(nrmse),
        "nrmse": float(nrmse.mean()),
        "nrmse_per_channel": per_channel,
        "rmse_bands": bands,
        "conservation_error": conservation,
        "boundary_error": boundary,
        "residual": float(residual.mean()),
        "residual_of_data": float(truth_residual.mean()),
    }


def evaluate_checkpoint(
    checkpoint: str | Path, store_url: str, out_dir: str | Path | None = None, held_out: float = 0.1
) -> dict[str, Any]:
    """Evaluate the model in ``checkpoint`` on ``store_url``; returns the report (per group and
    per family) and writes it under ``out_dir`` when given."""
    model, meta = load_model(checkpoint)
    model.eval()
    layout = SlotLayout.from_json(meta["layout"])
    processor = DataProcessor(layout)
    store = open_store(store_url)
    trained = set(meta.get("paths", []))
    trained_res = {p.split("/")[1] + "/" + p.split("/")[2].split("_n")[0] for p in trained}
    groups: dict[str, Any] = {}
    plots = []
    for path in store.groups():
        g = store.group(path)
        if g.family not in layout.families or not set(
            get_family(g.family).channel_names(g.grid.dim)
        ) <= set(layout.slots):
            continue  # a family, or a dimension of it, the model has no channel slots for
        seen = path in trained
        data = StoreBatches(
            store_url=store_url,
            paths=[path],
            layout=layout,
            batch_size=8,
            held_out=held_out if seen else 1.0,
        )
        test = np.asarray(data.test[0] if seen else np.concatenate([data.train[0], data.test[0]]))
        if len(test) == 0:
            continue
        batch = data.load(0, test[:16])
        pred = predict(model, processor, batch)
        report = group_report(pred, batch, layout)
        fam_dim = f"{g.family}/{g.grid.dim}d"
        report["kind"] = (
            "held_out" if seen else ("other_resolution" if fam_dim in trained_res else "unseen")
        )
        groups[path] = report
        plots.append((path, pred, batch))
    if not groups:
        raise UserInputError(f"{store_url}: no groups of the model's families {layout.families}")
    families: dict[str, dict[str, float]] = {}
    for path, r in groups.items():
        f = families.setdefault(path.split("/")[1], {"nrmse": 0.0, "residual": 0.0, "samples": 0})
        f["nrmse"] += r["nrmse"] * r["samples"]
        f["residual"] += r["residual"] * r["samples"]
        f["samples"] += r["samples"]
    for f in families.values():
        f["nrmse"] /= f["samples"]
        f["residual"] /= f["samples"]
    report = {
        "checkpoint": str(checkpoint),
        "store": store_url,
        "families": families,
        "groups": groups,
    }
    if out_dir is not None:
        write_report(report, plots, layout, Path(out_dir))
    return report


def write_report(report: dict[str, Any], plots: list, layout: SlotLayout, out: Path) -> None:
    """``report.json``, ``report.md`` and one prediction/truth/error PNG per group."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=2))
    lines = [f"# Evaluation of `{report['checkpoint']}`", "", f"Store: `{report['store']}`", ""]
    lines += ["| family | nRMSE | residual | samples |", "|---|---|---|---|"]
    lines += [
        f"| {n} | {f['nrmse']:.4g} | {f['residual']:.4g} | {f['samples']} |"
        for n, f in report["families"].items()
    ]
    lines += [
        "",
        "| group | kind | nRMSE | residual (data) | bands low/mid/high | conservation | boundary |",
        "|---|---|---|---|---|---|---|",
    ]
    for path, r in report["groups"].items():
        b = "; ".join(
            f"{c}: " + "/".join(f"{v:.2g}" for v in bb.values())
            for c, bb in r["rmse_bands"].items()
        )
        cons = ", ".join(f"{v:.2g}" for v in r["conservation_error"].values())
        bnd = ", ".join(f"{v:.2g}" for v in r["boundary_error"].values())
        lines.append(
            f"| {path} | {r['kind']} | {r['nrmse']:.4g} | {r['residual']:.3g} ({r['residual_of_data']:.3g}) | {b} | {cons} | {bnd} |"
        )
    (out / "report.md").write_text("\n".join(lines) + "\n")
    for path, pred, batch in plots:
        s = int(np.flatnonzero(batch["predicted"][0].numpy())[0])
        p, t = pred[0, s, -1].numpy(), batch["fields"][0, -1, s].numpy()  # (X, Y, Z) at t_end
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
