"""Spectral convolution over ``(t, x, y, z)``: FFT → keep low modes → contract → inverse FFT.

Tensors are ``(batch, channels, t, x, y, z)``; any axis may be a singleton (1D and 2D problems,
steady problems with ``t = 1``). The layer keeps, per axis, the frequencies ``|k| < modes`` that
the grid resolves, so the same weights act on any resolution (resolution invariance): a coarse
grid uses a subset of the weights, a fine grid leaves its higher frequencies to the pointwise
path of the block.

Only the kept modes are computed: the transform runs one axis at a time and truncates after
each (the real half transform on the last axis with points first), so each later axis is
transformed on a fraction of the data, and the inverse pads one axis at a time. On a 2D
trajectory with 8 of 80 points' modes kept per axis this is several times less work than a full
``rfftn`` → slice → zero-fill → ``irfftn``.

The Fourier transform is delegated to a :class:`SpectralTransform`. :class:`LocalFFT` transforms
the whole sample on one process; a slab-decomposed transform (each rank holding ``x``-slabs,
all-to-all transposes between the axis transforms) implements the same two methods, so the layer
and the model stay as they are (docs/trainer.md, "Distributed FFT seam").
"""

from dataclasses import dataclass

import torch
from torch import nn


def kept_indices(n: int, modes: int, half: bool) -> tuple[list[int], list[int]]:
    """Which frequencies of an axis of ``n`` points are kept, and where their weights sit.

    A full (complex) axis keeps ``k = 0 .. p-1`` and ``k = -q .. -1`` (``p = min(modes, ⌈n/2⌉)``,
    ``q = min(modes - 1, ⌊(n-1)/2⌋)``; the Nyquist frequency is dropped); its weights are laid out
    ``[0, 1, .., modes-1, -(modes-1), .., -1]`` (``2·modes - 1`` entries). The half (rfft) axis
    keeps ``k = 0 .. p-1`` with weights ``[0 .. modes-1]``.

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
            (``q = 0`` on the half axis), in that order in the kept block.
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

    Only the kept block crosses this seam, so a distributed transform moves only the kept
    coefficients between ranks.
    """

    def forward(self, x: torch.Tensor, sel: ModeSelection) -> torch.Tensor:
        """``(B, C, T, X, Y, Z)`` real → ``(B, C, *sel.block_shape)`` complex kept coefficients
        (``norm="forward"``: the mean of ``x`` is coefficient 0)."""
        raise NotImplementedError

    def inverse(self, block: torch.Tensor, sel: ModeSelection) -> torch.Tensor:
        """Kept coefficients ``(B, C, *sel.block_shape)`` → real ``(B, C, *sel.shape)``, every
        other coefficient taken as zero."""
        raise NotImplementedError


class LocalFFT(SpectralTransform):
    """The whole sample on this process, one axis at a time, pruned: the half axis first
    (``rfft``, then truncated to its kept modes), then each full axis on what is left, so each
    later transform runs on a fraction of the data; the inverse in reverse order."""

    def forward(self, x: torch.Tensor, sel: ModeSelection) -> torch.Tensor:
        h = 2 + sel.half
        c = torch.fft.rfft(x, dim=h, norm="forward").narrow(h, 0, sel.kept[sel.half][0])
        for a in reversed(sel.full_axes):
            (p, q), n = sel.kept[a], sel.shape[a]
            c = torch.fft.fft(c, dim=2 + a, norm="forward")
            c = _keep(c, 2 + a, p, q, n)  # (B, C, .., p + q, ..)
        return c

    def inverse(self, block: torch.Tensor, sel: ModeSelection) -> torch.Tensor:
        c = block
        for a in sel.full_axes:
            (p, q), n, d = sel.kept[a], sel.shape[a], 2 + a
            gap = list(c.shape)
            gap[d] = n - p - q
            c = torch.cat([c.narrow(d, 0, p), c.new_zeros(gap), c.narrow(d, p, q)], dim=d)
            c = torch.fft.ifft(c, dim=d, norm="forward")
        h = 2 + sel.half
        return torch.fft.irfft(c, n=sel.shape[sel.half], dim=h, norm="forward")


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

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, in, T, X, Y, Z)`` → ``(B, out, T, X, Y, Z)``."""
        if x.ndim != 6 or x.shape[1] != self.in_channels:
            raise ValueError(
                f"SpectralConv: input must be (batch, {self.in_channels}, t, x, y, z), "
                f"got {tuple(x.shape)}"
            )
        sel = ModeSelection.of(tuple(x.shape[-4:]), self.modes)
        # FFTs run in float32 even under mixed precision (half precision needs power-of-two sizes).
        with torch.autocast(device_type=x.device.type, enabled=False):
            block = self.transform.forward(x.float(), sel)  # (B, in, kt, kx, ky, kz) complex
            weight = self.kept_weight(sel, x.device)  # (in, out, kt, kx, ky, kz) complex
            mixed = torch.einsum("bitxyz,iotxyz->botxyz", block, weight)
            return self.transform.inverse(mixed, sel).to(x.dtype)  # (B, out, T, X, Y, Z)

    def kept_weight(self, sel: ModeSelection, device: torch.device) -> torch.Tensor:
        """The complex weights of ``sel``'s kept block, ``(in, out, *sel.block_shape)``."""
        weight = torch.view_as_complex(self.weight.float())  # (in, out, 2mt-1, .., mz)
        index, negated = [], []
        for a, (n, m) in enumerate(zip(sel.shape, self.modes, strict=True)):
            _, w_idx = kept_indices(n, m, half=a == 3 or a == sel.half)
            index.append(w_idx)
            # weight index of -k on a signed axis (the z axis stores k >= 0; only 0 is -0)
            negated.append([(2 * m - 1 - w) % (2 * m - 1) for w in w_idx] if a < 3 else w_idx)
        kept = _select(weight, index, device)
        if sel.half == 3:  # the stored layout: z is the half axis
            return kept
        return 0.5 * (kept + _select(weight, negated, device).conj())

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


def _keep(c: torch.Tensor, dim: int, p: int, q: int, n: int) -> torch.Tensor:
    """Frequencies ``0 .. p-1`` and ``-q .. -1`` of axis ``dim`` (of ``n`` coefficients)."""
    if q == 0:
        return c.narrow(dim, 0, p)
    return torch.cat([c.narrow(dim, 0, p), c.narrow(dim, n - q, q)], dim=dim)


def _select(weight: torch.Tensor, index: list[list[int]], device) -> torch.Tensor:
    """``weight[:, :, index[0], .., index[3]]`` (a block; prefix ranges as views)."""
    for a, ix in enumerate(index):
        if ix == list(range(len(ix))):
            weight = weight.narrow(2 + a, 0, len(ix))
        else:
            weight = weight.index_select(2 + a, torch.tensor(ix, device=device))
    return weight


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
