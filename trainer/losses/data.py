"""Data losses: relative L2 and H1 norms on the space-time grid with trapezoidal quadrature.

Fields are ``(batch, channels, t, x, y, z)`` on the uniform grid of the unit box; singleton axes
carry weight 1. A ``mask`` ``(batch, channels)`` selects the channels that count (present and
predicted); the loss is the mean of the per-(sample, channel) relative errors over them.

A domain that is not its whole box (a family with the channel
:data:`~pdeladder.solvers.family.MASK`) is given as ``inside`` ``(batch, 1, 1, x, y, z)``, 1 at
its points and 0 outside (:meth:`~pdeladder.dataset.slots.SlotLayout.inside`): the norms then
sum over the points inside only, and the H1 gradients over the grid edges with both ends
inside, so values outside (any, NaN included) change nothing.

Split samples (DESIGN.md, "Domain parallelism"): given the ``slab`` of the global grid that the
fields hold (and with it the domain group, ``slab.domain``), the weights are the global grid's
on the slab, the sums of squares are all-reduced (:func:`sum_replicated`) before the ratio, and
the H1 differences across the slab's ``x`` edge take a one-plane halo: every rank gets the
unsharded value, and its backward the gradient of that value with respect to its own points.
"""

import math

import torch

from pdeladder.slabs import Slab
from pdeladder.trainer.distributed.collectives import sum_replicated
from pdeladder.trainer.distributed.halo import with_halo


def trapezoid_weights(
    shape: tuple[int, ...], device=None, slab: Slab | None = None
) -> torch.Tensor:
    """Trapezoidal quadrature weights of the unit box on the grid ``shape`` ``(T, X, Y, Z)``,
    normalised to sum 1 over the whole grid: ``shape``, or ``slab.local_shape`` for the box
    ``slab`` of that grid."""
    slab = slab or Slab.whole(shape)
    if slab.shape != tuple(shape):
        raise ValueError(f"slab of the grid {slab.shape} for weights on {tuple(shape)}")
    w = torch.ones(slab.local_shape, device=device)
    for a, n in enumerate(shape):
        if n > 1:
            edge = torch.ones(n, device=device)
            edge[0] = edge[-1] = 0.5
            part = edge[slab.lo[a] : slab.hi[a]]
            w = w * part.reshape([len(part) if b == a else 1 for b in range(len(shape))])
    # the weights' sum is this product of integers, exact (as ``w.sum()`` is on a whole grid)
    return w / w.new_tensor(math.prod(n - 1 if n > 1 else 1 for n in shape))


def _weighted_sq(f: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``Σ w f²`` over the last four axes: ``(B, C, T, X, Y, Z)`` → ``(B, C)``."""
    return (w * f.square()).sum(dim=(-4, -3, -2, -1))


def _grads(f: torch.Tensor, slab: Slab, edges: bool = False) -> list[tuple[torch.Tensor, Slab]]:
    """Forward differences (scaled by the grid spacing) along each non-singleton spatial axis
    of the global grid, each with its box of the global grid of differences.

    ``f`` ``(B, C, *slab.local_shape)``. Difference ``i`` along an axis is ``f[i + 1] - f[i]``;
    a rank owns those with ``i`` in ``[lo, min(hi, n - 1))``, for which a split ``x`` needs one
    plane of the next part (a halo, from ``slab.domain``), while the time axis is never
    differenced. ``edges``: the products ``f[i + 1] f[i]`` instead, unscaled (of an ``inside``
    mask: 1 on the edges with both ends inside).
    """
    out = []
    for a in (1, 2, 3):
        n = slab.shape[a]
        if n > 1:
            g = with_halo(f, slab.domain, "x", f.ndim - 3, 0, 1) if a == 1 else f
            shape, lo, hi = list(slab.shape), list(slab.lo), list(slab.hi)
            shape[a], lo[a], hi[a] = n - 1, min(lo[a], n - 1), min(hi[a], n - 1)
            box = Slab(tuple(shape), tuple(lo), tuple(hi))
            if edges:
                m = g.shape[a - 4] - 1
                out.append((g.narrow(a - 4, 0, m) * g.narrow(a - 4, 1, m), box))
            else:
                out.append((torch.diff(g, dim=a - 4) * (n - 1), box))
    return out


def relative_errors(
    pred: torch.Tensor,
    target: torch.Tensor,
    h1: bool = False,
    eps: float = 1e-12,
    *,
    inside: torch.Tensor | None = None,
    slab: Slab | None = None,
) -> torch.Tensor:
    """Relative L2 (or H1) error per sample and channel: ``(B, C, T, X, Y, Z)`` → ``(B, C)``.

    ``‖p - u‖ / ‖u‖`` with the trapezoidal norm; H1 adds the spatial gradients to both norms.
    ``inside`` ``(B, 1, 1, X, Y, Z)``: the domain's points (module docstring; None: the whole
    box). ``slab``: the box of the global grid the fields hold, split over the ranks of
    ``slab.domain`` (see the module docstring; default: the whole grid, on one rank).
    """
    slab = slab or Slab.whole(pred.shape[-4:])
    err, ref = pred - target, target
    if inside is not None:  # 0 outside, whatever is there
        err, ref = torch.where(inside != 0, err, 0.0), torch.where(inside != 0, ref, 0.0)
    w = trapezoid_weights(slab.shape, err.device, slab)
    num, den = _weighted_sq(err, w), _weighted_sq(ref, w)
    if h1:
        grads = zip(_grads(err, slab), _grads(ref, slab), strict=True)
        edges = None if inside is None else _grads(inside, slab, edges=True)
        for k, ((ge, box), (gr, _)) in enumerate(grads):
            if edges is not None:  # the edges with both ends inside
                ge, gr = ge * edges[k][0], gr * edges[k][0]
            wg = trapezoid_weights(box.shape, ge.device, box)
            num = num + _weighted_sq(ge, wg)
            den = den + _weighted_sq(gr, wg)
    num, den = sum_replicated(torch.stack([num, den]), slab.domain)
    return torch.sqrt(num / (den + eps))


def relative_loss(
    pred: torch.Tensor,
    target: torch.Tensor,
    mask: torch.Tensor,
    h1: bool = False,
    *,
    inside: torch.Tensor | None = None,
    slab: Slab | None = None,
) -> torch.Tensor:
    """Mean relative L2/H1 error over the ``mask``-ed ``(B, C)`` entries; a scalar (the same on
    every rank of ``slab.domain``, for fields on ``slab``; over the points ``inside``: see
    :func:`relative_errors`)."""
    per = relative_errors(pred, target, h1=h1, inside=inside, slab=slab)
    m = mask.to(per.dtype)
    return (per * m).sum() / m.sum().clamp_min(1.0)
