"""Spectral convolution over ``(t, x, y, z)``: FFT → keep low modes → contract → inverse FFT.

Tensors are ``(batch, channels, t, x, y, z)``; any axis may be a singleton (1D and 2D problems,
steady problems with ``t = 1``). The layer keeps, per axis, the frequencies ``|k| < modes`` that
the grid resolves, so the same weights act on any resolution (resolution invariance): a coarse
grid uses a subset of the weights, a fine grid leaves its higher frequencies to the pointwise
path of the block.

The Fourier transform is delegated to a :class:`~pdeladder.trainer.layers.fft.SpectralTransform`
(pruned to the kept modes, see :mod:`pdeladder.trainer.layers.fft`). :class:`LocalFFT`
transforms the whole sample on one process; a slab-decomposed transform (each rank holding
``x``-slabs, all-to-all transposes between the axis transforms) implements the same two
methods, so the layer and the model stay as they are (docs/trainer.md, "Distributed FFT seam").

The contraction is one real batched matrix product over the kept modes: complex numbers stored
as interleaved ``(re, im)`` pairs, a coefficient row ``[a, b]`` times the real ``2 × 2`` block
``[[wr, wi], [-wi, wr]]`` per channel pair is ``(a + ib)(wr + i wi)``.
"""

import torch
from torch import nn

from pdeladder.trainer.layers.fft import (
    LocalFFT,
    ModeSelection,
    SpectralTransform,
)


class SpectralConv(nn.Module):
    """A Fourier layer: ``y = F⁻¹(W · F(x))`` on the kept modes of ``(t, x, y, z)``.

    Args:
        in_channels, out_channels: channel counts.
        modes: kept modes per axis ``(t, x, y, z)``; the ``z`` axis keeps ``modes[3]``
            non-negative frequencies, the others ``2·modes - 1`` signed ones.

    The complex weights are stored as a real tensor ``(in, out, 2mt-1, 2mx-1, 2my-1, mz, 2)``
    (real and imaginary parts last), which FSDP shards and DCP saves like any real parameter.
    The layer computes ``Re F⁻¹(W · F(x))`` over the signed frequencies of ``(t, x, y)``; when
    the grid's last axis with points is not ``z`` (1D and 2D problems), the same function is
    computed with the half transform on that axis and the Hermitian part of ``W``,
    ``(W(k) + conj W(-k)) / 2``, at its non-negative frequencies: half the coefficients.
    """

    def __init__(self, in_channels: int, out_channels: int, modes: tuple[int, int, int, int]):
        super().__init__()
        if len(modes) != 4 or min(modes) < 1:
            raise ValueError(f"modes must be four positive integers (t, x, y, z), got {modes}")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.modes = tuple(int(m) for m in modes)
        scale = 1.0 / (in_channels * out_channels)
        self.weight = nn.Parameter(
            scale * torch.randn(in_channels, out_channels, *_weight_shape(self.modes), 2)
        )
        self.transform: SpectralTransform = LocalFFT()

    def extra_repr(self) -> str:
        return f"{self.in_channels}, {self.out_channels}, modes={self.modes}"

    def forward(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        """``(B, in, T, X, Y, Z)`` → ``(B, out, T, X, Y, Z)``; ``bias`` ``(out,)``, if given, is
        added to every point (as the zero-frequency coefficient: no pass over the output)."""
        if x.ndim != 6 or x.shape[1] != self.in_channels:
            raise ValueError(
                f"SpectralConv: input must be (batch, {self.in_channels}, t, x, y, z), "
                f"got {tuple(x.shape)}"
            )
        sel = ModeSelection.of(tuple(x.shape[-4:]), self.modes)
        # FFTs run in float32 even under mixed precision (half precision needs power-of-two sizes).
        with torch.autocast(device_type=x.device.type, enabled=False):
            block = self.transform.forward(x.float(), sel)  # (B, in, kt, kx, ky, kz) complex
            rows = torch.view_as_real(block.flatten(2).permute(2, 0, 1).contiguous())
            mixed = torch.bmm(rows.flatten(2), self.mixing_matrix(sel))  # (M, B, 2·out)
            if bias is not None:  # mode 0 is the zero frequency; its real parts sit at 0::2
                mixed[0, :, 0::2] += bias.float()
            mixed = torch.view_as_complex(mixed.unflatten(2, (self.out_channels, 2)))
            mixed = mixed.permute(1, 2, 0).unflatten(2, sel.block_shape)  # (B, out, kt, kx, ky, kz)
            return self.transform.inverse(mixed, sel).to(x.dtype)  # (B, out, T, X, Y, Z)

    def mixing_matrix(self, sel: ModeSelection) -> torch.Tensor:
        """The real ``(M, 2·in, 2·out)`` matrices of :meth:`kept_weight` per kept mode (``M`` of
        them, in the block's row-major order), acting on interleaved ``(re, im)`` channels."""
        w = self.kept_weight(sel).flatten(2, 5).permute(2, 0, 1, 3)  # (M, in, out, 2)
        turned = torch.stack([-w[..., 1], w[..., 0]], dim=-1)  # i·w: the imaginary input's row
        return torch.stack([w, turned], dim=2).flatten(3).flatten(1, 2)

    def kept_weight(self, sel: ModeSelection) -> torch.Tensor:
        """The weights of ``sel``'s kept block, real ``(in, out, *sel.block_shape, 2)``: the
        stored weights at the kept signed frequencies, or, when the half axis is not ``z``, their
        Hermitian part ``(W(k) + conj W(-k)) / 2`` at its non-negative ones."""
        w = self.weight.float()  # (in, out, 2mt-1, 2mx-1, 2my-1, mz, 2)
        for a in range(3):  # signed axes: frequencies 0 .. p-1, then -(p-1) .. -1
            w = _signed(w, 2 + a, sel.kept[a][0], self.modes[a])
        w = w.narrow(5, 0, sel.kept[3][0])
        if sel.half == 3:
            return w
        h, p = 2 + sel.half, sel.kept[sel.half][0]
        # W(-k): on each signed axis the entries [0, -1, .., 1] of [0 .. p-1, -(p-1) .. -1]
        neg = torch.cat([w.narrow(h, 0, 1), w.narrow(h, p, p - 1).flip(h)], dim=h)
        for d in range(2, 5):
            if d != h and neg.shape[d] > 1:
                neg = torch.cat(
                    [neg.narrow(d, 0, 1), neg.narrow(d, 1, neg.shape[d] - 1).flip(d)], d
                )
        conj = torch.tensor([0.5, -0.5], device=w.device)
        return w.narrow(h, 0, p) * 0.5 + neg * conj

    @torch.no_grad()
    def grow_modes(self, modes: tuple[int, int, int, int]) -> None:
        """Keep more modes per axis; the new weights are zero, so the layer's output is unchanged.

        Call before the optimizer is built (the parameter is replaced).
        """
        if any(n < o for n, o in zip(modes, self.modes, strict=True)):
            raise ValueError(f"modes can only grow: {self.modes} -> {tuple(modes)}")
        old = self.weight.data
        new_modes = tuple(int(m) for m in modes)
        new = old.new_zeros(self.in_channels, self.out_channels, *_weight_shape(new_modes), 2)
        # Place each old weight at the same signed frequency in the larger layout.
        index = []
        for a, (m_old, m_new) in enumerate(zip(self.modes, new_modes, strict=True)):
            if a == 3:
                index.append(list(range(m_old)))
            else:
                index.append(list(range(m_old)) + list(range(2 * m_new - m_old, 2 * m_new - 1)))
        new[(slice(None), slice(None), *_block_index(index, old.device))] = old
        self.modes = new_modes
        self.weight = nn.Parameter(new)


def _signed(w: torch.Tensor, dim: int, p: int, modes: int) -> torch.Tensor:
    """Frequencies ``0 .. p-1`` and ``-(p-1) .. -1`` of a signed weight axis (``2·modes - 1``
    entries ``[0 .. modes-1, -(modes-1) .. -1]``); a view when ``p = modes``."""
    if p == modes:
        return w
    return torch.cat([w.narrow(dim, 0, p), w.narrow(dim, 2 * modes - p, p - 1)], dim=dim)


def _block_index(index: list[list[int]], device: torch.device) -> tuple[torch.Tensor, ...]:
    """Four broadcasting index tensors selecting the block ``index[0] × .. × index[3]``."""
    return tuple(
        torch.tensor(ix, device=device).reshape([-1 if b == a else 1 for b in range(4)])
        for a, ix in enumerate(index)
    )


def _weight_shape(modes: tuple[int, ...]) -> tuple[int, ...]:
    mt, mx, my, mz = modes
    return (2 * mt - 1, 2 * mx - 1, 2 * my - 1, mz)


def modes_for(modes: int, dims: int = 3, time: bool = True) -> tuple[int, int, int, int]:
    """``(mt, mx, my, mz)`` keeping ``modes`` per active axis, 1 on inactive ones."""
    return (modes if time else 1, *(modes if a < dims else 1 for a in range(3)))
