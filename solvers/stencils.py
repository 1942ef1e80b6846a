"""Finite-difference operators on the regular grid, in pure torch, for strong-form residuals.

Tensors end in the space-time axes ``(..., T, X, Y, Z)`` (singletons beyond ``dim``), as a
family's residual receives them, ``(B, C, T, X, Y, Z)``, or one channel of it, ``(B, T, X, Y, Z)``.
Spatial operators are second-order central differences with each axis's own spacing
(``Grid.spacing``), evaluated at interior points only, so every result is cropped by one point
on each side of each active axis: ``(..., X-2, Y-2, Z-2)`` in 3D, ``(..., X-2, Y-2, 1)`` in 2D. Time derivatives are central differences over interior snapshots
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
    d = (f.narrow(axis, 2, n - 2) - f.narrow(axis, 0, n - 2)) / (2 * grid.spacing[a])
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
    centre = interior(f, grid.dim)
    out = torch.zeros_like(centre)
    for a in range(grid.dim):
        axis = f.ndim - 3 + a
        n = f.shape[axis]
        side = interior_except(f.narrow(axis, 2, n - 2) + f.narrow(axis, 0, n - 2), grid.dim, a)
        out = out + (side - 2.0 * centre) / grid.spacing[a] ** 2
    return out


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
    odd: list[list[bool]],
    dim: int,
    ends: list[tuple[bool, bool]] | None = None,
) -> torch.Tensor:
    """``f`` ``(B, C, T, X, Y, Z)`` completed by its channels' wall conditions
    (:attr:`~pdeladder.solvers.family.Channel.wall`, one entry per channel), so that a centred
    residual on the result holds the solution's equations on every point it is posed at:

    - ``"zero"`` (Dirichlet): the wall points set to 0; a residual is posed inside them;
    - ``"no_flux"`` (Neumann): one mirrored plane ``f_{-1} = f_1`` past each wall, the
      finite-difference form of the natural condition, so that the residual is posed on the
      walls too (the grid grows by 2 points along each active axis it holds walls of). Every
      channel is then mirrored (:func:`mirrored`), evenly but where ``odd[a][c]``: a vector's
      component along axis ``a``, which is 0 on that axis's walls.

    ``ends``: per active axis, whether ``f`` holds its low and high wall (a slab of the global
    grid holds an axis's walls only where it reaches its ends; default: every wall).
    """
    ends = ends or [(True, True)] * dim
    out = f.clone()
    for a in range(dim):
        axis = f.ndim - 3 + a
        for side, held in enumerate(ends[a]):
            for c, kind in enumerate(walls):
                if held and kind == "zero":
                    out[:, c].select(axis - 1, -side).zero_()  # a view: this writes out
    return mirrored(out, odd, dim, ends) if "no_flux" in walls else out


def inner_points(
    completed: torch.Tensor, shape: tuple[int, ...], ends: list[tuple[bool, bool]]
) -> torch.Tensor:
    """The view of ``completed``, fields completed by their walls (:func:`with_walls`,
    :meth:`~pdeladder.solvers.family.Family.with_walls`), at the points of the fields of ``shape``
    ``(B, C, T, X, Y, Z)`` it was completed from: an axis that grew has one ghost plane past
    each wall that ``ends`` (per active axis) holds of it."""
    for a, (low, _) in enumerate(ends):
        axis = len(shape) - 3 + a
        grown = completed.shape[axis] - shape[axis]
        completed = completed.narrow(axis, 1 if grown and low else 0, shape[axis])
    return completed


def mirrored(
    f: torch.Tensor, odd: list[list[bool]], dim: int, ends: list[tuple[bool, bool]]
) -> torch.Tensor:
    """``f`` ``(B, C, T, X, Y, Z)`` with one plane ``±f_1`` before each low wall and
    ``±f_{n-2}`` after each high wall it holds (``ends`` as :func:`with_walls`): ``odd[a][c]``
    flips channel ``c``'s sign along axis ``a``."""
    for a in range(dim):
        axis = f.ndim - 3 + a
        n = f.shape[axis]
        if n < 2:
            raise ValueError(f"a mirrored wall needs 2 points along axis {a}, got {n}")
        sign = torch.tensor([-1.0 if o else 1.0 for o in odd[a]], dtype=f.dtype, device=f.device)
        sign = sign.reshape(1, -1, *([1] * (f.ndim - 2)))
        parts = [f]
        if ends[a][0]:
            parts.insert(0, sign * f.narrow(axis, 1, 1))
        if ends[a][1]:
            parts.append(sign * f.narrow(axis, n - 2, 1))
        f = torch.cat(parts, dim=axis)
    return f
