"""The Fourier transform seam of the spectral layer: which coefficients a layer keeps
(:class:`ModeSelection`) and the transform that computes only those (:class:`LocalFFT`).

Only the kept modes are computed: the transform runs one axis at a time and truncates after
each, so each later axis is transformed on a fraction of the data, and the inverse pads one axis
at a time. The real half axis (the last with points) goes first, as a product with the ``p``
columns of its DFT that are kept (``p`` of ``n/2 + 1``; cheaper than an ``rfft`` and no
zero-padding for the inverse); the full axes use complex FFTs. On a 2D trajectory with 8 of 80
points' modes kept per axis this is several times less work than a full ``rfftn`` → slice →
zero-fill → ``irfftn``.

The two pruned transforms are each other's adjoints up to a weight on the half axis, so each is
the other's backward pass (one custom autograd function each): no full-size zero-filled
gradients and no complex transform where a real one does.

Both take the :class:`~pdeladder.slabs.Slab` of the global grid that the
input holds. On an axis the slab splits, the forward transform is the partial sum over the slab's
own points (the rows of the DFT at their global offsets, kept frequencies only) and the inverse
evaluates the kept modes at those points only: the contributions of all slabs sum to the whole
grid's coefficients, which is all a distributed transform adds (one all-reduce, split around
the mixing: :class:`~pdeladder.trainer.distributed.fft.SlabFFT`).
"""

import functools
import math
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.checkpoint import noop_context_fn

from pdeladder.slabs import Slab


def kept_indices(n: int, modes: int, half: bool) -> tuple[list[int], list[int]]:
    """Which frequencies of an axis of ``n`` points are kept, and where their weights sit.

    A full (complex) axis keeps ``k = 0 .. p-1`` and ``k = -q .. -1`` (``p = min(modes, ⌈n/2⌉)``,
    ``q = min(modes - 1, ⌊(n-1)/2⌋) = p - 1``; the Nyquist frequency is dropped); its weights are
    laid out ``[0, 1, .., modes-1, -(modes-1), .., -1]`` (``2·modes - 1`` entries). The half
    (rfft) axis keeps ``k = 0 .. p-1`` with weights ``[0 .. modes-1]``.

    Returns:
        (indices into the FFT output, indices into the weight axis), equally long.
    """
    p = min(modes, (n + 1) // 2)
    fft_idx, w_idx = list(range(p)), list(range(p))
    if not half:
        q = min(modes - 1, (n - 1) // 2)
        fft_idx += list(range(n - q, n))
        w_idx += list(range(2 * modes - 1 - q, 2 * modes - 1))
    return fft_idx, w_idx


@dataclass(frozen=True)
class ModeSelection:
    """Which Fourier coefficients of a ``(T, X, Y, Z)`` grid a layer keeps.

    The real-to-complex (half) transform runs along ``half``, the last axis with more than one
    point (the ``z`` axis when none has), so 1D and 2D problems get the halving of the real FFT
    on an axis that has points. Every other axis is a full complex axis.

    Attributes:
        shape: the grid ``(T, X, Y, Z)``.
        half: index of the half axis.
        kept: per axis, ``(p, q)``: the frequencies ``0 .. p-1`` and ``-q .. -1`` are kept
            (``q = 0`` on the half axis, ``q = p - 1`` on the others), in that order in the
            kept block.
    """

    shape: tuple[int, int, int, int]
    half: int
    kept: tuple[tuple[int, int], ...]

    @classmethod
    def of(cls, shape: tuple[int, ...], modes: tuple[int, int, int, int]) -> "ModeSelection":
        active = [a for a, n in enumerate(shape) if n > 1]
        half = active[-1] if active else 3
        kept = []
        for a, (n, m) in enumerate(zip(shape, modes, strict=True)):
            fft_idx, _ = kept_indices(n, m, half=a == half)
            p = sum(1 for i in fft_idx if i < (n + 1) // 2)
            kept.append((p, len(fft_idx) - p))
        return cls(tuple(int(n) for n in shape), half, tuple(kept))

    @property
    def block_shape(self) -> tuple[int, ...]:
        """Shape of the kept block over ``(t, x, y, z)``."""
        return tuple(p + q for p, q in self.kept)

    @property
    def full_axes(self) -> list[int]:
        """Axes transformed with a complex FFT (more than one point, not the half axis)."""
        return [a for a, n in enumerate(self.shape) if n > 1 and a != self.half]


class SpectralTransform:
    """The Fourier transform a spectral layer uses; see :class:`LocalFFT`.

    Only kept coefficients cross this seam, so a distributed transform moves only those between
    ranks. ``sel`` comes from the global grid; ``slab`` says which part of it the input holds
    (the whole grid by default). The coefficients cross it flattened: ``(B, C, len(modes))``,
    the kept modes :meth:`modes` names, in the kept block's row-major order (all ``M`` of them
    here; a distributed transform hands each rank a share, which it alone mixes).
    """

    def modes(self, sel: ModeSelection) -> range:
        """The row-major indices into the kept block of the modes this process mixes; indices
        from ``M`` on are padding rows (zero coefficients, dropped by :meth:`inverse`)."""
        return range(math.prod(sel.block_shape))

    def checkpoint_contexts(self) -> tuple[Any, Any]:
        """The ``context_fn`` of :func:`torch.utils.checkpoint.checkpoint` for a stage that runs
        this transform: nothing here; a transform that communicates keeps its collectives'
        results for the stage's recomputation
        (:func:`~pdeladder.trainer.distributed.collectives.replayed`)."""
        return noop_context_fn()

    def forward(
        self, x: torch.Tensor, sel: ModeSelection, slab: Slab | None = None
    ) -> torch.Tensor:
        """``(B, C, *slab.local_shape)`` real → ``(B, C, len(self.modes(sel)))`` complex kept
        coefficients of the global grid (``norm="forward"``: the mean of ``x`` is coefficient 0)."""
        raise NotImplementedError

    def inverse(
        self, coeffs: torch.Tensor, sel: ModeSelection, slab: Slab | None = None
    ) -> torch.Tensor:
        """Kept coefficients ``(B, C, len(self.modes(sel)))`` → real ``(B, C, *slab.local_shape)``,
        every other coefficient taken as zero."""
        raise NotImplementedError


class LocalFFT(SpectralTransform):
    """This process's part of the transform, one axis at a time, pruned: the half axis first
    (its kept DFT columns), then each full axis on what is left, so each later transform runs on
    a fraction of the data; the inverse in reverse order. On the whole grid this is the whole
    transform; on a slab, the slab's contribution to it (all ``M`` kept modes)."""

    def forward(
        self, x: torch.Tensor, sel: ModeSelection, slab: Slab | None = None
    ) -> torch.Tensor:
        return _Forward.apply(x, sel, slab or Slab.whole(sel.shape)).flatten(2)

    def inverse(
        self, coeffs: torch.Tensor, sel: ModeSelection, slab: Slab | None = None
    ) -> torch.Tensor:
        block = coeffs.unflatten(2, sel.block_shape)
        return _Inverse.apply(block, sel, slab or Slab.whole(sel.shape))


def pruned_forward(x: torch.Tensor, sel: ModeSelection, norm: str, slab: Slab) -> torch.Tensor:
    """``(B, C, *slab.local_shape)`` real → the slab's part of the kept block
    ``(B, C, *sel.block_shape)`` complex (the whole block when the slab is the whole grid)."""
    h = sel.half
    n, p = sel.shape[h], sel.kept[h][0]
    # The half axis is the last with points: a product with the first p columns of the DFT
    # (their rows at the slab's points).
    dft = _half_rows(n, p, slab.ranges(h)).div(n if norm == "forward" else 1).to(x)  # (n', 2p)
    c = torch.view_as_complex((x.flatten(2 + h) @ dft).unflatten(-1, (p, 2)))
    c = c.unflatten(-1, (p, *slab.local_shape[h + 1 :]))  # (B, C, .., p, 1, ..)
    for a in reversed(sel.full_axes):
        (p, q), n, d = sel.kept[a], sel.shape[a], 2 + a
        if slab.is_split(a):  # the kept frequencies' DFT rows at the slab's points
            dft = _partial_dft(n, p, q, slab.ranges(a)).div(n if norm == "forward" else 1)
            c = _along(c, d, dft.to(c.dtype))  # (.., p + q, ..)
        else:
            c = torch.fft.fft(c, dim=d, norm=norm)
            c = torch.cat([c.narrow(d, 0, p), c.narrow(d, n - q, q)], dim=d)  # (.., p + q, ..)
    return c


def pruned_inverse(block: torch.Tensor, sel: ModeSelection, norm: str, slab: Slab) -> torch.Tensor:
    """Kept block ``(B, C, *sel.block_shape)`` → ``(B, C, *slab.local_shape)`` real, the other
    coefficients zero (``irfftn`` of the zero-filled spectrum, at the slab's points)."""
    c = block
    for a in sel.full_axes:
        (p, q), n, d = sel.kept[a], sel.shape[a], 2 + a
        if slab.is_split(a):  # the kept modes evaluated at the slab's points
            idft = _partial_dft(n, p, q, slab.ranges(a)).conj().T  # (p + q, local points)
            idft = idft.div(n if norm == "backward" else 1)
            c = _along(c, d, idft.to(c.dtype))
            continue
        shape = list(c.shape)
        shape[d] = n
        full = c.new_zeros(shape)  # frequencies 0 .. p-1 first, -q .. -1 last
        full.narrow(d, 0, p).copy_(c.narrow(d, 0, p))
        full.narrow(d, n - q, q).copy_(c.narrow(d, p, q))
        c = torch.fft.ifft(full, dim=d, norm=norm)
    h = sel.half
    n, p = sel.shape[h], sel.kept[h][0]
    # irfft of coefficients 0 .. p-1: each k > 0 stands for k and -k; Im c(0) does not count.
    twice = torch.full((2 * p,), 2.0, dtype=torch.float64)
    twice[:2] = 1.0
    idft = (_half_rows(n, p, slab.ranges(h)) * twice).T.div(n if norm == "backward" else 1)
    rows = torch.view_as_real(c.flatten(2 + h).contiguous()).flatten(-2)  # (.., 2p): (re, im)
    out = rows @ idft.to(rows)
    return out.unflatten(-1, slab.local_shape[h:])


def _along(c: torch.Tensor, dim: int, matrix: torch.Tensor) -> torch.Tensor:
    """``c`` with its axis ``dim`` (``n``) multiplied by ``matrix`` ``(n, n')``: one matrix
    product over all the other axes' points, not a batch of one-row products."""
    return torch.tensordot(c, matrix, dims=([dim], [0])).movedim(-1, dim)


def _points(ranges: tuple[tuple[int, int], ...]) -> torch.Tensor:
    """The global offsets of ``ranges`` (``[lo, hi)`` each), in order."""
    return torch.cat([torch.arange(lo, hi) for lo, hi in ranges])


@functools.lru_cache(maxsize=64)
def _partial_dft(n: int, p: int, q: int, ranges: tuple[tuple[int, int], ...]) -> torch.Tensor:
    """``(points, p + q)`` complex128: ``x @ E`` are the unnormalised DFT coefficients
    ``0 .. p-1, -q .. -1`` of an ``n``-point signal that is zero outside the points of
    ``ranges`` (:meth:`Slab.ranges`), ``x`` holding those. Cached and shared: never modified
    in place."""
    freq = torch.cat([torch.arange(p), torch.arange(-q, 0)]).double()
    angle = -2 * torch.pi / n * torch.outer(_points(ranges).double(), freq)
    return torch.polar(torch.ones_like(angle), angle)


@functools.lru_cache(maxsize=64)
def _half_dft(n: int, p: int) -> torch.Tensor:
    """``(n, 2p)`` float64: ``x @ D`` are the coefficients ``0 .. p-1`` of the unnormalised DFT
    of ``x`` (``n`` points) as ``(re, im)`` pairs. Cached and shared: never modified in place."""
    angle = 2 * torch.pi / n * torch.outer(torch.arange(n), torch.arange(p)).double()
    return torch.stack([angle.cos(), -angle.sin()], dim=-1).flatten(1)


@functools.lru_cache(maxsize=64)
def _half_rows(n: int, p: int, ranges: tuple[tuple[int, int], ...]) -> torch.Tensor:
    """The rows of :func:`_half_dft` at the points of ``ranges``. Cached and shared."""
    return _half_dft(n, p)[_points(ranges)]


def _half_weighted(c: torch.Tensor, sel: ModeSelection, factor: float) -> torch.Tensor:
    """``c`` with the half axis's frequencies ``k > 0`` multiplied by ``factor`` (those stand for
    ``k`` and ``-k`` in ``irfft``)."""
    h, p = 2 + sel.half, sel.kept[sel.half][0]
    c = c.clone()
    c.narrow(h, 1, p - 1).mul_(factor)
    return c


class _Forward(torch.autograd.Function):
    """:func:`pruned_forward` (``norm="forward"``). Its adjoint is the unnormalised-forward
    inverse, ``norm="backward"``, of the gradient with the half axis's ``k > 0`` halved."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, sel: ModeSelection, slab: Slab) -> torch.Tensor:
        ctx.sel, ctx.slab = sel, slab
        return pruned_forward(x, sel, "forward", slab)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        grad = _half_weighted(grad, ctx.sel, 0.5)
        return pruned_inverse(grad, ctx.sel, "backward", ctx.slab), None, None


class _Inverse(torch.autograd.Function):
    """:func:`pruned_inverse` (``norm="forward"``). Its adjoint is the unnormalised pruned forward
    transform of the gradient with the half axis's ``k > 0`` doubled."""

    @staticmethod
    def forward(ctx, block: torch.Tensor, sel: ModeSelection, slab: Slab) -> torch.Tensor:
        ctx.sel, ctx.slab = sel, slab
        return pruned_inverse(block, sel, "forward", slab)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        grad = pruned_forward(grad, ctx.sel, "backward", ctx.slab)
        return _half_weighted(grad, ctx.sel, 2.0), None, None
