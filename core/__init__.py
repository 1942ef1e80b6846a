"""pdeladder: verified PDE simulation data along a curriculum, and a neural-operator trainer
coupled to it.

Subpackages: :mod:`pdeladder.solvers` (FEniCSx families), :mod:`pdeladder.curriculum`,
:mod:`pdeladder.dataset` (Zarr v3 stores), :mod:`pdeladder.trainer`, :mod:`pdeladder.flows`.
"""

import os
from importlib.metadata import PackageNotFoundError, version

# PETSc, initialised when DOLFINx is imported, would install signal handlers that turn a SIGPIPE
# (a peer closing a socket: routine in a process that talks to Ray and Prefect) into MPI_Abort.
# Set before any DOLFINx import, this keeps Python's own signal handling in pdeladder processes.
if "-no_signal_handler" not in os.environ.get("PETSC_OPTIONS", ""):
    os.environ["PETSC_OPTIONS"] = (
        f"{os.environ.get('PETSC_OPTIONS', '')} -no_signal_handler".strip()
    )

# MPI (UCX) on loopback only, unless configured: set before any mpi4py import of pdeladder's
# (pdeladder.network says what and why).
from pdeladder.network import loopback_defaults

loopback_defaults()

try:
    __version__ = version("pdeladder")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"
