"""What every equation family provides, and the sample it produces (no DOLFINx import here).

A family (one package in ``solvers/``) owns its parameter model, the random draw of its initial
state and coefficient fields, weak form and time stepping, channel names and roles,
boundary-condition description, a manufactured solution for its convergence study, and its
strong-form residual on the grid in pure torch, so the physics is written once, next to the
solver it must agree with. The package itself is the physics without the FEM (no DOLFINx or
PETSc import, so a trainer computes residuals without loading them); its ``fem`` module holds
the weak form, time stepping and manufactured solution, imported on the first solve.
"""

import math
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from importlib import import_module
from types import ModuleType
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from pdeladder.errors import SolveError, UserInputError
from pdeladder.solvers.grid import Grid

#: Final time of every family's manufactured solution: the time steps a convergence study reports
#: are ``MANUFACTURED_T_END / steps``.
MANUFACTURED_T_END = 1.0


class Parameters(BaseModel):
    """Base of every family's parameter model: frozen, no extra keys, numeric fields with ranges.

    Declare fields with :func:`parameter`, which records the range and units. The field order is
    the order of the ``params`` vector in stores and of the ``params`` tensor given to residuals.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    @classmethod
    def names(cls) -> list[str]:
        return list(cls.model_fields)

    @classmethod
    def ranges(cls) -> dict[str, tuple[float, float]]:
        """``{name: (low, high)}`` from each field's ``ge``/``le`` bounds."""
        out = {}
        for name, info in cls.model_fields.items():
            lo = hi = None
            for m in info.metadata:
                lo = getattr(m, "ge", lo)
                hi = getattr(m, "le", hi)
            out[name] = (lo, hi)
        return out

    @classmethod
    def units(cls) -> dict[str, str]:
        return {
            n: (f.json_schema_extra or {}).get("units", "1") for n, f in cls.model_fields.items()
        }

    @classmethod
    def describe(cls) -> list[dict[str, Any]]:
        """One row per parameter: name, default, low, high, units, description."""
        rng, units = cls.ranges(), cls.units()
        return [
            {
                "name": n,
                "default": f.default,
                "low": rng[n][0],
                "high": rng[n][1],
                "units": units[n],
                "description": f.description or "",
            }
            for n, f in cls.model_fields.items()
        ]

    def vector(self) -> np.ndarray:
        """The parameters as float64 ``(P,)`` in field order."""
        return np.array([float(getattr(self, n)) for n in self.names()], dtype=np.float64)

    @classmethod
    def from_vector(cls, values: np.ndarray) -> "Parameters":
        return cls(**{n: float(v) for n, v in zip(cls.names(), values, strict=True)})


def parameter(default: float, low: float, high: float, units: str, description: str) -> Any:
    """A parameter field with its admissible range ``[low, high]`` and CF-style units."""
    return Field(
        default, ge=low, le=high, description=description, json_schema_extra={"units": units}
    )


#: The input channel that marks a family's domain inside its box: 1.0 at the grid points inside,
#: 0.0 outside, the same at every snapshot. A family whose domain is its whole box has none.
MASK = "mask"


@dataclass(frozen=True)
class Channel:
    """One channel of a trajectory. ``role="input"`` marks static coefficient fields the model
    receives (a permeability, a velocity field); outputs are what it predicts. ``wall``: the
    channel's condition on every wall of the box, as the solver imposes it, ``"zero"`` (the
    value, homogeneous Dirichlet) or ``"no_flux"`` (the normal derivative, homogeneous Neumann);
    ``None`` for none (a pressure, an input).

    A family whose domain is its box less holes has the input channel :data:`MASK`, and every
    output channel holds exactly 0 outside the domain. Scores, losses and normalisation
    statistics then count the points inside only; the mask itself reaches the model as 0/1,
    not normalised, and predictions are written with 0 outside."""

    name: str
    long_name: str
    units: str = "1"
    role: Literal["input", "output"] = "output"
    wall: Literal["zero", "no_flux"] | None = None


@dataclass
class SolveStats:
    """Per-sample solver statistics, stored beside the data."""

    dofs: int = 0
    steps: int = 0
    wall_s: float = 0.0
    solve_s: float = 0.0
    krylov_iterations: int = 0
    status: Literal["ok", "failed"] = "ok"
    reason: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Sample:
    """One solved (or failed) sample.

    Attributes:
        fields: float32 ``(T, C, X, Y, Z)``, or ``None`` when the solve failed.
        grid: where the fields live.
        params: the family's parameters.
        seed: the seed that, with the above, determines the fields bit for bit.
        stats: solver statistics and status.
        provenance: element, time step, mesh and solver settings, as JSON-able values.
    """

    family: str
    fields: np.ndarray | None
    grid: Grid
    params: Parameters
    seed: int
    stats: SolveStats
    provenance: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.stats.status == "ok"


def sample_generator(seed: int) -> np.random.Generator:
    """The generator that every random quantity of the sample with ``seed`` is drawn from."""
    return np.random.default_rng(seed)


class Family(ABC):
    """An equation family. Subclasses set the class attributes and implement
    :meth:`initial_fields` and :meth:`residual`; :meth:`solve` and :meth:`manufactured_error`
    are those of the family's FEM module (:meth:`fem`).

    Class attributes:
        name: registry name (``heat``, ``navier_stokes``, ...).
        title, equation: human title and strong form (LaTeX).
        dims: spatial dimensions supported.
        Params: the frozen pydantic parameter model.
        channels: trajectory channels, inputs marked (all of them, for the largest dimension;
            :meth:`channels_for` gives those of one dimension).
        boundary_conditions: a one-line description.
        difficulty: name of the parameter that sets the difficulty (Péclet, Reynolds, ...).
        steady: True for steady problems (``T = 1``).
        t_end: default final time.
        lengths: the bounding box ``(L_x, L_y, L_z)`` in metres (the family's length unit) that
            its grids sample (:meth:`grid`); the unit box by default.
        expected_rate_space, expected_rate_time: theoretical convergence orders (L2, at t_end).
        box_symmetric: the equation, every wall's condition and the random draws are alike in
            every direction, so the unit box's reflections and axis permutations map a solution
            to a solution with the same parameters (:mod:`pdeladder.solvers.symmetry`; the
            trainer augments its batches with them).
        vectors: channel-name tuples that form a vector, component ``a`` along axis ``a``
            (``("u", "v", "w")``); every other channel is a scalar.
    """

    name: ClassVar[str]
    title: ClassVar[str]
    equation: ClassVar[str]
    dims: ClassVar[tuple[int, ...]]
    Params: ClassVar[type[Parameters]]
    channels: ClassVar[tuple[Channel, ...]]
    boundary_conditions: ClassVar[str]
    difficulty: ClassVar[str | None] = None
    steady: ClassVar[bool] = False
    t_end: ClassVar[float] = 1.0
    lengths: ClassVar[tuple[float, float, float]] = (1.0, 1.0, 1.0)
    expected_rate_space: ClassVar[float] = 2.0
    expected_rate_time: ClassVar[float | None] = 1.0
    box_symmetric: ClassVar[bool] = False
    vectors: ClassVar[tuple[tuple[str, ...], ...]] = ()

    # -- what a family implements ---------------------------------------------------------------

    @abstractmethod
    def initial_fields(
        self, params: Parameters, grid: Grid, rng: np.random.Generator, comm: Any = None
    ) -> np.ndarray:
        """Snapshot 0 of a sample, drawn from ``rng`` without solving: float64 ``(C, X, Y, Z)``
        in :meth:`channels_for` order, the initial state and the coefficient (input) fields.
        Channels that only the solve determines (a steady family's outputs) are zero.

        On one rank of a sample solved in x slabs (``grid`` a
        :class:`~pdeladder.solvers.grid.SlabGrid`, ``comm`` its ranks), only the rows
        :meth:`Grid.drawn_rows` gives, ``(C, hi - lo, Y, Z)``: the whole draw's rows to rounding,
        with every global quantity (a maximum, a mean square) reduced over ``comm``; no rank
        holds the whole snapshot.

        :meth:`solve` starts from exactly these values: it draws them with this method, first,
        from its own ``rng`` (or, where the initial state is itself a discrete projection, with
        the same code on its own mesh).
        """

    def solve(
        self, params: Parameters, grid: Grid, rng: np.random.Generator, comm: Any, stats: SolveStats
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Solve one sample on ``comm`` and sample it onto ``grid``.

        Draw the initial state and coefficient fields with :meth:`initial_fields` from ``rng``;
        count steps and iterations into ``stats``; raise :class:`~pdeladder.errors.SolveError`
        when a solve fails. Returns float32 ``(T, C, X, Y, Z)`` (identical on every rank) and
        provenance, with the distribution that registers the family (``family_package``).
        """
        from pdeladder.solvers.registry import family_package

        fields, provenance = self.fem().solve(self, params, grid, rng, comm, stats)
        return fields, {**provenance, "family_package": family_package(type(self))}

    @abstractmethod
    def residual(self, fields: Any, params: Any, grid: Grid) -> Any:
        """Strong-form PDE residual on the grid, pure torch.

        Args:
            fields: ``(B, C, T, X, Y, Z)`` trajectories (all channels, inputs included), in
                the model's axis order (a stored sample ``(T, C, X, Y, Z)`` has its first two
                axes swapped).
            params: ``(B, P)`` parameter vectors in :meth:`Parameters.names` order.
            grid: the grid the fields live on.

        Returns:
            ``(B, R, T', X', Y', Z')`` residual at the points where it is defined (interior
            points, interior snapshots), in the equation's units; zero on exact solutions up to
            discretisation error.
        """

    def with_walls(
        self, fields: Any, params: Any, grid: Grid, ends: list[tuple[bool, bool]] | None = None
    ) -> Any:
        """``fields`` ``(B, C, T, X, Y, Z)`` (all channels, physical units, the model's axis
        order) completed by the family's boundary conditions on the walls they hold, so that
        :meth:`residual` on the result poses its equations with them. The trainer's equation
        loss, residual scores and refinement call it before :meth:`residual`.

        Args:
            fields: the fields, torch.
            params: ``(B, P)`` physical parameters, torch.
            grid: the global grid (a slab of it holds the x rows its ``ends`` say).
            ends: per active axis, whether ``fields`` hold its low and high wall (a slab of the
                global grid holds x's walls only at the global ends); default every wall.

        Returns the completed fields: the points a Dirichlet condition fixes set to their
        values, and, past a wall whose condition is on the derivative, one ghost plane (the
        grid grows by one point at that end). Ghost planes go past every wall held of an axis,
        or past none of it. Snapshot 0 of a time series is the given initial state: the caller
        keeps it as it was at the points ``fields`` had.

        The default is each channel's :attr:`Channel.wall`
        (:func:`~pdeladder.solvers.stencils.with_walls`). A family whose conditions differ
        between walls or are not homogeneous (an inflow profile, a heat-transfer coefficient)
        overrides it, and then needs no :attr:`Channel.wall`.
        """
        from pdeladder.solvers.stencils import with_walls  # torch: not loaded for a description

        channels = self.channels_for(grid.dim)
        along = {name: v.index(name) for v in self.vectors for name in v}
        odd = [[along.get(c.name) == a for c in channels] for a in range(grid.dim)]
        return with_walls(fields, [c.wall for c in channels], odd, grid.dim, ends)

    @classmethod
    def walls_own(cls) -> bool:
        """Whether the family completes its walls itself (overrides :meth:`with_walls`)."""
        return cls.with_walls is not Family.with_walls

    @classmethod
    def walls_set_values(cls, dim: int) -> bool:
        """Whether :meth:`with_walls` may change values at the fields' own points in ``dim``
        dimensions: a ``"zero"`` wall, or the family's own conditions (mirrored planes alone
        add points and change none)."""
        return cls.walls_own() or "zero" in [c.wall for c in cls.channels_for(dim)]

    def manufactured_error(
        self, dim: int, cells: int, steps: int, comm: Any, study: Literal["space", "time"]
    ) -> float:
        """L2 error at the final time of a manufactured-solution solve on ``cells`` cells per axis
        with ``steps`` time steps (``steps`` is ignored by steady families).

        ``study`` lets a family pick a manufactured solution that isolates the error studied,
        e.g. one linear in time, which implicit Euler integrates exactly, for the space study.
        """
        return self.fem().manufactured_error(dim, cells, steps, comm, study)

    def fem(self) -> ModuleType:
        """The family's FEM part, the module ``fem`` of its package: ``solve(family, params,
        grid, rng, comm, stats)`` and ``manufactured_error(dim, cells, steps, comm, study)``.
        Imported on first use, so the package alone loads no DOLFINx or PETSc."""
        return import_module(f"{type(self).__module__}.fem")

    #: refinement levels of the convergence study: {"space": {"cells": (...), "steps": n},
    #: "time": {"steps": (...), "cells": n}}, each with the fixed counterpart of its study;
    #: a key such as "space_3d" overrides the plan for one dimension.
    convergence_plan: ClassVar[dict[str, Any]] = {
        "space": {"cells": (8, 16, 32), "steps": 64},
        "time": {"steps": (8, 16, 32), "cells": 64},
    }

    #: the contract sample (:mod:`pdeladder.solvers.checks`, 17 points per axis): a
    #: time-dependent family's snapshots, enough for the residual's central differences in time
    #: to resolve its fastest time scale, up to ``check_t_end`` (None: ``t_end``)
    check_snapshots: ClassVar[int] = 5
    check_t_end: ClassVar[float | None] = None

    # -- shared behaviour ---------------------------------------------------------------------

    @classmethod
    def channels_for(cls, dim: int) -> tuple[Channel, ...]:
        """The channels of a ``dim``-dimensional trajectory; ``channels`` lists them for the
        largest dimension. Families with vector unknowns override this (``u, v`` in 2D)."""
        return cls.channels

    @classmethod
    def symmetric_axes(cls, dim: int) -> tuple[int, ...]:
        """The spatial axes along which the family's equation, walls and random draws are alike
        in ``dim`` dimensions: every reflection along them and permutation among them (of
        equal box lengths) maps a solution to a solution with the same parameters
        (:func:`~pdeladder.solvers.symmetry.family_group`). All of them for a
        :attr:`box_symmetric` family, none by default; a family whose domain keeps some
        symmetries overrides it (a channel's reflection across its centre line)."""
        return tuple(range(dim)) if cls.box_symmetric else ()

    @classmethod
    def channel_names(cls, dim: int) -> list[str]:
        return [c.name for c in cls.channels_for(dim)]

    @classmethod
    def parse_params(cls, values: dict[str, Any] | None = None) -> Parameters:
        """Validate user values against the parameter model; one-line error on failure."""
        from pydantic import ValidationError

        try:
            return cls.Params(**(values or {}))
        except ValidationError as err:
            e = err.errors()[0]
            where = ".".join(str(p) for p in e["loc"])
            raise UserInputError(f"{cls.name}: parameter {where!r}: {e['msg']}") from None

    @classmethod
    def grid(cls, dim: int, resolution: int, snapshots: int, t_end: float | None = None) -> Grid:
        """The sampling grid for this family on its box :attr:`lengths`, checking the dimension
        and steadiness."""
        if dim not in cls.dims:
            raise UserInputError(f"{cls.name} supports dimensions {list(cls.dims)}, not {dim}")
        if cls.steady and snapshots != 1:
            raise UserInputError(f"{cls.name} is steady: snapshots must be 1, got {snapshots}")
        if not cls.steady and snapshots < 2:
            raise UserInputError(f"{cls.name} is time-dependent: snapshots must be >= 2")
        t_end = 0.0 if cls.steady else (t_end or cls.t_end)
        return Grid(dim, resolution, snapshots, t_end, cls.lengths)

    @classmethod
    def unresolved(cls, grid: Grid, ranges: Mapping[str, tuple[float, float]]) -> str | None:
        """Why ``grid`` cannot resolve every sample whose parameters lie in ``ranges`` (name:
        ``(low, high)``, every parameter): the finest feature such a sample can have, and the
        resolution that would resolve it; None when it can (the default). Asked before anything
        is solved: a curriculum's groups when it is read, ``pdeladder solve`` its one sample."""
        return None

    @classmethod
    def check_params(cls, dim: int) -> Parameters:
        """The parameters of the contract sample in ``dim`` dimensions
        (:mod:`pdeladder.solvers.checks`): the defaults, unless its grids cannot resolve them
        (:meth:`unresolved`)."""
        return cls.Params()

    def draw_inputs(self, params: Parameters, grid: Grid, seed: int) -> np.ndarray:
        """Snapshot 0 of the sample ``(params, grid, seed)`` without solving it: float32
        ``(C, X, Y, Z)``, bitwise what :meth:`run` stores as snapshot 0 in its initial-state and
        input channels (zero in the channels only a solve determines)."""
        return self.initial_fields(params, grid, sample_generator(seed)).astype(np.float32)

    def run(self, params: Parameters, grid: Grid, seed: int, comm: Any = None) -> Sample:
        """Solve one sample; a failed solve comes back with ``status="failed"`` and a reason,
        never as data. Content depends only on (family, params, grid, seed)."""
        if comm is None:
            from mpi4py import MPI

            comm = MPI.COMM_SELF
        stats = SolveStats()
        t0 = time.perf_counter()
        fields: np.ndarray | None = None
        provenance: dict[str, Any] = {}
        try:
            fields, provenance = self.solve(params, grid, sample_generator(seed), comm, stats)
            if not np.all(np.isfinite(fields)):
                raise SolveError("non-finite values (NaN/Inf) in the solution")
            expected = (grid.snapshots, len(self.channels_for(grid.dim)), *grid.shape)
            if fields.shape != expected or fields.dtype != np.float32:
                raise AssertionError(
                    f"{self.name} returned {fields.dtype}{fields.shape}, expected float32{expected}"
                )
        except SolveError as err:
            fields, stats.status, stats.reason = None, "failed", err.reason
        stats.wall_s = time.perf_counter() - t0
        return Sample(self.name, fields, grid, params, seed, stats, provenance)


def residual_shape_error(shape: tuple[int, ...], fields: tuple[int, ...]) -> str | None:
    """Why a residual of ``shape`` is not one of fields of ``fields`` ``(B, C, T, X, Y, Z)``:
    it must be ``(B, R, T', X', Y', Z')``, at least one row ``R``, no axis longer than the
    fields' (a centred stencil drops points, never adds them); None when it is."""
    shaped = len(shape) == 6 and shape[0] == fields[0] and shape[1] >= 1
    if shaped and all(1 <= n <= m for n, m in zip(shape[2:], fields[2:], strict=True)):
        return None
    return f"the residual of fields {tuple(fields)} is {tuple(shape)}, not (B, R, T', X', Y', Z')"


def observed_rates(h: list[float], err: list[float]) -> list[float]:
    """Observed orders ``log(e_i / e_{i+1}) / log(h_i / h_{i+1})`` between successive levels."""
    return [math.log(err[i] / err[i + 1]) / math.log(h[i] / h[i + 1]) for i in range(len(h) - 1)]
