"""What a store records about where its data came from: library versions and checksums.

Versions come from installed metadata, never by importing DOLFINx or PETSc, so readers stay
free of them.
"""

import importlib.metadata as md
import importlib.util
import re
from functools import cache

import google_crc32c
import numpy as np

#: Distributions known to install a module, tried before scanning every installed
#: distribution (``packages_distributions`` reads every RECORD file: tens of seconds in a
#: large environment, paid by every writer process).
_KNOWN_DISTS = {"dolfinx": ("dolfinx-solver-real", "fenics-dolfinx")}


def _dist_version(module: str) -> str | None:
    """Version of the distribution that installs top-level ``module`` (None if absent)."""
    for dist in (*_KNOWN_DISTS.get(module, ()), module):
        try:
            return md.version(dist)
        except md.PackageNotFoundError:
            continue
    if importlib.util.find_spec(module) is None:
        return None
    for dist in md.packages_distributions().get(module, []):
        try:
            return md.version(dist)
        except md.PackageNotFoundError:
            continue
    return None


def _module_version(module: str) -> str | None:
    """``__version__`` as written in ``module/__init__.py``, read as text (not imported)."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return None
    with open(spec.origin, encoding="utf-8") as f:
        found = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", f.read(), re.MULTILINE)
    return found.group(1) if found else _dist_version(module)


@cache
def software_versions() -> dict[str, str | None]:
    """Versions of pdeladder, DOLFINx (its distribution), PETSc (petsc4py), zarr and numpy."""
    return {
        "pdeladder": _dist_version("pdeladder"),
        "dolfinx": _dist_version("dolfinx"),
        "petsc": _module_version("petsc4py"),
        "zarr": _dist_version("zarr"),
        "numpy": _dist_version("numpy"),
    }


def checksum(fields: np.ndarray) -> int:
    """CRC-32C (Castagnoli, as in zarr's ``crc32c`` codec) of an array's float32 little-endian
    C-order bytes; hardware-accelerated, about 20 GB/s."""
    return google_crc32c.value(np.ascontiguousarray(fields, dtype="<f4").reshape(-1).view(np.uint8))
