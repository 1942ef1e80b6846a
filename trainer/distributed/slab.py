"""Which part of a sample's grid one rank holds: a :class:`Slab`, and how a domain group of
ranks tiles the grid (:class:`DomainLayout`).

A slab is the box ``[lo, hi)`` of a global ``(T, X, Y, Z)`` grid. Domain ranks split time and
``x`` (DESIGN.md, "Domain parallelism"): a layout of ``t × x`` ranks gives rank ``(i, j)`` the
``i``-th time range and the ``j``-th ``x`` range, each as even as the axis allows
(:func:`bounds`: uneven splits are legal, 17 points over 4 ranks are 4, 4, 4, 5).

The model appends zero padding to each axis (:func:`padding`). The split is even over the
*padded* axis, so no rank holds much more than its share of the hidden activations: the ranks
near an axis's end hold fewer grid points and the padding past the end (``Slab.padded_lo``,
``Slab.padded_hi``), and with many ranks the last ones hold padding only (no data, no loss
terms, but their part of every hidden layer).
Pure arithmetic: nothing here talks to other ranks.
"""

import itertools
import math
from dataclasses import dataclass

from pdeladder.errors import UserInputError

#: The axes of ``(T, X, Y, Z)`` a domain group may split, by name.
SPLIT_AXES = {"t": 0, "x": 1}
#: The fewest grid points a rank may hold along a split axis.
MIN_POINTS = 2


def bounds(n: int, parts: int, index: int) -> tuple[int, int]:
    """``[lo, hi)`` of part ``index`` when ``n`` points split into ``parts`` contiguous parts
    whose sizes differ by at most one (the larger ones last)."""
    return index * n // parts, (index + 1) * n // parts


def padding(shape: tuple[int, ...], fraction: float) -> tuple[int, ...]:
    """Zero points the model appends to each axis of ``shape``: ``⌈fraction · n⌉`` on axes with
    points, none on singletons."""
    return tuple(math.ceil(fraction * n) if n > 1 else 0 for n in shape)


@dataclass(frozen=True)
class Slab:
    """The box ``[lo, hi)`` of the global grid ``shape`` ``(T, X, Y, Z)`` held by one rank.

    ``padded_lo``, ``padded_hi``: this rank's part of the padded grid, when a layout cut the
    padded axes evenly (:meth:`DomainLayout.slab`; a rank past the grid's end holds padding
    only, and ``lo = hi`` = the axis's length there); ``None``: the rank holding an axis's last
    point holds all of its padding.
    """

    shape: tuple[int, int, int, int]
    lo: tuple[int, int, int, int]
    hi: tuple[int, int, int, int]
    padded_hi: tuple[int, int, int, int] | None = None
    padded_lo: tuple[int, int, int, int] | None = None

    @classmethod
    def whole(cls, shape: tuple[int, ...]) -> "Slab":
        shape = tuple(int(n) for n in shape)
        return cls(shape, (0, 0, 0, 0), shape)

    @property
    def local_shape(self) -> tuple[int, ...]:
        return tuple(h - lo for lo, h in zip(self.lo, self.hi, strict=True))

    @property
    def is_whole(self) -> bool:
        return self.lo == (0, 0, 0, 0) and self.hi == self.shape

    def is_split(self, axis: int) -> bool:
        """Whether this rank holds only part of ``axis``."""
        return (self.lo[axis], self.hi[axis]) != (0, self.shape[axis])

    def padded(self, pad: tuple[int, ...]) -> "Slab":
        """This rank's slab of the grid with ``pad[a]`` points appended to each axis."""
        shape = tuple(n + p for n, p in zip(self.shape, pad, strict=True))
        if self.padded_hi is None:
            hi = tuple(
                h + p if h == n else h for h, p, n in zip(self.hi, pad, self.shape, strict=True)
            )
            return Slab(shape, self.lo, hi)
        if any(h > n for h, n in zip(self.padded_hi, shape, strict=True)):
            raise UserInputError(
                f"slab {self} was cut for more padding than {pad}: build it with the model's padding"
            )
        return Slab(shape, self.padded_lo or self.lo, self.padded_hi)

    def holds(self, axis: int) -> bool:
        """Whether this rank holds grid points along ``axis`` (not padding only)."""
        return self.hi[axis] > self.lo[axis]


@dataclass(frozen=True)
class DomainLayout:
    """How the ``t · x`` ranks of one domain group tile a sample: rank ``i · x + j`` of the
    group holds time range ``i`` of ``t`` and ``x`` range ``j`` of ``x``."""

    t: int = 1
    x: int = 1
    padding: float = 0.0  # the model's padding fraction: the padded axes are cut evenly
    x_cuts: tuple[int, ...] | None = None  # or x cut here (0, .., X), padding on the last rank

    def __post_init__(self):
        if self.t < 1 or self.x < 1:
            raise UserInputError(
                f"domain layout: ranks per axis must be >= 1, got t={self.t}, x={self.x}"
            )

    @property
    def size(self) -> int:
        return self.t * self.x

    def coordinate(self, index: int) -> tuple[int, int]:
        """``(time part, x part)`` of the group's rank ``index``."""
        return divmod(index, self.x)

    def index(self, t_part: int, x_part: int) -> int:
        return t_part * self.x + x_part

    def slab(self, shape: tuple[int, ...], index: int) -> Slab:
        """Rank ``index``'s slab of the global grid ``shape`` ``(T, X, Y, Z)``: part ``i`` of the
        padded axis, less the padding (or, with ``x_cuts``, the x range they give it); parts
        past the grid's end hold padding only. Raises a one-line error when a part would hold
        some but fewer than :data:`MIN_POINTS` grid points (the stencils' halos come from the
        nearest neighbour)."""
        shape = tuple(int(n) for n in shape)
        pad = padding(shape, self.padding)
        lo, hi, padded_hi = (
            [0, 0, 0, 0],
            list(shape),
            [n + p for n, p in zip(shape, pad, strict=True)],
        )
        padded_lo = [0, 0, 0, 0]
        for name, part in zip(("t", "x"), self.coordinate(index), strict=True):
            a, parts = SPLIT_AXES[name], (self.t, self.x)[SPLIT_AXES[name]]
            if parts == 1:
                continue
            n = shape[a]
            if name == "x" and self.x_cuts is not None:
                cuts = self.x_cuts
                if len(cuts) != parts + 1 or cuts[0] != 0 or cuts[-1] != n:
                    raise UserInputError(
                        f"domain layout: x cuts {cuts} do not split 0..{n} in {parts}"
                    )
                held = [hi - lo for lo, hi in itertools.pairwise(cuts)]
            else:  # grid points of each part of the padded axis
                held = [
                    min(bounds(n + pad[a], parts, i)[1], n) - bounds(n + pad[a], parts, i)[0]
                    for i in range(parts)
                ]
            short = [h for h in held if 0 < h < MIN_POINTS] or [h for h in held[:1] if h <= 0]
            if short:
                raise UserInputError(
                    f"domain layout: {n} points along {name} (plus {pad[a]} of padding) over "
                    f"{parts} ranks leave a rank {max(short[0], 0)}; each needs none or at least "
                    f"{MIN_POINTS}: use another number of ranks"
                )
            if name == "x" and self.x_cuts is not None:
                lo[a], hi[a] = self.x_cuts[part], self.x_cuts[part + 1]
                padded_lo[a], padded_hi[a] = lo[a], hi[a] + pad[a] if hi[a] == n else hi[a]
                continue
            padded_lo[a], padded_hi[a] = bounds(n + pad[a], parts, part)
            lo[a], hi[a] = min(padded_lo[a], n), min(padded_hi[a], n)
        return Slab(shape, tuple(lo), tuple(hi), tuple(padded_hi), tuple(padded_lo))
