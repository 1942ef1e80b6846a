"""The registry of equation families: name -> class, imported on first use."""

from importlib import import_module

from pdeladder.errors import UnknownNameError
from pdeladder.solvers.family import Family

#: Registry name -> "package:Class". One package per family (its FEM part in ``<package>.fem``).
FAMILIES: dict[str, str] = {
    "heat": "pdeladder.solvers.heat:Heat",
    "advection_diffusion": "pdeladder.solvers.advection_diffusion:AdvectionDiffusion",
    "allen_cahn": "pdeladder.solvers.allen_cahn:AllenCahn",
    "gray_scott": "pdeladder.solvers.gray_scott:GrayScott",
    "burgers": "pdeladder.solvers.burgers:Burgers",
    "wave": "pdeladder.solvers.wave:Wave",
    "navier_stokes": "pdeladder.solvers.navier_stokes:NavierStokes",
    "darcy": "pdeladder.solvers.darcy:Darcy",
}


def family_names() -> list[str]:
    return list(FAMILIES)


def get_family(name: str) -> Family:
    """An instance of the family registered as ``name``."""
    try:
        module, cls = FAMILIES[name].split(":")
    except KeyError:
        raise UnknownNameError(
            f"unknown family {name!r}; available: {', '.join(FAMILIES)}"
        ) from None
    return getattr(import_module(module), cls)()
