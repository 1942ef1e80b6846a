"""The registry of equation families: the entry points of the group ``pdeladder.families``.

Each is ``name = package.module:Class`` in some installed distribution: pdeladder registers its
own eight in its ``pyproject.toml``, and a plugin distribution registers its families the same
way; the class is defined in a package's ``__init__`` and its FEM part is that package's ``fem``
module (:meth:`Family.fem`). Names are listed without importing anything; a family's module is
imported when the family is first got. A broken entry point (one that cannot be imported, or
names no :class:`Family` of that name, or whose residual fails or is misshapen on random
fields) or a name claimed by two entry points is an error for that name only, one line naming
the entry point. The group is read once per process, each family's residual probed once.
"""

import sys
from functools import cache
from importlib.metadata import EntryPoint, entry_points

from pdeladder.errors import UnknownNameError, UserInputError, one_line
from pdeladder.solvers.family import Family, residual_shape_error

#: The entry-point group that families register in.
GROUP = "pdeladder.families"


def _where(ep: EntryPoint) -> str:
    """``entry point heat = pdeladder.solvers.heat:Heat of pdeladder 0.1.0``."""
    return f"entry point {ep.name} = {ep.value} of {ep.dist.name} {ep.dist.version}"


@cache
def _discovered() -> tuple[dict[str, EntryPoint], dict[str, str]]:
    """The group's entry points by family name, and the error of each name that entry points
    with different values claim (such names are only in the second). One distribution seen
    twice (an editable install on ``sys.path`` twice) is one claim."""
    claims: dict[str, dict[str, EntryPoint]] = {}
    for ep in entry_points(group=GROUP):
        claims.setdefault(ep.name, {}).setdefault(ep.value, ep)
    found, clashes = {}, {}
    for name, by_value in claims.items():
        eps = list(by_value.values())
        if len(eps) == 1:
            found[name] = eps[0]
        else:
            clashes[name] = f"family {name!r} is claimed by {len(eps)} entry points: " + "; ".join(
                map(_where, eps)
            )
    return found, clashes


def family_names() -> list[str]:
    """Every registered family name, broken ones included, sorted; nothing is imported."""
    found, clashes = _discovered()
    return sorted([*found, *clashes])


def _entry_point(name: str) -> EntryPoint:
    found, clashes = _discovered()
    if name in clashes:
        raise UserInputError(f"{clashes[name]}; uninstall all but one")
    if name not in found:
        raise UnknownNameError(f"unknown family {name!r}; available: {', '.join(family_names())}")
    return found[name]


def get_family(name: str) -> Family:
    """An instance of the family registered as ``name``, its module imported now. Raises
    :class:`UnknownNameError` for a name nothing registers and :class:`UserInputError` for a
    broken entry point."""
    ep = _entry_point(name)
    where = f"family {name!r} ({_where(ep)})"
    try:
        cls = ep.load()
    except Exception as err:  # a plugin's bug of any kind is that plugin's error only
        raise UserInputError(
            f"{where}: cannot be imported: {type(err).__name__}: {one_line(str(err))}"
        ) from err
    if not (isinstance(cls, type) and issubclass(cls, Family)):
        raise UserInputError(f"{where}: not a Family subclass")
    if getattr(cls, "name", None) != name:
        raise UserInputError(f"{where}: the class declares name {getattr(cls, 'name', None)!r}")
    try:
        family = cls()
    except Exception as err:
        raise UserInputError(
            f"{where}: cannot be created: {type(err).__name__}: {one_line(str(err))}"
        ) from err
    if (error := _residual_error(cls)) is not None:
        raise UserInputError(f"{where}: {error}")
    return family


@cache
def _residual_error(cls: type[Family]) -> str | None:
    """Why ``cls``'s residual is broken, None if it is not: evaluated on random fields of its
    first dimension (9 points per axis, 4 snapshots) with the default parameters, it must run
    and be shaped as :func:`~pdeladder.solvers.family.residual_shape_error` says. A broken
    residual fails here, in one line, not in a trainer's loss."""
    import numpy as np
    import torch

    fam, dim = cls(), cls.dims[0]
    grid = fam.grid(dim, 9, 1 if fam.steady else 4)
    shape = (2, len(fam.channels_for(dim)), grid.snapshots, *grid.shape)
    fields = torch.randn(shape, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    params = torch.from_numpy(np.stack([fam.Params().vector()] * 2))
    try:
        residual = fam.residual(fields, params, grid)
    except Exception as err:
        return f"its residual fails on random fields: {type(err).__name__}: {one_line(str(err))}"
    return residual_shape_error(tuple(residual.shape), shape)


def family_package(family: type[Family]) -> dict[str, str] | None:
    """The distribution whose entry point registers ``family`` (the class itself, under its own
    name): ``{"name": "pdeladder", "version": "0.1.0"}``; None for a class not registered.
    Imports nothing: the class's entry point, if any, is already loaded."""
    ep = _discovered()[0].get(getattr(family, "name", None))
    if ep is None or ep.module not in sys.modules or ep.load() is not family:
        return None
    return {"name": ep.dist.name, "version": ep.dist.version}
