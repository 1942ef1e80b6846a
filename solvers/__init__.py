"""FEniCSx (DOLFINx) solvers for PDE families in 1–3D, sampled onto regular space-time grids.

Look families up by name with :func:`get_family`; each is a :class:`Family` whose ``run`` returns
a :class:`Sample` of float32 ``(T, C, X, Y, Z)`` fields. Importing this package, getting a family and
computing its residual import no DOLFINx or PETSc; a solve imports the family's FEM part
(``<family>.fem``), as do Navier–Stokes' inputs (a discrete projection).
"""

from pdeladder.solvers.family import Channel, Family, Parameters, Sample, SolveStats
from pdeladder.solvers.grid import Grid
from pdeladder.solvers.registry import family_names, get_family

__all__ = [
    "Channel",
    "Family",
    "Grid",
    "Parameters",
    "Sample",
    "SolveStats",
    "family_names",
    "get_family",
]
