r"""The symmetries of the unit box, acting on trajectories (pure torch; no DOLFINx).

An element maps the point :math:`x` to :math:`x'` with :math:`x'_a = x_{p(a)}`, or
:math:`1 - x_{p(a)}` on a reflected axis :math:`a`: the spatial axes permuted by :math:`p`, then
some reflected. A scalar field moves with the points, :math:`u'(x') = u(x)`; a vector field also
turns with them, :math:`v'_a(x') = s_a v_{p(a)}(x)` with :math:`s_a = -1` on a reflected axis.
Time is untouched. In ``d`` dimensions the group has :math:`2^d d!` elements (2, 8 and 48).

For a family whose equation, walls and random draws are alike in every direction
(:attr:`~pdeladder.solvers.family.Family.box_symmetric`), or along some axes
(:meth:`~pdeladder.solvers.family.Family.symmetric_axes`: the subgroup that moves only them), the
image of a solution is a solution with the same parameters, and its residual is the image of the solution's residual (same norm):
the family contract's ``symmetry`` check (:mod:`pdeladder.solvers.checks`) tests this on a
family's solver data. The trainer uses them to augment its batches
(:mod:`pdeladder.trainer.training.augment`).
"""

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from pdeladder.solvers.family import Family


@dataclass(frozen=True)
class BoxSymmetry:
    """One element of the unit box's symmetry group in ``len(perm)`` dimensions.

    Attributes:
        perm: new axis ``a`` is old axis ``perm[a]`` (a permutation of ``range(dim)``).
        flips: whether new axis ``a`` is reflected, ``x'_a = 1 - x_{perm[a]}``.
    """

    perm: tuple[int, ...]
    flips: tuple[bool, ...]

    @property
    def dim(self) -> int:
        return len(self.perm)

    @property
    def is_identity(self) -> bool:
        return self.perm == tuple(range(self.dim)) and not any(self.flips)

    def inverse(self) -> "BoxSymmetry":
        """The element that undoes this one: old axis ``perm[a]`` is new axis ``a``."""
        perm, flips = [0] * self.dim, [False] * self.dim
        for a, old in enumerate(self.perm):
            perm[old], flips[old] = a, self.flips[a]
        return BoxSymmetry(tuple(perm), tuple(flips))

    def channel_map(
        self, channels: Sequence[str], vectors: Sequence[Sequence[str]]
    ) -> tuple[list[int], list[float]]:
        """``(source, sign)`` per channel of ``channels``: new channel ``i`` is ``sign[i]`` times
        old channel ``source[i]``. ``vectors`` are channel-name tuples whose component ``a`` lies
        along axis ``a`` (their first ``dim`` components are moved); other channels are scalars."""
        source, sign = list(range(len(channels))), [1.0] * len(channels)
        for vector in vectors:
            components = [channels.index(c) for c in vector[: self.dim] if c in channels]
            if not components:
                continue
            if len(components) != self.dim:
                raise ValueError(f"vector {vector} has {len(components)} of {self.dim} components")
            for a, c in enumerate(components):
                source[c] = components[self.perm[a]]
                sign[c] = -1.0 if self.flips[a] else 1.0
        return source, sign

    def apply(
        self,
        fields: torch.Tensor,
        channels: Sequence[str],
        vectors: Sequence[Sequence[str]],
        channel_axis: int,
    ) -> torch.Tensor:
        """The image of ``fields``, whose last three axes are ``(X, Y, Z)`` (the first ``dim`` of
        them with points) and whose axis ``channel_axis`` holds ``channels``: a new tensor of
        the same shape (the grid is a cube, so a permutation keeps it)."""
        space = fields.ndim - 3
        order = list(range(fields.ndim))
        for a, old in enumerate(self.perm):
            order[space + a] = space + old
        out = fields.permute(order)
        if flipped := [space + a for a, f in enumerate(self.flips) if f]:
            out = out.flip(flipped)
        source, sign = self.channel_map(channels, vectors)
        if source != list(range(len(channels))) or any(s < 0 for s in sign):
            index = torch.tensor(source, device=fields.device)
            shape = [1] * fields.ndim
            shape[channel_axis] = len(sign)
            scale = torch.tensor(sign, dtype=fields.dtype, device=fields.device).view(shape)
            out = out.index_select(channel_axis, index) * scale
        return out.contiguous()


def box_group(dim: int) -> list[BoxSymmetry]:
    """Every element of the ``dim``-dimensional box's symmetry group, the identity first."""
    return [
        BoxSymmetry(perm, flips)
        for perm in itertools.permutations(range(dim))
        for flips in itertools.product((False, True), repeat=dim)
    ]


def family_group(family: Family, dim: int) -> list[BoxSymmetry]:
    """The elements of :func:`box_group` that ``family`` keeps in ``dim`` dimensions, the
    identity first: those that move only its :meth:`~Family.symmetric_axes` (reflected, or
    permuted among themselves), all of them for a box-symmetric family."""
    axes = family.symmetric_axes(dim)
    return [
        g
        for g in box_group(dim)
        if all(g.perm[a] == a and not g.flips[a] for a in range(dim) if a not in axes)
    ]
