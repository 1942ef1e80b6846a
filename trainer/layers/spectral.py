"""Spectral convolution over ``(t, x, y, z)``: FFT → keep low modes → contract → inverse FFT.

Tensors are ``(batch, channels, t, x, y, z)``; any axis may be a singleton (1D and 2D problems,
steady problems with ``t = 1``). The layer keeps, per axis, the frequencies ``|k| < modes`` that
the grid resolves, so the same weights act on any resolution (resolution invariance): a coarse
grid uses a subset of the weights, a fine grid leaves its higher frequencies to the pointwise
path of the block.

The Fourier transform is delegated to a :class:`~pdeladder.trainer.layers.fft.SpectralTransform`
(pruned to the kept modes, see :mod:`pdeladder.trainer.layers.fft`). :class:`LocalFFT`
transforms what this process holds; on a sample split across ranks the layer receives its
:class:`~pdeladder.slabs.Slab`, the kept modes come from the global grid,
and :class:`~pdeladder.trainer.distributed.fft.SlabFFT` sums the slabs' partial transforms, every
rank mixing the whole kept block or its share of the modes (:meth:`SpectralTransform.modes`), so
the layer and the model stay as they are (docs/trainer.md, "Domain parallelism").

The contraction is one real batched matrix product over the kept modes: the real and the
imaginary parts of the coefficients, as rows, times the weights' ``(re, im)`` columns, combined
as ``(a + ib)(c + id) = (ac - bd) + i(ad + bc)``.
"""

import functools
import math

import torch
from torch import nn

from pdeladder.slabs import Slab, input_slab
from pdeladder.trainer.layers.fft import LocalFFT, ModeSelection, SpectralTransform, kept_indices


class SpectralConv(nn.Module):
    """A Fourier layer: ``y = F⁻¹(W · F(x))`` on the kept modes of ``(t, x, y, z)``.

    Args:
        in_channels, out_channels: channel counts.
        modes: kept modes per axis ``(t, x, y, z)``; the weights' **half axis**, the last
            spatial axis with ``modes > 1`` (``y`` for a 2D model ``(mt, mx, my, 1)``, ``z``
            for a 3D one), keeps ``modes`` non-negative frequencies, the axes before it
            ``2·modes - 1`` signed ones.

    The complex weights are stored mode-major as a real tensor ``(S, in, out, 2)``, ``S`` the
    stored modes (``stored_shape(modes)``, row-major), real and imaginary parts last: each
    mode's ``(in, out)`` matrix is one contiguous row, so the kept modes are gathered as whole
    rows, and FSDP shards the parameter by rows of modes (DCP saves it like any real
    parameter). The layer computes ``Re F⁻¹(W · F(x))`` with the half transform on the
    grid's last axis with points. When that is the weights' half axis, the stored layout is the
    kept one; when it comes earlier (a 1D sample in a 2D model), the weights' half axis has one
    point, its frequency 0 is kept, and the kept weight is the Hermitian part
    ``(W(k) + conj W(-k)) / 2`` at the grid's half axis's non-negative frequencies. A grid with
    points past the weights' half axis (a 3D sample in a 2D model) is refused.
    """

    def __init__(self, in_channels: int, out_channels: int, modes: tuple[int, int, int, int]):
        super().__init__()
        if len(modes) != 4 or min(modes) < 1:
            raise ValueError(f"modes must be four positive integers (t, x, y, z), got {modes}")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.modes = tuple(int(m) for m in modes)
        scale = 1.0 / (in_channels * out_channels)
        self.weight = nn.Parameter(
            scale * torch.randn(math.prod(stored_shape(self.modes)), in_channels, out_channels, 2)
        )
        self.transform: SpectralTransform = LocalFFT()

    def extra_repr(self) -> str:
        return f"{self.in_channels}, {self.out_channels}, modes={self.modes}"

    def forward(
        self, x: torch.Tensor, bias: torch.Tensor | None = None, slab: Slab | None = None
    ) -> torch.Tensor:
        """``(B, in, T, X, Y, Z)`` → ``(B, out, T, X, Y, Z)``; ``bias`` ``(out,)``, if given, is
        added to every point (as the zero-frequency coefficient: no pass over the output).
        ``slab``: the part of the global grid that ``x`` holds (default: all of it)."""
        slab = input_slab(x, self.in_channels, "SpectralConv", slab)
        sel = ModeSelection.of(slab.shape, self.modes)  # from the global grid
        modes = self.transform.modes(sel)  # the kept modes this process mixes (all M here)
        # FFTs run in float32 even under mixed precision (half precision needs power-of-two sizes).
        with torch.autocast(device_type=x.device.type, enabled=False):
            coeffs = self.transform.forward(x.float(), sel, slab)  # (B, in, len(modes)) complex
            mixed = self.mix(coeffs, sel, bias, modes)  # (B, out, len(modes)) complex
            return self.transform.inverse(mixed, sel, slab).to(x.dtype)  # (B, out, *local)

    def mix(
        self, coeffs: torch.Tensor, sel: ModeSelection, bias=None, modes: range | None = None
    ) -> torch.Tensor:
        """``W · coeffs`` per kept mode: ``(B, in, len(modes))`` → ``(B, out, len(modes))``
        complex, as one real batched product over the modes; ``modes`` (default: all ``M``)
        are row-major indices into the kept block; ``bias`` ``(out,)`` is added to mode 0 (the
        zero frequency) where ``modes`` holds it."""
        modes = range(math.prod(sel.block_shape)) if modes is None else modes
        b = coeffs.shape[0]
        # (m, 2B, in): the real parts of the B samples' coefficients, then their imaginary parts
        rows = torch.view_as_real(coeffs).permute(2, 3, 0, 1).reshape(-1, 2 * b, self.in_channels)
        prod = torch.bmm(rows, self.kept_weight(sel, modes).flatten(2))  # (m, 2B, 2·out)
        re_w, im_w = prod.unflatten(2, (self.out_channels, 2)).unbind(-1)  # (m, 2B, out) each
        real = re_w[:, :b] - im_w[:, b:]  # (a + ib)(c + id) = (ac - bd) + i(ad + bc)
        imag = im_w[:, :b] + re_w[:, b:]
        if bias is not None:  # 0 · bias where mode 0 is not: a zero gradient, not none
            real[0] += bias.float() * float(0 in modes)
        mixed = torch.view_as_complex(torch.stack([real, imag], dim=-1))  # (m, B, out)
        return mixed.permute(1, 2, 0)

    def kept_weight(self, sel: ModeSelection, modes: range | None = None) -> torch.Tensor:
        """The complex weights of ``sel``'s kept ``modes`` (row-major indices into the kept
        block, those from ``M`` on padding; default all) as real ``(len(modes), in, out, 2)``:
        the stored ``W(k)``, or, when the grid's half axis comes before the weights', the
        Hermitian part ``(W(k) + conj W(-k)) / 2`` at its non-negative frequencies."""
        modes = range(math.prod(sel.block_shape)) if modes is None else modes
        index, negated = _kept_rows(sel, self.modes, modes)
        weight = self.weight.float()  # (modes stored, in, out, 2)
        device = weight.device
        return _KeptWeight.apply(
            weight, index.to(device), None if negated is None else negated.to(device)
        )

    @torch.no_grad()
    def grow_modes(self, modes: tuple[int, int, int, int]) -> None:
        """Keep more modes per axis; the new weights are zero, so the layer's output is unchanged.

        Call before the optimizer is built (the parameter is replaced).
        """
        new_modes = tuple(int(m) for m in modes)
        if any(n < o for n, o in zip(new_modes, self.modes, strict=True)):
            raise ValueError(f"modes can only grow: {self.modes} -> {new_modes}")
        half = half_axis(self.modes)
        if half_axis(new_modes) != half:
            raise ValueError(f"modes {self.modes} -> {new_modes} move the weights' half axis")
        old = self.weight.data.unflatten(0, stored_shape(self.modes))  # (t, x, y, z, in, out, 2)
        new = old.new_zeros(*stored_shape(new_modes), *old.shape[4:])
        # Place each old weight at the same signed frequency in the larger layout.
        index = []
        for a, (m_old, m_new) in enumerate(zip(self.modes, new_modes, strict=True)):
            if a >= half:
                index.append(list(range(m_old if a == half else 1)))
            else:
                index.append(list(range(m_old)) + list(range(2 * m_new - m_old, 2 * m_new - 1)))
        new[_block_index(index, old.device)] = old
        self.modes = new_modes
        self.weight = nn.Parameter(new.flatten(0, 3))


@functools.lru_cache(maxsize=256)
def _kept_rows(
    sel: ModeSelection, stored: tuple[int, int, int, int], modes: range
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Flat indices into the stored modes of weights with ``stored`` modes per axis: of each of
    ``modes`` (row-major in ``sel``'s kept block; padding rows from ``M`` on repeat mode
    ``M - 1``), and of its negation ``-k`` when the grid's half axis comes before the weights'
    (``None`` when it is theirs: the stored layout is the kept one). Cached: one computation per
    layer shape and share. Raises ValueError for a grid with points past the weights' half
    axis."""
    half = half_axis(stored)
    if sel.half > half and sel.shape[half] > 1:
        raise ValueError(
            f"a grid {sel.shape} has points past the last axis of weights with modes {stored}"
        )
    index, negated = [], []
    for a, (n, m) in enumerate(zip(sel.shape, stored, strict=True)):
        _, w_idx = kept_indices(n, m, half=a >= half or a == sel.half)
        index.append(w_idx)
        # weight index of -k on a signed axis (the half axis stores k >= 0; only 0 is -0)
        negated.append([(2 * m - 1 - w) % (2 * m - 1) for w in w_idx] if a < half else w_idx)
    shape = stored_shape(stored)
    share = torch.arange(modes.start, modes.stop).clamp_max(math.prod(sel.block_shape) - 1)
    rows = _flat_index(index, shape, "cpu")[share]
    return rows, None if sel.half >= half else _flat_index(negated, shape, "cpu")[share]


class _KeptWeight(torch.autograd.Function):
    """``(S, in, out, 2)`` stored weights → ``(m, in, out, 2)`` kept ones: ``W(k)`` at the rows
    ``index``, or with ``negated`` the Hermitian part ``(W(k) + conj W(-k)) / 2``. A gather of
    whole contiguous ``(in, out)`` rows of the complex weights, and its adjoint, a scatter-add
    of those rows into one zero gradient. The indices are :func:`_kept_rows`'s cached tensors:
    held by reference, not saved for the backward pass (no activation memory)."""

    @staticmethod
    def forward(ctx, weight, index, negated):
        ctx.index, ctx.negated, ctx.stored = index, negated, weight.shape
        rows = torch.view_as_complex(weight).flatten(1, 2)  # (S, in·out), a view
        kept = rows[index]
        if negated is not None:
            kept = kept.add_(rows[negated].conj()).mul_(0.5)
        return torch.view_as_real(kept).unflatten(1, weight.shape[1:3])  # (m, in, out, 2)

    @staticmethod
    def backward(ctx, grad):
        index, negated = ctx.index, ctx.negated
        s, i, o, _ = ctx.stored
        rows = torch.view_as_complex(grad.flatten(1, 2).contiguous())  # (m, in·out)
        out = rows.new_zeros(s, i * o)
        if negated is None:
            out.index_add_(0, index, rows)
        else:
            out.index_add_(0, index, rows, alpha=0.5).index_add_(0, negated, rows.conj(), alpha=0.5)
        return torch.view_as_real(out).unflatten(1, (i, o)), None, None


def _flat_index(index: list[list[int]], shape: tuple[int, ...], device) -> torch.Tensor:
    """Row-major flat indices into ``shape`` of the block ``index[0] × .. × index[3]``."""
    flat = torch.zeros((), dtype=torch.long)
    for ix, n in zip(index, shape, strict=True):
        flat = (flat[..., None] * n + torch.tensor(ix)).flatten()
    return flat.to(device)


def _block_index(index: list[list[int]], device: torch.device) -> tuple[torch.Tensor, ...]:
    """Four broadcasting index tensors selecting the block ``index[0] × .. × index[3]`` of the
    leading four axes."""
    return tuple(
        torch.tensor(ix, device=device).reshape([-1 if b == a else 1 for b in range(4)])
        for a, ix in enumerate(index)
    )


def half_axis(modes: tuple[int, ...]) -> int:
    """The weights' half axis: the last spatial axis with ``modes > 1`` (``z`` when none has)."""
    return max((a for a in (1, 2, 3) if modes[a] > 1), default=3)


def stored_shape(modes: tuple[int, ...]) -> tuple[int, ...]:
    """The stored modes' shape over ``(t, x, y, z)``: ``2m - 1`` signed frequencies before the
    half axis, ``m`` non-negative ones on it, one after it (``modes`` 1 there)."""
    half = half_axis(modes)
    return tuple(2 * m - 1 if a < half else m for a, m in enumerate(modes))


def from_in_out_layout(weight: torch.Tensor, modes: tuple[int, ...]) -> torch.Tensor:
    """Weights stored before the mode-major layout, ``(in, out, 2mt-1, 2mx-1, 2my-1, mz, 2)``
    with every axis but ``z`` signed, as this layer's ``(S, in, out, 2)`` computing the same
    function: on a half axis before ``z``, the Hermitian part
    ``(W(k) + conj W(-k)) / 2`` at its non-negative frequencies (what the old layer mixed)."""
    w = torch.view_as_complex(weight.float().movedim((0, 1), (4, 5)).contiguous())
    half = half_axis(modes)
    if half < 3:
        negated = w
        for a in range(half + 1):  # -k on the signed axes up to the half axis
            negated = negated.flip(a).roll(1, a)
        w = ((w + negated.conj()) / 2).narrow(half, 0, modes[half])
    return torch.view_as_real(w.flatten(0, 3).contiguous()).to(weight.dtype)


def modes_for(modes: int, dims: int = 3, time: bool = True) -> tuple[int, int, int, int]:
    """``(mt, mx, my, mz)`` keeping ``modes`` per active axis, 1 on inactive ones."""
    return (modes if time else 1, *(modes if a < dims else 1 for a in range(3)))
