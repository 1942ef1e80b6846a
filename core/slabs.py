"""Which part of a sample's grid one process holds: the slab rules of the solver, the store, the
loader, training and predict, in one module (issue 33, item 3).

A slab is a property of the data, not of distribution: the layers, the losses and the store read
it without importing anything that talks to other ranks. Two cuts, one per constraint:

- :func:`bounds`: an axis of ``n`` points in ``parts`` as even as the points allow (the larger
  parts last). How a domain group tiles a sample for training (:class:`DomainTiling`).
- :func:`slabs` / :func:`slab_chunk`: an axis of whole chunks in ``k`` slabs as even as the
  chunks allow (the larger ones first), and the chunk for which that gives ``k`` slabs. What
  ``k`` writers of one sample each write (no chunk has two writers, DESIGN.md): the solver's x
  slabs (``solve --ranks``, the curriculum's ranks per sample), a store group's x chunks for
  them, and predict's domain ranks (``DomainTiling(x_cuts=...)``).

A slab is the box ``[lo, hi)`` of a global ``(T, X, Y, Z)`` grid. Domain ranks split time and
``x`` (DESIGN.md, "Domain parallelism"): a tiling of ``t × x`` ranks gives rank ``(i, j)`` the
``i``-th time range and the ``j``-th ``x`` range, each as even as the axis allows
(:func:`bounds`: uneven splits are legal, 17 points over 4 ranks are 4, 4, 4, 5).

The model appends zero padding to each axis (:func:`padding`). A tiling splits the grid points
and the padding evenly and separately: each rank holds its range of the points and, after them,
its share of the padding (``Slab.padding_part``; on a padded slab the global range
``Slab.tail``, not adjacent to the points). So every rank holds an even share of both halves of
the work: the padded hidden layers and the unpadded lift, projection and losses. The spectral
transform evaluates each rank's DFT rows at the global offsets it holds, contiguous or not.
Pure arithmetic: nothing here talks to other ranks.

A slab held by a rank of a domain group carries that group (``Slab.domain``), as PhysicsNeMo's
``ShardTensor`` carries its spec and device mesh: the losses, halos and symmetries that
communicate read it there, and the layout never travels as a second argument beside the slab.
The group is only carried here, typed loosely, so that nothing here imports the trainer.
"""

import itertools
import math
from dataclasses import dataclass, field, replace
from typing import Any

from pdeladder.errors import UserInputError

#: The axes of ``(T, X, Y, Z)`` a domain group may split, by name.
SPLIT_AXES = {"t": 0, "x": 1}
#: The fewest grid points a rank may hold along a split axis.
MIN_POINTS = 2


def bounds(n: int, parts: int, index: int) -> tuple[int, int]:
    """``[lo, hi)`` of part ``index`` when ``n`` points split into ``parts`` contiguous parts
    whose sizes differ by at most one (the larger ones last)."""
    return index * n // parts, (index + 1) * n // parts


def slab_chunk(n: int, k: int) -> int:
    """The chunk of an axis of ``n`` points that ``k`` writers fill by slabs: the largest that
    :func:`slabs` still cuts into ``k`` slabs (``ceil(n / k)`` when that gives ``k`` chunks;
    a UserInputError when ``k`` exceeds ``n``).

    >>> slab_chunk(9, 4), slab_chunk(17, 2)
    (2, 9)
    """
    if not 1 <= k <= n:
        raise UserInputError(f"{k} ranks for {n} x points: at most one rank per point")
    chunk = -(-n // k)
    while -(-n // chunk) < k:
        chunk -= 1
    return chunk


def slabs(n: int, chunk: int, k: int) -> list[tuple[int, int]]:
    """``k`` slabs ``[lo, hi)`` of an axis of ``n`` points in chunks of ``chunk``: whole chunks
    each, as even as the chunks allow (the first ones get one chunk more), covering the axis.
    What ``k`` writers of one sample each write. Raises ValueError when ``k`` exceeds the
    chunks.

    >>> slabs(17, 4, 2)
    [(0, 12), (12, 17)]
    """
    blocks = -(-n // chunk)
    if not 1 <= k <= blocks:
        raise ValueError(f"{k} slabs of {blocks} chunks ({n} points, {chunk} a chunk)")
    edges = [min(n, chunk * -(-r * blocks // k)) for r in range(k + 1)]
    return list(itertools.pairwise(edges))


def padding(shape: tuple[int, ...], fraction: float) -> tuple[int, ...]:
    """Zero points the model appends to each axis of ``shape``: ``⌈fraction · n⌉`` on axes with
    points, none on singletons."""
    return tuple(math.ceil(fraction * n) if n > 1 else 0 for n in shape)


@dataclass(frozen=True)
class Slab:
    """The box ``[lo, hi)`` of the global grid ``shape`` ``(T, X, Y, Z)`` held by one rank,
    and after it, per axis, the global points ``tail`` (a padded slab's share of the padding:
    the local axis holds ``[lo, hi)`` then ``[tail_lo, tail_hi)``; empty by default).

    ``padding_part``: on a slab a tiling cut, per axis, the part ``[a, b)`` of the padding
    points appended past the axis's end (numbered from 0) that this rank holds after its grid
    points (:meth:`padded`); ``None``: the rank holding an axis's last point holds them all.

    ``domain``: the domain group whose rank holds this slab (a
    :class:`~pdeladder.trainer.distributed.collectives.DomainGroup`, which its ``slab`` gives;
    :meth:`held_by`), or ``None`` for a sample held whole by one process (or a box no group
    holds). Who holds the box, not which box it is: no part of equality, hash or repr.
    """

    shape: tuple[int, int, int, int]
    lo: tuple[int, int, int, int]
    hi: tuple[int, int, int, int]
    padding_part: tuple[tuple[int, int], ...] | None = None
    tail: tuple[tuple[int, int], ...] = ((0, 0),) * 4
    domain: Any = field(default=None, compare=False, repr=False)

    @classmethod
    def whole(cls, shape: tuple[int, ...]) -> "Slab":
        shape = tuple(int(n) for n in shape)
        return cls(shape, (0, 0, 0, 0), shape)

    @property
    def local_shape(self) -> tuple[int, ...]:
        return tuple(
            h - lo + th - tl for lo, h, (tl, th) in zip(self.lo, self.hi, self.tail, strict=True)
        )

    @property
    def is_whole(self) -> bool:
        return self.lo == (0, 0, 0, 0) and self.hi == self.shape

    def held_by(self, domain: Any) -> "Slab":
        """This box, held by a rank of the domain group ``domain`` (``None``: by no group)."""
        return replace(self, domain=domain)

    def is_split(self, axis: int) -> bool:
        """Whether this rank holds only part of ``axis``."""
        return (self.lo[axis], self.hi[axis]) != (0, self.shape[axis])

    def ranges(self, axis: int) -> tuple[tuple[int, int], ...]:
        """The global ``[lo, hi)`` ranges this rank holds along ``axis``, in local order."""
        tail = self.tail[axis]
        return ((self.lo[axis], self.hi[axis]),) + ((tail,) if tail[1] > tail[0] else ())

    def padded(self, pad: tuple[int, ...]) -> "Slab":
        """This rank's slab of the grid with ``pad[a]`` points appended to each axis: its grid
        points, then its part of the padding (all of it on the rank holding the last point,
        without ``padding_part``): adjacent to the points where they end the axis, else a
        ``tail``. Held by the same domain group."""
        shape = tuple(n + p for n, p in zip(self.shape, pad, strict=True))
        parts = self.padding_part or tuple(
            (0, p if h == n else 0) for h, p, n in zip(self.hi, pad, self.shape, strict=True)
        )
        if any(b > p for (_, b), p in zip(parts, pad, strict=True)):
            raise UserInputError(
                f"slab {self} was cut for more padding than {pad}: build it with the model's padding"
            )
        hi, tail = list(self.hi), []
        for a, (n, (first, last)) in enumerate(zip(self.shape, parts, strict=True)):
            if hi[a] == n and first == 0:  # the padding continues the points
                hi[a] += last
                tail.append((0, 0))
            else:
                tail.append((n + first, n + last) if last > first else (0, 0))
        return Slab(shape, self.lo, tuple(hi), tail=tuple(tail), domain=self.domain)


@dataclass(frozen=True)
class DomainTiling:
    """How the ``t · x`` ranks of one domain group tile a sample: rank ``i · x + j`` of the
    group holds time range ``i`` of ``t`` and ``x`` range ``j`` of ``x``."""

    t: int = 1
    x: int = 1
    padding: float = 0.0  # the model's padding fraction: split evenly over the ranks too
    x_cuts: tuple[int, ...] | None = None  # or x cut here (0, .., X), padding on the last rank

    def __post_init__(self):
        if self.t < 1 or self.x < 1:
            raise UserInputError(
                f"domain tiling: ranks per axis must be >= 1, got t={self.t}, x={self.x}"
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
        """Rank ``index``'s slab of the global grid ``shape`` ``(T, X, Y, Z)``: part ``i`` of
        each split axis's points and part ``i`` of its padding (or, with ``x_cuts``, the x range
        they give it and, on the last, all of the x padding). Raises a one-line error when a
        part would hold fewer than :data:`MIN_POINTS` grid points (the stencils' halos come
        from the nearest neighbour)."""
        shape = tuple(int(n) for n in shape)
        pad = padding(shape, self.padding)
        lo, hi = [0, 0, 0, 0], list(shape)
        parts_held = [(0, p) for p in pad]
        for name, part in zip(("t", "x"), self.coordinate(index), strict=True):
            a, parts = SPLIT_AXES[name], (self.t, self.x)[SPLIT_AXES[name]]
            if parts == 1:
                continue
            n = shape[a]
            if name == "x" and self.x_cuts is not None:
                cuts = self.x_cuts
                if len(cuts) != parts + 1 or cuts[0] != 0 or cuts[-1] != n:
                    raise UserInputError(
                        f"domain tiling: x cuts {cuts} do not split 0..{n} in {parts}"
                    )
                spans = list(itertools.pairwise(cuts))
                parts_held[a] = (0, pad[a] if part == parts - 1 else 0)
            else:
                spans = [bounds(n, parts, i) for i in range(parts)]
                parts_held[a] = bounds(pad[a], parts, part)
            short = [h - lo for lo, h in spans if h - lo < MIN_POINTS]
            if short:
                raise UserInputError(
                    f"domain tiling: {n} points along {name} over {parts} ranks leave a rank "
                    f"{short[0]}; each needs at least {MIN_POINTS}: use fewer ranks"
                )
            lo[a], hi[a] = spans[part]
        return Slab(shape, tuple(lo), tuple(hi), padding_part=tuple(parts_held))


def input_slab(x, channels: int, name: str, slab: Slab | None = None) -> Slab:
    """The slab of the global grid that the input ``x`` ``(B, channels, *slab.local_shape)``
    holds (default: its whole grid), or a one-line :class:`UserInputError` naming ``name``, the
    shape it needs and the shape it got."""
    if slab is None and x.ndim == 6:
        slab = Slab.whole(x.shape[2:])
    if x.ndim != 6 or x.shape[1] != channels or tuple(x.shape[2:]) != slab.local_shape:
        grid = "t, x, y, z" if slab is None else ", ".join(map(str, slab.local_shape))
        raise UserInputError(
            f"{name}: input must be (batch, {channels}, {grid}), got {tuple(x.shape)}"
        )
    return slab
