"""Regular space-time grids on a box of physical lengths (pure numpy; no DOLFINx).

A trajectory is float32 ``(T, C, X, Y, Z)``: a 2D problem has ``Z = 1``, a 1D one ``Y = Z = 1``.
The box is ``[0, L_0] x ... x [0, L_{dim-1}]`` in metres (``lengths``, the unit box by default).
Axis ``a`` has ``resolution`` points ``x_i = i L_a / (resolution - 1)``, both walls included, so
the structured mesh behind it has ``resolution - 1`` cells per axis and its vertices are exactly
the grid points. Snapshot ``k`` is at ``t_k = k * t_end / (T - 1)``; snapshot 0 is the initial
condition; steady problems have ``T = 1``.
"""

import itertools
import math
import numbers
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pdeladder.errors import UserInputError


def spatial_shape(dim: int, resolution: int) -> tuple[int, int, int]:
    """``(X, Y, Z)``: ``resolution`` points along each of the first ``dim`` axes, 1 beyond."""
    return tuple(resolution if a < dim else 1 for a in range(3))  # type: ignore[return-value]


#: The most space-time points one sample may have, ``resolution ** dim * snapshots``: 2**40
#: (4 TiB per float32 channel, a sample only domain ranks hold). A grid beyond it, asked in a
#: curriculum or read from a store's attributes, is refused in one line, never allocated.
MAX_POINTS = 2**40


@dataclass(frozen=True)
class Grid:
    """The space-time sampling grid of one sample.

    Attributes:
        dim: spatial dimension, 1, 2 or 3.
        resolution: points per spatial axis (>= 3), boundaries included.
        snapshots: stored time levels ``T`` (1 for steady problems).
        t_end: final time (same time units as the family), 0 for steady problems.
        lengths: the box's extent ``(L_x, L_y, L_z)`` in metres, positive and finite along the
            first ``dim`` axes; the entries beyond ``dim`` are 1.0 whatever was passed, so that
            two grids of one box are equal. ``dim`` to 3 entries may be passed.
    """

    dim: int
    resolution: int
    snapshots: int
    t_end: float
    lengths: tuple[float, float, float] = (1.0, 1.0, 1.0)

    def __post_init__(self) -> None:
        if self.dim not in (1, 2, 3):
            raise UserInputError(f"dimension must be 1, 2 or 3, got {self.dim}")
        if self.resolution < 3:
            raise UserInputError(
                f"resolution must be at least 3 points per axis, got {self.resolution}"
            )
        if self.snapshots < 1:
            raise UserInputError(f"snapshots must be at least 1, got {self.snapshots}")
        if self.snapshots > 1 and not self.t_end > 0:
            raise UserInputError(f"t_end must be positive for a time series, got {self.t_end}")
        if self.points * self.snapshots > MAX_POINTS:
            raise UserInputError(
                f"{self.resolution}^{self.dim} points x {self.snapshots} snapshots is more than "
                f"one sample may hold (2^{MAX_POINTS.bit_length() - 1} space-time points)"
            )
        given = tuple(self.lengths) if isinstance(self.lengths, (tuple, list)) else ()
        if not (
            self.dim <= len(given) <= 3
            and all(
                isinstance(x, numbers.Real) and not isinstance(x, bool) and 0 < x < math.inf
                for x in given[: self.dim]
            )
        ):
            raise UserInputError(
                f"lengths must be positive finite extents in metres along the {self.dim} axes "
                f"(at most 3 entries), got {self.lengths!r}"
            )
        box = tuple(float(given[a]) if a < self.dim else 1.0 for a in range(3))
        object.__setattr__(self, "lengths", box)

    @property
    def cells(self) -> int:
        """Mesh cells per axis."""
        return self.resolution - 1

    @property
    def spacing(self) -> tuple[float, ...]:
        """Grid spacing along each of the ``dim`` axes in metres, ``L_a / (resolution - 1)``."""
        return tuple(self.lengths[a] / (self.resolution - 1) for a in range(self.dim))

    @property
    def h(self) -> float:
        """The smallest grid spacing in metres (stability and accuracy bounds, plotting); a
        per-axis difference takes :attr:`spacing`."""
        return min(self.spacing)

    @property
    def shape(self) -> tuple[int, int, int]:
        """Spatial shape ``(X, Y, Z)`` with singleton axes beyond ``dim``."""
        return spatial_shape(self.dim, self.resolution)

    @property
    def space_time(self) -> tuple[int, int, int, int]:
        """A sample's space-time shape ``(T, X, Y, Z)``: the axes after the channel axis."""
        return (self.snapshots, *self.shape)

    @property
    def points(self) -> int:
        """Number of spatial grid points."""
        return self.resolution**self.dim

    @property
    def dt(self) -> float:
        """Spacing of stored snapshots (0 for steady problems)."""
        return self.t_end / (self.snapshots - 1) if self.snapshots > 1 else 0.0

    def internal_steps(self, *tau_max: float) -> int:
        """Internal time steps per stored snapshot interval: at least one per mesh cell of time
        (``τ <= t_end / cells``, so that time and space refine together; computed exactly), and
        enough that the step ``τ = dt / n`` is at most each bound in ``tau_max`` (a stability
        or accuracy limit; the ratio ``dt / tau`` less 1e-9 is rounded up, so that a bound
        whose multiple ``dt`` is gets that multiple despite rounding)."""
        every = -(-self.cells // (self.snapshots - 1))
        return max([every, *(math.ceil(self.dt / tau - 1e-9) for tau in tau_max)])

    def times(self) -> np.ndarray:
        """Snapshot times ``t_k``, shape ``(T,)``, float64."""
        return np.linspace(0.0, self.t_end, self.snapshots) if self.snapshots > 1 else np.zeros(1)

    def axis(self, a: int) -> np.ndarray:
        """Coordinates along axis ``a`` (0, 1, 2 for x, y, z) in metres, from 0 to ``lengths[a]``,
        float64; ``[0.0]`` for a singleton."""
        n = self.shape[a]
        return np.linspace(0.0, self.lengths[a], n) if n > 1 else np.zeros(1)

    def mesh_grid(self, rows: tuple[int, int] | None = None) -> np.ndarray:
        """Point coordinates, shape ``(3, X, Y, Z)``, in the layout DOLFINx's ``interpolate`` takes;
        with ``rows``, those of the x rows ``[lo, hi)`` only, ``(3, hi - lo, Y, Z)``."""
        x = self.axis(0) if rows is None else self.axis(0)[rows[0] : rows[1]]
        return np.stack(np.meshgrid(x, self.axis(1), self.axis(2), indexing="ij"))

    def drawn_rows(self, comm: Any = None) -> tuple[int, int]:
        """The x rows ``[lo, hi)`` of a sample's initial fields that the rank ``comm.rank`` of
        the sample's solve draws (:meth:`Family.initial_fields`): all of them, ``(0, X)``."""
        return (0, self.shape[0])


@dataclass(frozen=True)
class SlabGrid(Grid):
    """A :class:`Grid` that K ranks solve and sample in x slabs, one per rank.

    Rank ``r`` holds the mesh cells between x rows ``slabs[r] = (lo, hi)`` and samples the grid
    points of rows ``[lo, hi)`` only: ``(C, hi - lo, Y, Z)`` per snapshot, no gather. The slabs
    tile ``[0, X)`` in rank order. A sample solved on a ``SlabGrid`` belongs to its
    :attr:`whole` grid (a ``SlabGrid`` never equals a ``Grid``); :meth:`of` makes one from it.
    """

    slabs: tuple[tuple[int, int], ...] = field(default=(), kw_only=True)

    def __post_init__(self) -> None:
        super().__post_init__()
        s = self.slabs
        if not (
            s
            and s[0][0] == 0
            and s[-1][1] == self.shape[0]
            and all(lo < hi for lo, hi in s)
            and all(a[1] == b[0] for a, b in itertools.pairwise(s))
        ):
            raise UserInputError(
                f"x slabs {list(s)} do not tile the {self.shape[0]} x rows in order"
            )
        if len(self.slabs) > self.cells:
            raise UserInputError(
                f"{len(self.slabs)} x slabs need at least as many cells along x, got {self.cells}"
            )

    def drawn_rows(self, comm: Any = None) -> tuple[int, int]:
        """On more than one slab, rank ``comm.rank``'s slab ``[lo, hi)`` and the next slab's
        first row: the rows of every dof it owns (its cells span rows ``lo`` to ``hi``)."""
        if len(self.slabs) == 1:
            return (0, self.shape[0])
        if comm is None or comm.size != len(self.slabs):
            raise ValueError(f"{len(self.slabs)} x slabs need the communicator of their ranks")
        lo, hi = self.slabs[comm.rank]
        return (lo, min(hi + 1, self.shape[0]))

    @classmethod
    def of(cls, grid: Grid, slabs: tuple[tuple[int, int], ...]) -> "SlabGrid":
        """``grid`` solved in the x ``slabs``, one per rank."""
        return cls(grid.dim, grid.resolution, grid.snapshots, grid.t_end, grid.lengths, slabs=slabs)

    @property
    def whole(self) -> Grid:
        """The grid of the whole sample."""
        return Grid(self.dim, self.resolution, self.snapshots, self.t_end, self.lengths)
