"""Domains other than the unit box: a bounding box in metres with obstacles cut out of it
(:mod:`.domain`, pure numpy), its conforming mesh made by gmsh (:mod:`.mesh`) and functions on
it sampled onto the box's regular grid with a mask (:mod:`.sample`).

The meshing and sampling names load DOLFINx and gmsh on first use (PEP 562), so that importing
a domain alone does not.
"""

from importlib import import_module
from typing import Any

from pdeladder.solvers.geometry.domain import POINTS_PER_DIAMETER, Circle, Domain, draw_obstacles

_LAZY = {
    **dict.fromkeys(
        (
            "FLUID",
            "INLET",
            "OUTLET",
            "WALLS",
            "OBSTACLE",
            "DomainMesh",
            "domain_mesh",
            "obstacle_tag",
        ),
        "mesh",
    ),
    **dict.fromkeys(("evaluate", "sample_on_grid"), "sample"),
}

__all__ = ["POINTS_PER_DIAMETER", "Circle", "Domain", "draw_obstacles", *_LAZY]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_LAZY[name]}"), name)
