"""Finite-difference operators on the regular grid, in pure torch, for strong-form residuals.

Tensors end in the space-time axes ``(..., T, X, Y, Z)`` (singletons beyond ``dim``), as a
family's residual receives them, ``(B, C, T, X, Y, Z)``, or one channel of it, ``(B, T, X, Y, Z)``.
Spatial operators are second-order central differences evaluated at interior points only, so every
result is cropped by one point on each side of each active axis: ``(..., X-2, Y-2, Z-2)`` in 3D,
``(..., X-2, Y-2, 1)`` in 2D. Time derivatives are central differences over interior snapshots
along the axis before ``X``. All operators are differentiable, so residuals can be used as
losses.
"""

import torch

from pdeladder.solvers.grid import Grid


def interior(f: torch.Tensor, dim: int) -> torch.Tensor:
    """Crop one point from both ends of each active spatial axis."""
    for a in range(dim):
        axis = f.ndim - 3 + a
        f = f.narrow(axis, 1, f.shape[axis] - 2)
    return f


def diff(f: torch.Tensor, a: int, grid: Grid) -> torch.Tensor:
    """∂f/∂x_a at interior points, second order."""
    axis = f.ndim - 3 + a
    n = f.shape[axis]
    d = (f.narrow(axis, 2, n - 2) - f.narrow(axis, 0, n - 2)) / (2 * grid.h)
    return interior_except(d, grid.dim, a)


def interior_except(f: torch.Tensor, dim: int, skip: int) -> torch.Tensor:
    """Crop the active spatial axes other than ``skip`` (already cropped by a stencil)."""
    for a in range(dim):
        if a != skip:
            axis = f.ndim - 3 + a
            f = f.narrow(axis, 1, f.shape[axis] - 2)
    return f


def grad(f: torch.Tensor, grid: Grid) -> list[torch.Tensor]:
    """``[∂f/∂x, ∂f/∂y, ...]`` over the active axes, at interior points."""
    return [diff(f, a, grid) for a in range(grid.dim)]


def laplacian(f: torch.Tensor, grid: Grid) -> torch.Tensor:
    """Δf at interior points with the (2·dim+1)-point stencil, second order."""
    out = -2.0 * grid.dim * interior(f, grid.dim)
    for a in range(grid.dim):
        axis = f.ndim - 3 + a
        n = f.shape[axis]
        out = out + interior_except(
            f.narrow(axis, 2, n - 2) + f.narrow(axis, 0, n - 2), grid.dim, a
        )
    return out / grid.h**2


def divergence(u: torch.Tensor, grid: Grid, channel_axis: int) -> torch.Tensor:
    """∇·u for a vector field whose components lie along ``channel_axis`` (first ``dim`` of them)."""
    return sum(diff(u.select(channel_axis, a), a, grid) for a in range(grid.dim))


def time_derivative(f: torch.Tensor, grid: Grid) -> torch.Tensor:
    """∂f/∂t at interior snapshots (central, second order): ``(..., T, X, Y, Z)`` becomes
    ``(..., T - 2, X, Y, Z)``."""
    axis = f.ndim - 4
    n = f.shape[axis]
    return (f.narrow(axis, 2, n - 2) - f.narrow(axis, 0, n - 2)) / (2 * grid.dt)


def time_interior(f: torch.Tensor) -> torch.Tensor:
    """Drop the first and last snapshot of ``(..., T, X, Y, Z)``, to align with
    :func:`time_derivative`."""
    axis = f.ndim - 4
    return f.narrow(axis, 1, f.shape[axis] - 2)


def broadcast_param(params: torch.Tensor, index: int, like: torch.Tensor) -> torch.Tensor:
    """Column ``index`` of ``(B, P)`` params, shaped to broadcast against ``like`` ``(B, ...)``."""
    return params[:, index].reshape(-1, *([1] * (like.ndim - 1)))


def with_walls(
    f: torch.Tensor,
    walls: list[str | None],
    dim: int,
    ends: list[tuple[bool, bool]] | None = None,
) -> torch.Tensor:
    """``f`` ``(B, C, T, X, Y, Z)`` with each channel's wall condition imposed on the box's walls
    (:attr:`~pdeladder.solvers.family.Channel.wall`): ``"zero"`` sets the wall points to 0;
    ``"no_flux"`` sets them so that the second-order one-sided normal derivative vanishes,
    ``f_0 = (4 f_1 - f_2) / 3``; ``None`` leaves the channel as it is.

    ``walls``: one entry per channel. ``ends``: per active axis, whether ``f`` holds its low and
    high wall (a slab of the global grid holds an axis's walls only where it reaches its ends;
    default: every wall). Axes are imposed in order, so an edge takes the last axis's rule.
    """
    out = f.clone()
    for a in range(dim):
        axis = f.ndim - 3 + a
        n = f.shape[axis]
        for side, (wall, first, second) in enumerate(((0, 1, 2), (n - 1, n - 2, n - 3))):
            if ends is not None and not ends[a][side]:
                continue
            for c, kind in enumerate(walls):
                if kind is None:
                    continue
                if n < 3:
                    raise ValueError(f"a wall condition needs 3 points along axis {a}, got {n}")
                plane = out[:, c].select(axis - 1, wall)  # a view: assigning to it writes out
                if kind == "zero":
                    plane.zero_()
                else:
                    near, next_ = (out[:, c].select(axis - 1, i) for i in (first, second))
                    plane.copy_((4 * near - next_) / 3)
    return out
