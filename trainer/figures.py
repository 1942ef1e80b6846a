"""An evaluation's pictures: each group's prediction, truth and error (:func:`rollout_figure`),
and the refinement's nRMSE against its steps (:func:`plot_refinement`).

Drawn on bare :class:`matplotlib.figure.Figure` objects (Agg canvas, no pyplot state). A
rollout figure is made to be trusted at a glance: prediction and truth of a channel share one
colour scale, the error has its own symmetric one, the axes are the unit box's coordinates, and
it shows every predicted channel at several times; 1D curves are overlaid (truth solid,
prediction dashed).
"""

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from matplotlib.figure import Figure

from pdeladder.dataset.plot import box_image, panel_size, with_units
from pdeladder.dataset.slots import SlotLayout
from pdeladder.solvers.family import Channel
from pdeladder.solvers.grid import Grid
from pdeladder.solvers.registry import get_family

#: Snapshots a rollout figure shows: the first predicted, the middle and the last.
TIMES = 3
#: Colour map of the error: diverging, white at 0.
ERROR_CMAP = "RdBu_r"


def label(channel: Channel) -> str:
    """``u, x velocity [m/s]``: a channel's name and long name, with its units where it has
    any (not ``1``)."""
    return with_units(f"{channel.name}, {channel.long_name}", channel.units)


def when(grid: Grid, k: int) -> str:
    """``t = 0.25`` for snapshot ``k`` of ``grid``; ``steady`` for a steady group's one."""
    return f"t = {grid.times()[k]:.3g}" if grid.snapshots > 1 else "steady"


def shown_times(snapshots: int, most: int = TIMES) -> list[int]:
    """Indices of the snapshots a figure shows: up to ``most`` evenly spread over the rollout,
    the first one the first predicted snapshot (1; 0 for a steady group)."""
    first = 1 if snapshots > 1 else 0
    picks = np.maximum(np.linspace(0, snapshots - 1, most).round(), first)
    return [int(k) for k in np.unique(picks)]


def rollout_figure(
    pred: np.ndarray,
    truth: np.ndarray,
    grid: Grid,
    channels: Sequence[Channel],
    title: str,
) -> Figure:
    """Prediction, truth and error of one sample, ``pred`` and ``truth`` ``(C, T, X, Y, Z)``
    physical (the predicted ``channels`` only; NaN outside a domain that is not the whole box,
    drawn blank and outlined), at the :func:`shown_times`.

    2D/3D (3D: the mid-plane in z): per channel three rows (prediction, truth, error) and
    one column per time (one snapshot: the three rows and one column per channel); prediction
    and truth on one colour scale (their joint range over the times shown), the error on
    ``±max |error|``. 1D: per channel one panel per time with truth
    solid and prediction dashed on one y range, and a last panel of the errors."""
    times, x = shown_times(grid.snapshots), grid.axis(0)
    if grid.dim == 1:
        fig = Figure(figsize=(2.8 * (len(times) + 1), 2.4 * len(channels)), layout="constrained")
        axes = fig.subplots(len(channels), len(times) + 1, squeeze=False)
        for c, chan in enumerate(channels):
            p, u = pred[c, times, :, 0, 0], truth[c, times, :, 0, 0]  # (times, X)
            lo, hi = min(np.nanmin(p), np.nanmin(u)), max(np.nanmax(p), np.nanmax(u))
            pad = 0.05 * (hi - lo) + 1e-12
            worst = float(np.nanmax(np.abs(p - u))) + 1e-12
            for j, k in enumerate(times):
                ax = axes[c, j]
                ax.plot(x, u[j], "-", color="k", label="truth")
                ax.plot(x, p[j], "--", color="C3", label="prediction")
                ax.set_xlim(0, 1)
                ax.set_ylim(lo - pad, hi + pad)
                ax.set_title(f"{chan.name}, {when(grid, k)}", fontsize=9)
                ax.set_xlabel("x")
            axes[c, 0].set_ylabel(label(chan))
            err = axes[c, -1]
            for j, k in enumerate(times):
                err.plot(x, p[j] - u[j], color=f"C{j}", label=when(grid, k))
            err.axhline(0, color="0.6", lw=0.5)
            err.set_xlim(0, 1)
            err.set_ylim(-1.05 * worst, 1.05 * worst)
            err.set_title(f"{chan.name} error (prediction - truth)", fontsize=9)
            err.set_xlabel("x")
            err.legend(fontsize=7)
            axes[c, 0].legend(fontsize=7)
        fig.suptitle(title, fontsize=10)
        return fig
    z = truth.shape[-1] // 2
    outside = np.isnan(truth[0, 0, :, :, z])  # (X, Y): outside the domain, drawn outlined
    panel_w, panel_h = panel_size(grid)
    # a series: per channel three rows, one column per time; one snapshot (a steady family):
    # the three rows, one column per channel
    cols, blocks = (len(channels), 1) if len(times) == 1 else (len(times), len(channels))
    fig = Figure(figsize=(panel_w * cols + 1.2, panel_h * 3 * blocks), layout="constrained")
    axes = fig.subplots(3 * blocks, cols, squeeze=False, sharex=True, sharey=True)
    for c, chan in enumerate(channels):
        p, u = pred[c, times, :, :, z], truth[c, times, :, :, z]  # (times, X, Y)
        lo, hi = float(min(np.nanmin(p), np.nanmin(u))), float(max(np.nanmax(p), np.nanmax(u)))
        worst = float(np.nanmax(np.abs(p - u))) or 1e-12
        rows = axes[:, c : c + 1] if len(times) == 1 else axes[3 * c : 3 * c + 3]  # (3, times)
        for j, k in enumerate(times):
            for row, (kind, plane) in enumerate((("prediction", p[j]), ("truth", u[j]))):
                im = box_image(rows[row, j], plane, grid, outside, vmin=lo, vmax=hi, cmap="viridis")
                rows[row, j].set_title(f"{chan.name} {kind}, {when(grid, k)}", fontsize=8)
            error = p[j] - u[j]
            bad = box_image(
                rows[2, j], error, grid, outside, vmin=-worst, vmax=worst, cmap=ERROR_CMAP
            )
            rows[2, j].set_title(f"{chan.name} error, {when(grid, k)}", fontsize=8)
        fig.colorbar(im, ax=list(rows[:2].flat), shrink=0.8, label=label(chan))
        fig.colorbar(bad, ax=list(rows[2]), shrink=0.8, label=f"error in {chan.name}")
    for ax in axes.flat:
        ax.label_outer()  # one box: its coordinates on the left column and bottom row
    plane = f" (z = {grid.axis(2)[z]:g} plane)" if grid.dim == 3 else ""
    fig.suptitle(title + plane, fontsize=10)
    return fig


def plot_group(
    path: str,
    pred: torch.Tensor,
    truth: torch.Tensor,
    batch: dict[str, Any],
    layout: SlotLayout,
    file: Path,
) -> None:
    """The :func:`rollout_figure` of the batch's first sample (``pred``, ``truth``:
    ``(B, C, T, X, Y, Z)`` physical, in ``layout``'s slots) into the PNG ``file``; the points
    outside its domain (:meth:`~pdeladder.dataset.slots.SlotLayout.inside`) drawn blank."""
    grid = batch["grid"]
    family = get_family(layout.families[int(batch["family"][0])])
    by_name = {c.name: c for c in family.channels_for(grid.dim)}
    slots = np.flatnonzero(batch["predicted"][0].numpy())
    channels = [by_name[layout.slots[s]] for s in slots]
    title = f"{path}, sample {int(batch['index'][0])}"
    p, u = pred[0, slots].numpy(), truth[0, slots].numpy()  # (C, T, X, Y, Z)
    inside = layout.inside(batch)
    if inside is not None:
        outside = inside[0].numpy() == 0  # (1, 1, X, Y, Z)
        p, u = np.where(outside, np.nan, p), np.where(outside, np.nan, u)
    fig = rollout_figure(p, u, grid, channels, title)
    fig.savefig(file, dpi=90)


def plot_refinement(report: dict[str, Any], file: Path) -> None:
    """nRMSE against refinement steps, one curve per group (those refined in one process)."""
    curves = {
        p: r["refinement"]["curve"]
        for p, r in report["groups"].items()
        if "curve" in r.get("refinement", {})
    }
    if not curves:
        return
    fig = Figure(figsize=(7, 4.5), layout="constrained")
    ax = fig.subplots()
    for path, curve in curves.items():
        ax.semilogy(range(len(curve)), curve, label=path)
    ax.set_xlabel("refinement step (L-BFGS iteration)")
    ax.set_ylabel("held-out nRMSE")
    ax.set_title("Refinement at inference against the PDE residual")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.savefig(file, dpi=110)
