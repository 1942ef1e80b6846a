"""Pictures of one stored sample: its channels over time, titled with its parameters.

Drawn on a bare :class:`matplotlib.figure.Figure` (Agg canvas, no pyplot state, no display), in
the box's coordinates in metres. Input channels that do not change in time (a permeability, a
velocity field) are drawn once, in the first row; every other channel gets a row of snapshots
on one colour scale (one y range in 1D). 1D samples are drawn as curves, 2D as images, 3D as
their mid-plane slice in ``z``. A group with a :data:`~pdeladder.solvers.family.MASK` channel has
its other channels drawn inside the domain only (blank outside, the colour scale over the
inside) and the domain's outline drawn on every image.
"""

import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from pdeladder.dataset.format import ChannelMeta, ParameterMeta
from pdeladder.dataset.group import Group
from pdeladder.solvers.family import MASK
from pdeladder.solvers.grid import Grid

MAX_SNAPSHOTS = 6


def box_image(
    ax: Any, plane: np.ndarray, grid: Grid, outside: np.ndarray | None = None, **style: Any
) -> Any:
    """Draw the ``(X, Y)`` ``plane`` in the box's coordinates: pixel centres on the grid
    points, axes from 0 to the box's lengths, labelled ``x`` and ``y``; with ``outside``
    ``(X, Y)`` bool (the points outside a domain that is not the whole box), its outline."""
    (hx, hy), (lx, ly) = (h / 2 for h in grid.spacing[:2]), grid.lengths[:2]
    im = ax.imshow(plane.T, origin="lower", extent=(-hx, lx + hx, -hy, ly + hy), **style)
    if outside is not None and outside.any():
        ax.contour(grid.axis(0), grid.axis(1), ~outside.T, levels=[0.5], colors="k",
                   linewidths=0.6)  # fmt: skip
    ax.set_xlim(0, lx)
    ax.set_ylim(0, ly)
    ax.set_xlabel("x", fontsize=8)
    ax.set_ylabel("y", fontsize=8)
    ax.tick_params(labelsize=7)
    return im


def panel_size(grid: Grid) -> tuple[float, float]:
    """Width and height in inches of one panel of ``grid``'s fields: the box drawn to scale (a
    wide box, as a chip stack's 10 mm x 1.6 mm, in wider and lower panels), its title, labels
    and colour bar room around it."""
    if grid.dim == 1:
        return 2.6, 2.4
    aspect = grid.lengths[1] / grid.lengths[0]
    width = 2.6 if aspect >= 0.5 else 4.2
    return width, (width - 0.8) * min(aspect, 1.5) + 1.0


def with_units(name: str, units: str) -> str:
    """``name [units]``, or ``name`` for dimensionless (``1``) values."""
    return name if units in ("", "1") else f"{name} [{units}]"


def params_text(values: Sequence[float], parameters: Sequence[ParameterMeta]) -> str:
    """``nu = 0.01, Pe = 120 [1/s]``: a sample's parameters with their units."""
    return ", ".join(
        f"{p.name} = {v:.4g}" + ("" if p.units in ("", "1") else f" {p.units}")
        for p, v in zip(parameters, values, strict=True)
    )


def sample_figure(
    fields: np.ndarray, grid: Grid, channels: Sequence[ChannelMeta], title: str
) -> Figure:
    """The picture of one sample's ``fields`` ``(T, C, X, Y, Z)`` on ``grid``: time-constant
    input channels once in the first row, each other channel in a row of up to
    :data:`MAX_SNAPSHOTS` snapshots on one colour scale (its range over the whole series);
    ``title``'s lines wrapped to the figure's width."""
    T = fields.shape[0]
    picks = np.unique(np.linspace(0, T - 1, min(T, MAX_SNAPSHOTS)).round().astype(int))
    constant = [
        c
        for c, chan in enumerate(channels)
        if chan.role == "input" and (fields[:, c] == fields[:1, c]).all()
    ]
    varying = [c for c in range(len(channels)) if c not in constant]
    rows = len(varying) + (1 if constant else 0)
    cols = max(len(picks) if varying else 0, len(constant))
    panel_w, panel_h = panel_size(grid)
    width = max(panel_w * cols + 0.8, 5.0)  # inches
    fig = Figure(figsize=(width, panel_h * rows + 0.6), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False)
    times, x, z = grid.times(), grid.axis(0), fields.shape[-1] // 2
    panels = [(0, j, c, 0, "constant in time") for j, c in enumerate(constant)]
    first = 1 if constant else 0
    panels += [
        (first + i, j, c, k, f"t = {times[k]:.3g}" if T > 1 else "steady")
        for i, c in enumerate(varying)
        for j, k in enumerate(picks)
    ]
    names = [chan.name for chan in channels]
    outside = fields[0, names.index(MASK)] == 0 if MASK in names else None  # (X, Y, Z)
    for row, col, c, k, when in panels:
        ax, chan = axes[row, col], channels[c]
        shown = fields[:, c]
        if outside is not None and chan.name != MASK:  # the domain only: blank outside
            shown = np.where(outside, np.nan, shown)
        lo, hi = float(np.nanmin(shown)), float(np.nanmax(shown))
        if grid.dim == 1:
            ax.plot(x, shown[k, :, 0, 0])
            ax.set_xlim(0, grid.lengths[0])
            pad = 0.05 * (hi - lo) + 1e-12
            ax.set_ylim(lo - pad, hi + pad)
            ax.set_xlabel("x", fontsize=8)
            ax.set_ylabel(with_units(chan.name, chan.units), fontsize=8)
        else:
            edge = None if outside is None else outside[:, :, z]
            im = box_image(ax, shown[k, :, :, z], grid, edge, vmin=lo, vmax=hi)
            if c in constant or col == len(picks) - 1:
                fig.colorbar(im, ax=ax, shrink=0.8, label=with_units(chan.name, chan.units))
        ax.set_title(f"{chan.name} ({chan.long_name}), {when}", fontsize=8)
    used = {(row, col) for row, col, *_ in panels}
    for (row, col), ax in np.ndenumerate(axes):
        if (row, col) not in used:
            ax.set_axis_off()
    title += f" (z = {grid.axis(2)[z]:.3g} slice)" if grid.dim == 3 else ""
    lines = [part for line in title.splitlines() for part in textwrap.wrap(line, int(11 * width))]
    fig.suptitle("\n".join(lines), fontsize=10)
    return fig


def sample_title(group: Group, index: int) -> str:
    """``{path} sample {index}`` and a line with its seed and parameters (with units)."""
    info = group.info(index)
    values = [info["params"][p.name] for p in group.meta.parameters]
    about = params_text(values, group.meta.parameters)
    return f"{group.path} sample {index}\nseed {info['seed']}: {about}"


def plot_sample(group: Group, index: int, out: Path) -> Path:
    """Draw sample ``index`` of ``group`` (:func:`sample_figure`, titled by
    :func:`sample_title`) into the PNG ``out``; returns ``out``."""
    fig = sample_figure(
        group.read(index), group.grid, group.meta.channels, sample_title(group, index)
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
    return out
