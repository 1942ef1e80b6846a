"""Pictures of one stored sample: snapshots over time, one row per channel.

Drawn on a bare :class:`matplotlib.figure.Figure` (Agg canvas, no pyplot state, no display).
1D samples are drawn as curves, 2D as images, 3D as their mid-plane ``z = 0.5`` slice.
"""

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from pdeladder.dataset.group import Group

MAX_SNAPSHOTS = 6


def plot_sample(group: Group, index: int, out: Path) -> Path:
    """Draw sample ``index`` of ``group`` into the PNG ``out``; returns ``out``."""
    fields = group.read(index)  # (T, C, X, Y, Z)
    T, C = fields.shape[:2]
    times = group.array("t")[:]
    picks = np.unique(np.linspace(0, T - 1, min(T, MAX_SNAPSHOTS)).round().astype(int))
    fig = Figure(figsize=(2.6 * len(picks), 2.4 * C), layout="constrained")
    axes = fig.subplots(C, len(picks), squeeze=False)
    x, dim = group.array("x")[:], group.grid.dim
    for c, chan in enumerate(group.meta.channels):
        lo, hi = float(fields[:, c].min()), float(fields[:, c].max())
        for j, k in enumerate(picks):
            ax = axes[c, j]
            if dim == 1:
                ax.plot(x, fields[k, c, :, 0, 0])
                ax.set_ylim(lo, hi + 1e-12)
            else:
                plane = fields[k, c, :, :, fields.shape[-1] // 2]  # (X, Y); z mid-plane in 3D
                im = ax.imshow(plane.T, origin="lower", extent=(0, 1, 0, 1), vmin=lo, vmax=hi)
                if j == len(picks) - 1:
                    fig.colorbar(im, ax=ax, shrink=0.8)
            ax.set_title(f"{chan.name}  t={times[k]:.3g}", fontsize=9)
    slice_note = " (z = 0.5 slice)" if dim == 3 else ""
    fig.suptitle(f"{group.path} sample {index}{slice_note}", fontsize=10)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
    return out
