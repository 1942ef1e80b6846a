"""Domains other than the unit box, as data: a bounding box with physical lengths and the
circular obstacles cut out of it, validated, and drawn from a seed (pure numpy; no DOLFINx).

Lengths are in metres. The box is ``[0, L_0] x [0, L_1]`` (x ``[0, L_2]`` in 3D, where a
:class:`Circle` is a sphere); its regular sampling grid has ``resolution`` points per axis at
``x_i = i L_a / (resolution - 1)``, both walls included, as :class:`~pdeladder.solvers.grid.Grid`
places them on the unit box.
"""

import math
from dataclasses import dataclass

import numpy as np

from pdeladder.errors import UserInputError

#: Grid spacings across the smallest obstacle's diameter for a grid to resolve it
#: (:meth:`Domain.require_resolution`): at 4, the obstacle covers about a dozen grid points.
POINTS_PER_DIAMETER = 4


@dataclass(frozen=True)
class Circle:
    """A circular obstacle (a sphere in 3D): ``centre`` in metres, one coordinate per axis of
    the box, and ``radius`` in metres."""

    centre: tuple[float, ...]
    radius: float

    def distance(self, other: "Circle") -> float:
        """The clearance between the two circles' edges in metres (negative where they
        overlap)."""
        return math.dist(self.centre, other.centre) - self.radius - other.radius


@dataclass(frozen=True)
class Domain:
    """A bounding box with obstacles cut out of it.

    Attributes:
        lengths: the box's edge lengths ``(L_0, L_1)`` in metres (three in 3D).
        obstacles: the obstacles, each inside the box.
        gap: the least clearance in metres that every obstacle keeps from every other one and
            from the box's walls; obstacles never touch (a zero clearance is refused too).

    Raises :class:`~pdeladder.errors.UserInputError` (one line) when an obstacle leaves the box,
    two overlap or come closer than ``gap``.
    """

    lengths: tuple[float, ...]
    obstacles: tuple[Circle, ...] = ()
    gap: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "lengths", tuple(float(a) for a in self.lengths))
        object.__setattr__(self, "obstacles", tuple(self.obstacles))
        if len(self.lengths) not in (2, 3) or not all(a > 0 for a in self.lengths):
            raise UserInputError(f"box lengths must be 2 or 3 positive numbers, got {self.lengths}")
        if not self.gap >= 0:
            raise UserInputError(f"the gap between obstacles must be >= 0 m, got {self.gap}")
        scale = max(self.lengths)
        for i, c in enumerate(self.obstacles):
            if len(c.centre) != self.dim or not c.radius > 0:
                raise UserInputError(
                    f"obstacle {i}: a {self.dim}D centre and a positive radius are needed, "
                    f"got centre {c.centre}, radius {c.radius}"
                )
            what = _too_close(min(self._wall_clearance(c)), self.gap, scale, "crosses")
            if what:
                raise UserInputError(
                    f"obstacle {i} (centre {c.centre} m, radius {c.radius} m) {what} the walls "
                    f"of the {self._box()} box; keep it at least {self.gap} m inside"
                )
        for i in range(len(self.obstacles)):
            for j in range(i):
                d = self.obstacles[i].distance(self.obstacles[j])
                what = _too_close(d, self.gap, scale, "overlaps")
                if what:
                    raise UserInputError(
                        f"obstacle {i} {what} obstacle {j}; obstacles must be at least "
                        f"{self.gap} m apart (and not touch)"
                    )

    def _wall_clearance(self, c: Circle) -> list[float]:
        return [
            d
            for x, length in zip(c.centre, self.lengths, strict=True)
            for d in (x - c.radius, length - x - c.radius)
        ]

    def _box(self) -> str:
        return " x ".join(f"{a:g}" for a in self.lengths) + " m"

    @property
    def dim(self) -> int:
        return len(self.lengths)

    def spacing(self, resolution: int) -> tuple[float, ...]:
        """Grid spacing along each axis in metres: ``L_a / (resolution - 1)``."""
        return tuple(a / (resolution - 1) for a in self.lengths)

    def points(self, resolution: int) -> np.ndarray:
        """The grid's points, float64 ``(3, X, Y, Z)`` in metres (``Z = 1``, ``z = 0`` in 2D),
        the layout of :meth:`Grid.mesh_grid`."""
        axes = [np.linspace(0.0, a, resolution) for a in self.lengths]
        axes += [np.zeros(1)] * (3 - self.dim)
        return np.stack(np.meshgrid(*axes, indexing="ij"))

    def min_resolution(self) -> int:
        """The least points per axis whose coarsest spacing puts :data:`POINTS_PER_DIAMETER`
        spacings across the smallest obstacle (3, the least of any grid, without obstacles)."""
        if not self.obstacles:
            return 3
        diameter = 2 * min(c.radius for c in self.obstacles)
        return max(3, math.ceil(1 + POINTS_PER_DIAMETER * max(self.lengths) / diameter - 1e-9))

    def unresolved(self, resolution: int) -> str | None:
        """Why a grid of ``resolution`` points per axis does not resolve the smallest obstacle
        (:meth:`min_resolution`), naming the resolution that would; None when it does."""
        need = self.min_resolution()
        if resolution >= need:
            return None
        r = min(c.radius for c in self.obstacles)
        return (
            f"grid {resolution} cannot resolve an obstacle of radius {r:g} m in the "
            f"{self._box()} box; use a resolution of at least {need}"
        )

    def require_resolution(self, resolution: int) -> None:
        """Raise :class:`UserInputError` with :meth:`unresolved`'s reason, if any."""
        if why := self.unresolved(resolution):
            raise UserInputError(why)

    def area(self) -> float:
        """The domain's area (2D) or volume (3D): the box's less the obstacles', in m² (m³)."""
        ball = math.pi if self.dim == 2 else 4 * math.pi / 3
        return math.prod(self.lengths) - sum(ball * c.radius**self.dim for c in self.obstacles)


def _too_close(clearance: float, gap: float, scale: float, crossing: str) -> str | None:
    """How a ``clearance`` in metres falls short of ``gap``: ``crossing`` (negative),
    ``"touches"`` (zero, to rounding of the box's size ``scale``) or ``"is ... m from"``;
    None where it does not."""
    if clearance < -1e-12 * scale:
        return crossing
    if clearance <= 1e-12 * scale:
        return "touches"
    return f"is {clearance:.4g} m from" if clearance < gap else None


def draw_obstacles(
    rng: np.random.Generator | int,
    lengths: tuple[float, ...],
    count: int,
    radius: tuple[float, float],
    *,
    gap: float = 0.0,
    centres: tuple[tuple[float, float], ...] | None = None,
    tries: int = 1000,
) -> Domain:
    """A domain of ``count`` obstacles drawn at random in the box of ``lengths`` (metres).

    Each obstacle's radius is uniform in ``radius`` ``(low, high)``, then its centre uniform
    where it keeps ``gap`` from the walls (and inside ``centres``, per axis ``(low, high)``, when
    given); an obstacle that comes closer than ``gap`` to an earlier one is drawn again, at most
    ``tries`` draws in all. The same ``rng`` state (or seed) gives the same domain.

    Raises :class:`UserInputError` (one line) when the obstacles cannot be placed in ``tries``
    draws.
    """
    rng = np.random.default_rng(rng) if isinstance(rng, int) else rng
    low, high = radius
    if not 0 < low <= high:
        raise UserInputError(f"obstacle radii must satisfy 0 < low <= high, got {radius}")
    region = centres or tuple((0.0, a) for a in lengths)
    if len(region) != len(lengths):
        raise UserInputError(f"centres needs one (low, high) per axis, got {region}")
    placed: list[Circle] = []
    draws = 0
    while len(placed) < count:
        if draws == tries:
            raise UserInputError(
                f"placed {len(placed)} of {count} obstacles of radius {low:g}-{high:g} m "
                f"{gap:g} m apart in the {' x '.join(f'{a:g}' for a in lengths)} m box in "
                f"{tries} draws; use fewer or smaller obstacles or a smaller gap"
            )
        draws += 1
        r = float(rng.uniform(low, high))
        lo = [max(r + gap, a) for a, _ in region]
        hi = [min(length - r - gap, b) for length, (_, b) in zip(lengths, region, strict=True)]
        centre = tuple(float(rng.uniform(a, b)) for a, b in zip(lo, hi, strict=True))
        if any(a >= b for a, b in zip(lo, hi, strict=True)):
            continue  # this radius does not fit the region
        c = Circle(centre, r)
        if not any(_too_close(c.distance(d), gap, max(lengths), "overlaps") for d in placed):
            placed.append(c)
    return Domain(tuple(lengths), tuple(placed), gap)
