"""Spectral convolution over ``(t, x, y, z)``: rfftn → keep low modes → contract → irfftn.

Tensors are ``(batch, channels, t, x, y, z)``; any axis may be a singleton (1D and 2D problems,
steady problems with ``t = 1``). The layer keeps, per axis, the frequencies ``|k| < modes`` that
the grid resolves, so the same weights act on any resolution (resolution invariance): a coarse
grid uses a subset of the weights, a fine grid leaves its higher frequencies to the pointwise
path of the block.

The Fourier transform is delegated to a :class:`SpectralTransform`. :class:`LocalFFT` transforms
the whole sample on one process; a slab-decomposed transform (each rank holding ``x``-slabs,
all-to-all transposes between the axis transforms) implements the same two methods, so the layer
and the model stay as they are (docs/trainer.md, "Distributed FFT seam").
"""

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


class SpectralTransform:
    """The Fourier transform a spectral layer uses; see :class:`LocalFFT`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, C, T, X, Y, Z)`` real → ``(B, C, T, X, Y, Z//2+1)`` complex coefficients."""
        raise NotImplementedError

    def inverse(self, coeffs: torch.Tensor, shape: tuple[int, int, int, int]) -> torch.Tensor:
        """Complex coefficients → real ``(B, C, *shape)``."""
        raise NotImplementedError


class LocalFFT(SpectralTransform):
    """The whole sample on this process: ``torch.fft.rfftn`` over the last four axes."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.fft.rfftn(x, dim=(-4, -3, -2, -1), norm="forward")

    def inverse(self, coeffs: torch.Tensor, shape: tuple[int, int, int, int]) -> torch.Tensor:
        return torch.fft.irfftn(coeffs, s=shape, dim=(-4, -3, -2, -1), norm="forward")


class SpectralConv(nn.Module):
    """A Fourier layer: ``y = F⁻¹(W · F(x))`` on the kept modes of ``(t, x, y, z)``.

    Args:
        in_channels, out_channels: channel counts.
        modes: kept modes per axis ``(t, x, y, z)``; the last (rfft) axis keeps ``modes[3]``
            non-negative frequencies, the others ``2·modes - 1`` signed ones.

    The complex weights are stored as a real tensor ``(in, out, 2mt-1, 2mx-1, 2my-1, mz, 2)``
    (real and imaginary parts last), which FSDP shards and DCP saves like any real parameter.
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
        shape = tuple(x.shape[-4:])
        # FFTs run in float32 even under mixed precision (half precision needs power-of-two sizes).
        with torch.autocast(device_type=x.device.type, enabled=False):
            coeffs = self.transform.forward(x.float())  # (B, in, T, X, Y, Z//2+1) complex
            sel = [
                kept_indices(n, m, half=a == 3)
                for a, (n, m) in enumerate(zip(shape, self.modes, strict=True))
            ]
            block = coeffs
            weight = torch.view_as_complex(self.weight.float())  # (in, out, 2mt-1, .., mz)
            for a, (fft_idx, w_idx) in enumerate(sel):
                block = block.index_select(2 + a, torch.tensor(fft_idx, device=x.device))
                weight = weight.index_select(2 + a, torch.tensor(w_idx, device=x.device))
            # block: (B, in, kt, kx, ky, kz); weight: (in, out, kt, kx, ky, kz)
            mixed = torch.einsum("bitxyz,iotxyz->botxyz", block, weight)
            out = coeffs.new_zeros((x.shape[0], self.out_channels, *coeffs.shape[2:]))
            out[(slice(None), slice(None), *_block_index([f for f, _ in sel], x.device))] = mixed
            return self.transform.inverse(out, shape).to(x.dtype)  # (B, out, T, X, Y, Z)

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
