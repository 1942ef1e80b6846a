"""A stage's family entries: parameter ranges per family, chosen by a discriminated union.

Each registered family gets a pydantic model ``<Family>Entry`` whose ``family`` field is the
literal registry name and whose ``params`` model has one optional :class:`Range` per parameter of
the family's own ``Params``; a range must lie inside that parameter's admissible interval.
``FamilyEntry`` is the union of all of them, discriminated on ``family``, so a misspelt
parameter is an error naming the field. Families whose entry point is broken (their module cannot
be imported, their name is claimed twice) are left out of the union and listed in
:data:`UNAVAILABLE` with the registry's one-line error.
"""

from mpi4py import MPI  # noqa: F401  (loads libmpi before any family imports DOLFINx)

from typing import Annotated, Any, ClassVar, Literal, Union

import numpy as np
from pydantic import (
    BaseModel,
    Field,
    StrictInt,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)

from pdeladder.curriculum.settings import FROZEN
from pdeladder.dataset.format import MAX_SAMPLES  # the store's bound: a plan's too
from pdeladder.errors import UserInputError
from pdeladder.solvers.family import Family
from pdeladder.solvers.grid import Grid
from pdeladder.solvers.registry import family_names, get_family


class Range(BaseModel):
    """A parameter's range ``[low, high]``; a number is the degenerate range of a fixed value.

    ``scale="log"`` spreads samples uniformly in ``log(value)`` (for diffusivities, Reynolds
    numbers and other scales spanning decades).
    """

    model_config = FROZEN

    low: float
    high: float
    scale: Literal["linear", "log"] = "linear"

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return {"low": value, "high": value}
        if isinstance(value, list | tuple):
            if len(value) != 2:
                raise ValueError(f"a range is [low, high], got {len(value)} values")
            return {"low": value[0], "high": value[1]}
        return value

    @model_validator(mode="after")
    def _ordered(self) -> "Range":
        if not self.low <= self.high:
            raise ValueError(f"low {self.low:g} is above high {self.high:g}")
        if self.scale == "log" and self.low <= 0:
            raise ValueError("a log-scale range needs low > 0")
        return self

    @property
    def fixed(self) -> bool:
        return self.low == self.high

    def at(self, u: np.ndarray) -> np.ndarray:
        """Values at unit-interval coordinates ``u`` (any shape), float64."""
        if self.scale == "log":
            return np.exp(np.log(self.low) + u * (np.log(self.high) - np.log(self.low)))
        return self.low + u * (self.high - self.low)


class ParamRanges(BaseModel):
    """Base of the per-family range models; unset parameters keep the family's default."""

    model_config = FROZEN
    family_class: ClassVar[type[Family]]

    @field_validator("*")
    @classmethod
    def _inside_admissible(cls, rng: Range | None, info: ValidationInfo) -> Range | None:
        lo, hi = cls.family_class.Params.ranges()[info.field_name]
        if rng is not None and (
            (lo is not None and rng.low < lo) or (hi is not None and rng.high > hi)
        ):
            raise ValueError(
                f"[{rng.low:g}, {rng.high:g}] leaves the admissible range [{lo:g}, {hi:g}] "
                f"of {cls.family_class.name}.{info.field_name}"
            )
        return rng

    def set_ranges(self) -> dict[str, Range]:
        return {n: r for n, r in self if r is not None}

    def resolved(self) -> dict[str, Range]:
        """Every parameter in ``Params`` order: its range, or its default as a fixed value."""
        fields = self.family_class.Params.model_fields
        return {
            n: getattr(self, n) or Range(low=f.default, high=f.default) for n, f in fields.items()
        }


class EntryBase(BaseModel):
    """One family in a stage: a group per (dimension, resolution), each of ``samples`` samples.

    ``snapshots`` defaults to 1 for steady families and 11 otherwise; ``t_end`` to the family's.
    ``design`` is the space-filling design over the varying parameters (scrambled Sobol' points,
    whose first ``n`` do not depend on the total count, or a Latin hypercube).
    """

    model_config = FROZEN
    family_class: ClassVar[type[Family]]

    dims: list[Annotated[int, Field(ge=1, le=3)]] = Field(min_length=1)
    resolutions: list[Annotated[int, Field(ge=3)]] = Field(min_length=1)
    samples: StrictInt = Field(
        ge=1, le=MAX_SAMPLES, description="samples per (dimension, resolution) group"
    )
    snapshots: StrictInt | None = Field(None, ge=1)
    t_end: float | None = Field(None, gt=0)
    design: Literal["sobol", "latin_hypercube"] = "sobol"
    ranks_per_sample: StrictInt | Literal["auto"] = Field(
        1,
        description="MPI ranks that solve each sample, the mesh cut into x slabs (each rank "
        "writes its own); auto: the fewest whose per-rank memory fits "
        "generation.memory_budget_gb",
    )

    @model_validator(mode="after")
    def _grids_exist(self) -> "EntryBase":
        grids = self.grids()  # raises UserInputError, a ValueError, on an unsupported combination
        # ``params``: the family's ranges, a field of each family's own entry model
        ranges = {n: (r.low, r.high) for n, r in self.params.resolved().items()}
        for g in grids:
            if why := self.family_class.unresolved(g, ranges):
                raise ValueError(why)
        k = self.ranks_per_sample
        if isinstance(k, int):
            if k < 1:
                raise ValueError(f"ranks_per_sample must be at least 1, got {k}")
            if small := [g for g in grids if k > g.cells]:
                raise ValueError(
                    f"ranks_per_sample {k} exceeds the {small[0].cells} cells along x of "
                    f"resolution {small[0].resolution}: every rank needs a slab of cells"
                )
        return self

    def grids(self) -> list[Grid]:
        """The sampling grid of each group, dimensions outer, resolutions inner."""
        fam = self.family_class
        snaps = self.snapshots if self.snapshots is not None else (1 if fam.steady else 11)
        return [fam.grid(d, r, snaps, self.t_end) for d in self.dims for r in self.resolutions]


def _entry_model(name: str, family: type[Family]) -> type[EntryBase]:
    cls = family.__name__
    fields = {
        n: (Range | None, Field(None, description=f.description))
        for n, f in family.Params.model_fields.items()
    }
    ranges = create_model(f"{cls}Ranges", __base__=ParamRanges, **fields)
    ranges.family_class = family
    entry = create_model(
        f"{cls}Entry",
        __base__=EntryBase,
        family=(Literal[name], ...),
        params=(ranges, Field(default_factory=ranges)),
    )
    entry.family_class = family
    return entry


def _build() -> tuple[list[type[EntryBase]], dict[str, str]]:
    entries, unavailable = [], {}
    for name in family_names():
        try:
            entries.append(_entry_model(name, type(get_family(name))))
        except UserInputError as err:  # a broken entry point: its one line
            unavailable[name] = str(err)
    return entries, unavailable


ENTRIES, UNAVAILABLE = _build()
#: The union of the available families' entries, discriminated on ``family``.
FamilyEntry = Annotated[Union[tuple(ENTRIES)], Field(discriminator="family")]  # noqa: UP007
