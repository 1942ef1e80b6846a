"""The spectral transform of a sample split across the ranks of a domain group.

The kept Fourier block is small and does not grow with the grid (DESIGN.md): each rank computes
its slab's contribution to the global kept block (:class:`~pdeladder.trainer.layers.fft.LocalFFT`
on a slab: the DFT rows of its own global offsets on a split axis, the pruned local transform on
the others), and one all-reduce sums them. Who mixes the summed block is :data:`Mixing`:

- ``"whole"``: every rank mixes the whole block, with all of each layer's kept weights, and
  evaluates it at its own points (the inverse, no communication). One all-reduce per layer in
  the forward pass and one in the backward (:func:`sum_partials`); the mixing is done ``k``
  times.
- ``"share"``: the all-reduce split in its two halves around the mixing: a reduce-scatter hands
  each rank the sum of its share of the ``M`` kept modes (``s = ⌈M/k⌉`` rows of the row-major
  block, padded with zero rows to ``k·s``: a rank's share may be zero rows only, and it still
  takes part), which the rank alone mixes with its weights; an all-gather of the mixed shares
  gives every rank the whole mixed block. The mixing, its kept weights and their gradient are
  computed once per group, at two collectives per layer and pass instead of one.

Either way a weight's gradient on a rank is a partial one (its points' or its share's), and the
parameters' reduction over the domain ranks
(:mod:`~pdeladder.trainer.distributed.parallelize`) sums them once. Per forward transform a rank
hands the all-reduce ``8 · B · C · M`` bytes (complex64; ``k⌈M/k⌉`` rows when shared): a ring
all-reduce's ``2 (k-1)/k`` of the block on the wire, whatever the grid.
:func:`~pdeladder.trainer.distributed.choose.mixing_for` chooses.
"""

import math
from typing import Literal

import torch

from pdeladder.slabs import Slab
from pdeladder.trainer.distributed.collectives import (
    DomainGroup,
    gather_shares,
    replayed,
    scatter_sum,
    sum_partials,
)
from pdeladder.trainer.layers.fft import LocalFFT, ModeSelection, SpectralTransform

#: Who mixes a split sample's kept block: every rank all of it, or each rank its share.
Mixing = Literal["whole", "share"]


def share_rows(modes: int, ranks: int) -> int:
    """Rows of each rank's share of ``modes`` kept modes over ``ranks`` domain ranks."""
    return -(-modes // ranks)


def mixing_shares(mixing: Mixing, ranks: int) -> int:
    """The shares the kept modes are mixed in on ``ranks`` domain ranks: one per rank, or 1
    (every rank mixes them all)."""
    return ranks if mixing == "share" else 1


class SlabFFT(SpectralTransform):
    """:class:`LocalFFT` on this rank's slab; its kept block summed over the domain group, and
    mixed by every rank whole or by each rank its share (``mixing``)."""

    def __init__(self, domain: DomainGroup, mixing: Mixing):
        self.domain = domain
        self.mixing = mixing
        self.local = LocalFFT()

    def rows(self, sel: ModeSelection) -> int:
        """Rows this rank mixes: ``M``, or one share's ``s = ⌈M/k⌉``."""
        return share_rows(math.prod(sel.block_shape), mixing_shares(self.mixing, self.domain.size))

    def checkpoint_contexts(self):
        """A checkpointed stage's recomputation reuses the forward pass's collectives."""
        return replayed()

    def modes(self, sel: ModeSelection) -> range:
        s = self.rows(sel)
        first = self.domain.index * s if self.mixing == "share" else 0
        return range(first, first + s)

    def forward(
        self, x: torch.Tensor, sel: ModeSelection, slab: Slab | None = None
    ) -> torch.Tensor:
        partial = self.local.forward(x, sel, slab)  # (B, C, M): this slab's
        if self.mixing == "whole":
            return sum_partials(partial, self.domain)
        partial = partial.permute(2, 0, 1)  # (M, B, C)
        rows = self.domain.size * self.rows(sel) - partial.shape[0]
        padded = torch.cat([partial, partial.new_zeros(rows, *partial.shape[1:])])  # (k·s, B, C)
        return scatter_sum(padded, self.domain).permute(1, 2, 0)  # (B, C, s): this share's sum

    def inverse(
        self, coeffs: torch.Tensor, sel: ModeSelection, slab: Slab | None = None
    ) -> torch.Tensor:
        if self.mixing == "share":
            block = gather_shares(coeffs.permute(2, 0, 1), self.domain)  # (k·s, B, C)
            block = block[: math.prod(sel.block_shape)]  # (M, B, C): the padding rows dropped
            coeffs = block.permute(1, 2, 0)
        return self.local.inverse(coeffs, sel, slab)
