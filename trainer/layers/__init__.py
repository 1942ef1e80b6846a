"""Layers of the neural operator: the spectral convolution and its Fourier transform seam."""

from pdeladder.trainer.layers.spectral import (
    LocalFFT,
    SpectralConv,
    SpectralTransform,
    kept_indices,
)

__all__ = ["LocalFFT", "SpectralConv", "SpectralTransform", "kept_indices"]
