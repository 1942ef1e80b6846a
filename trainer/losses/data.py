"""Data losses: relative L2 and H1 norms on the space-time grid with trapezoidal quadrature.

Fields are ``(batch, channels, t, x, y, z)`` on the uniform grid of the unit box; singleton axes
carry weight 1. A ``mask`` ``(batch, channels)`` selects the channels that count (present and
predicted); the loss is the mean of the per-(sample, channel) relative errors over them.
"""

import torch


def trapezoid_weights(shape: tuple[int, ...], device=None) -> torch.Tensor:
    """Trapezoidal quadrature weights ``(T, X, Y, Z)`` of the unit box, normalised to sum 1."""
    w = torch.ones(shape, device=device)
    for a, n in enumerate(shape):
        if n > 1:
            edge = torch.ones(n, device=device)
            edge[0] = edge[-1] = 0.5
            w = w * edge.reshape([n if b == a else 1 for b in range(len(shape))])
    return w / w.sum()


def _weighted_sq(f: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``Σ w f²`` over the last four axes: ``(B, C, T, X, Y, Z)`` → ``(B, C)``."""
    return (w * f.square()).sum(dim=(-4, -3, -2, -1))


def _grads(f: torch.Tensor) -> list[torch.Tensor]:
    """Forward differences (scaled by the grid spacing) along each non-singleton spatial axis."""
    out = []
    for axis in (-3, -2, -1):
        n = f.shape[axis]
        if n > 1:
            out.append(torch.diff(f, dim=axis) * (n - 1))
    return out


def relative_errors(
    pred: torch.Tensor, target: torch.Tensor, h1: bool = False, eps: float = 1e-12
) -> torch.Tensor:
    """Relative L2 (or H1) error per sample and channel: ``(B, C, T, X, Y, Z)`` → ``(B, C)``.

    ``‖p - u‖ / ‖u‖`` with the trapezoidal norm; H1 adds the spatial gradients to both norms.
    """
    err, ref = pred - target, target
    num = _weighted_sq(err, trapezoid_weights(err.shape[-4:], err.device))
    den = _weighted_sq(ref, trapezoid_weights(ref.shape[-4:], ref.device))
    if h1:
        for ge, gr in zip(_grads(err), _grads(ref), strict=True):
            num = num + _weighted_sq(ge, trapezoid_weights(ge.shape[-4:], ge.device))
            den = den + _weighted_sq(gr, trapezoid_weights(gr.shape[-4:], gr.device))
    return torch.sqrt(num / (den + eps))


def relative_loss(
    pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor, h1: bool = False
) -> torch.Tensor:
    """Mean relative L2/H1 error over the ``mask``-ed ``(B, C)`` entries; a scalar."""
    per = relative_errors(pred, target, h1=h1)
    m = mask.to(per.dtype)
    return (per * m).sum() / m.sum().clamp_min(1.0)
