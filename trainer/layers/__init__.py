"""Layers of the neural operator: the spectral convolution and its Fourier transform seam."""

from pdeladder.trainer.layers.fft import LocalFFT, ModeSelection, SpectralTransform, kept_indices
from pdeladder.trainer.layers.spectral import SpectralConv

__all__ = ["LocalFFT", "ModeSelection", "SpectralConv", "SpectralTransform", "kept_indices"]
