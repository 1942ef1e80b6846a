"""An evaluation's pictures: each group's prediction, truth and error, and the refinement's
nRMSE against its steps."""

from pathlib import Path
from typing import Any

import numpy as np
import torch

from pdeladder.dataset.slots import SlotLayout


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


def plot_group(
    path: str,
    pred: torch.Tensor,
    truth: torch.Tensor,
    batch: dict[str, Any],
    layout: SlotLayout,
    file: Path,
) -> None:
    """Prediction, truth and error of the batch's first sample at the final snapshot
    (``pred``, ``truth``: ``(B, C, T, X, Y, Z)`` physical) into the PNG ``file``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = int(np.flatnonzero(batch["predicted"][0].numpy())[0])
    p, t = pred[0, s, -1].numpy(), truth[0, s, -1].numpy()  # (X, Y, Z) at t_end
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.5))
    for ax, img, title in zip(axes, (p, t, p - t), ("prediction", "truth", "error"), strict=True):
        if batch["grid"].dim == 1:
            ax.plot(img[:, 0, 0])
        else:
            im = ax.imshow(img[:, :, img.shape[2] // 2].T, origin="lower")
            fig.colorbar(im, ax=ax)
        ax.set_title(f"{title} ({layout.slots[s]}, t_end)")
    fig.suptitle(path)
    fig.tight_layout()
    fig.savefig(file, dpi=90)
    plt.close(fig)
