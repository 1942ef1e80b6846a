"""pdeladder: verified PDE simulation data along a curriculum, and a neural-operator trainer
coupled to it.

Subpackages: :mod:`pdeladder.solvers` (FEniCSx families), :mod:`pdeladder.curriculum`,
:mod:`pdeladder.dataset` (Zarr v3 stores), :mod:`pdeladder.trainer`, :mod:`pdeladder.flows`.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("pdeladder")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"
