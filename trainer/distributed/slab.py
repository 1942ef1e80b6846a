"""Which part of a sample's grid one rank holds: a :class:`Slab`, and how a domain group of
ranks tiles the grid (:class:`DomainLayout`).

A slab is the box ``[lo, hi)`` of a global ``(T, X, Y, Z)`` grid. Domain ranks split time and
``x`` (DESIGN.md, "Domain parallelism"): a layout of ``t × x`` ranks gives rank ``(i, j)`` the
``i``-th time range and the ``j``-th ``x`` range, each as even as the axis allows
(:func:`bounds`: uneven splits are legal, 17 points over 4 ranks are 4, 4, 4, 5). Pure
arithmetic: nothing here talks to other ranks.
"""

from dataclasses import dataclass

from pdeladder.errors import UserInputError

#: The axes of ``(T, X, Y, Z)`` a domain group may split, by name.
SPLIT_AXES = {"t": 0, "x": 1}


def bounds(n: int, parts: int, index: int) -> tuple[int, int]:
    """``[lo, hi)`` of part ``index`` when ``n`` points split into ``parts`` contiguous parts
    whose sizes differ by at most one (the larger ones last)."""
    return index * n // parts, (index + 1) * n // parts


@dataclass(frozen=True)
class Slab:
    """The box ``[lo, hi)`` of the global grid ``shape`` ``(T, X, Y, Z)`` held by one rank."""

    shape: tuple[int, int, int, int]
    lo: tuple[int, int, int, int]
    hi: tuple[int, int, int, int]

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
        """The slab of the grid with ``pad[a]`` points appended to each axis: the rank holding
        an axis's last point also holds that axis's padding."""
        hi = tuple(h + p if h == n else h for h, p, n in zip(self.hi, pad, self.shape, strict=True))
        return Slab(tuple(n + p for n, p in zip(self.shape, pad, strict=True)), self.lo, hi)


@dataclass(frozen=True)
class DomainLayout:
    """How the ``t · x`` ranks of one domain group tile a sample: rank ``i · x + j`` of the
    group holds time range ``i`` of ``t`` and ``x`` range ``j`` of ``x``."""

    t: int = 1
    x: int = 1

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
        """Rank ``index``'s slab of the global grid ``shape`` ``(T, X, Y, Z)``."""
        shape = tuple(int(n) for n in shape)
        for name, parts in (("t", self.t), ("x", self.x)):
            n = shape[SPLIT_AXES[name]]
            if parts > n:
                raise UserInputError(
                    f"domain layout: {parts} ranks along {name} but the sample has {n} points there"
                )
        it, ix = self.coordinate(index)
        (t0, t1), (x0, x1) = bounds(shape[0], self.t, it), bounds(shape[1], self.x, ix)
        return Slab(shape, (t0, x0, 0, 0), (t1, x1, shape[2], shape[3]))
