"""Halo exchange with autograd: a rank's slab extended by planes of its neighbours' slabs, for
finite-difference stencils (the H1 loss, the equation residuals) that reach across slab edges.

:func:`with_halo` along one split axis appends ``before`` planes of the previous part's slab and
``after`` planes of the next part's slab (none past the sample's ends): the extension operator
``E: x ↦ [x_prev[-before:], x, x_next[:after]]``. Its adjoint ``Eᵀ`` is the backward: the halo
planes' gradients go back to their owners, which add them to their own boundary planes. Each is
one batch of point-to-point sends and receives between neighbours (:class:`_Halo`). The caller
names the tensor dimension of the split axis: in the model's ``(B, C, T, X, Y, Z)``, which the
losses and residuals use, ``t`` is dimension 2 and ``x`` dimension 3.

Along both split axes (t×x tilings) extend along ``t`` first, then along ``x``: the ``x``
neighbours then send their time-extended planes, so the corner points arrive too (see
:func:`extended`).
"""

import torch
import torch.distributed as dist

from pdeladder.slabs import SPLIT_AXES
from pdeladder.trainer.distributed.collectives import DomainGroup


def _exchange(
    domain: DomainGroup,
    axis: str,
    to_prev: torch.Tensor | None,
    to_next: torch.Tensor | None,
    from_prev: torch.Tensor | None,
    from_next: torch.Tensor | None,
) -> None:
    """Send ``to_prev``/``to_next`` to the previous/next part along ``axis`` and receive
    ``from_prev``/``from_next`` from them in place (``None``: nothing that way)."""
    prev, nxt = domain.neighbour(axis, -1), domain.neighbour(axis, 1)
    ops = []
    for peer, send, recv in ((prev, to_prev, from_prev), (nxt, to_next, from_next)):
        if peer is None:
            continue
        if send is not None:
            domain.sent["halo"] += send.numel() * send.element_size()
            ops.append(dist.P2POp(dist.isend, send, peer, group=domain.group))
        if recv is not None:
            ops.append(dist.P2POp(dist.irecv, recv, peer, group=domain.group))
    if ops:
        for work in dist.batch_isend_irecv(ops):
            work.wait()


def _planes(x: torch.Tensor, dim: int, start: int, count: int) -> torch.Tensor | None:
    return x.narrow(dim, start, count).contiguous() if count else None


def _empty(x: torch.Tensor, dim: int, count: int) -> torch.Tensor | None:
    if not count:
        return None
    shape = list(x.shape)
    shape[dim] = count
    return x.new_empty(shape)


class _Halo(torch.autograd.Function):
    """Forward: ``E`` (receive the neighbours' edge planes, concatenate); backward: ``Eᵀ``
    (send the halo planes' gradients back, add the received ones to the own edge planes)."""

    @staticmethod
    def forward(ctx, x, domain, axis, dim, before, after):
        has_prev = domain.neighbour(axis, -1) is not None
        has_next = domain.neighbour(axis, 1) is not None
        n = x.shape[dim]
        # planes received from the previous/next part, and own planes sent to them
        got = (before if has_prev else 0, after if has_next else 0)
        gave = (after if has_prev else 0, before if has_next else 0)
        lo, hi = _empty(x, dim, got[0]), _empty(x, dim, got[1])
        _exchange(
            domain,
            axis,
            to_prev=_planes(x, dim, 0, gave[0]),
            to_next=_planes(x, dim, n - gave[1], gave[1]),
            from_prev=lo,
            from_next=hi,
        )
        ctx.domain, ctx.axis, ctx.dim, ctx.n, ctx.got, ctx.gave = domain, axis, dim, n, got, gave
        return torch.cat([p for p in (lo, x, hi) if p is not None], dim)

    @staticmethod
    def backward(ctx, grad):
        dim, n, got, gave = ctx.dim, ctx.n, ctx.got, ctx.gave
        back_prev, back_next = _empty(grad, dim, gave[0]), _empty(grad, dim, gave[1])
        _exchange(
            ctx.domain,
            ctx.axis,
            to_prev=_planes(grad, dim, 0, got[0]),
            to_next=_planes(grad, dim, got[0] + n, got[1]),
            from_prev=back_prev,
            from_next=back_next,
        )
        out = grad.narrow(dim, got[0], n).clone()
        if back_prev is not None:
            out.narrow(dim, 0, gave[0]).add_(back_prev)
        if back_next is not None:
            out.narrow(dim, n - gave[1], gave[1]).add_(back_next)
        return out, None, None, None, None, None


def with_halo(
    x: torch.Tensor,
    domain: DomainGroup | None,
    axis: str,
    dim: int,
    before: int,
    after: int,
) -> torch.Tensor:
    """``x`` extended along tensor dimension ``dim`` (the split axis ``axis``, "t" or "x") by
    the last ``before`` planes of the previous part's slab and the first ``after`` planes of the
    next part's, where those parts exist: ``x.shape[dim]`` grows by up to ``before + after``.

    Every rank of the group must call it with the same widths, and every part along ``axis``
    must hold at least ``max(before, after)`` planes (halos come from the nearest neighbour
    only). ``x`` itself without a domain group or when ``axis`` is not split.
    """
    if domain is None or (domain.tiling.t, domain.tiling.x)[SPLIT_AXES[axis]] == 1:
        return x
    if x.shape[dim] < max(before, after):
        raise ValueError(
            f"halo of ({before}, {after}) planes along {axis} from a slab of {x.shape[dim]}"
        )
    return _Halo.apply(x, domain, axis, dim % x.ndim, before, after)


def extended(
    x: torch.Tensor,
    domain: DomainGroup | None,
    halos: dict[str, tuple[int, int, int]],
) -> torch.Tensor:
    """``x`` with a halo along each split axis named in ``halos`` (``axis: (dim, before,
    after)``, as :func:`with_halo` takes them), ``t`` before ``x`` so that corners arrive too."""
    for axis in ("t", "x"):
        if axis in halos:
            x = with_halo(x, domain, axis, *halos[axis])
    return x
