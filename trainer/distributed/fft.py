"""The spectral transform of a sample split across the ranks of a domain group.

The kept Fourier block is small and does not grow with the grid (DESIGN.md): each rank computes
its slab's contribution to the global kept block (:class:`~pdeladder.trainer.layers.fft.LocalFFT`
on a slab: the DFT rows of its own global offsets on a split axis, the pruned local transform on
the others). One all-reduce sums them, split in its two halves around the mixing: a
reduce-scatter hands each rank the sum of its share of the ``M`` kept modes (``s = ⌈M/k⌉`` rows
of the row-major block, padded with zero rows to ``k·s``: a rank's share may be zero rows only,
and it still takes part), which the rank alone mixes with its weights; an all-gather of the mixed
shares gives every rank the whole mixed block, which it evaluates at its own points (the
inverse, no communication). So the mixing, its kept weights and their gradient are computed
once per group, not on every rank; a weight's gradient on a rank covers its share's modes only,
and the parameters' reduction over the domain ranks
(:mod:`~pdeladder.trainer.distributed.parallelize`) sums the shares once. Per forward transform a
rank hands the reduce-scatter ``8 · B · C · k⌈M/k⌉`` bytes (complex64, rows padded to ``k``
equal shares) and the all-gather ``1/k`` of that: a ring all-reduce's ``2 (k-1)/k`` of the
block on the wire, whatever the grid.
"""

import math

import torch

from pdeladder.slabs import Slab
from pdeladder.trainer.distributed.collectives import (
    DomainGroup,
    gather_shares,
    replayed,
    scatter_sum,
)
from pdeladder.trainer.layers.fft import LocalFFT, ModeSelection, SpectralTransform


def share_rows(modes: int, ranks: int) -> int:
    """Rows of each rank's share of ``modes`` kept modes over ``ranks`` domain ranks."""
    return -(-modes // ranks)


class SlabFFT(SpectralTransform):
    """:class:`LocalFFT` on this rank's slab; its kept block summed over the domain group, each
    rank receiving its share of the modes (:meth:`modes`) and handing back its mixed share."""

    def __init__(self, domain: DomainGroup):
        self.domain = domain
        self.local = LocalFFT()

    def rows(self, sel: ModeSelection) -> int:
        """Rows of one share, ``s = ⌈M/k⌉``."""
        return share_rows(math.prod(sel.block_shape), self.domain.size)

    def checkpoint_contexts(self):
        """A checkpointed stage's recomputation reuses the forward pass's collectives."""
        return replayed()

    def modes(self, sel: ModeSelection) -> range:
        s = self.rows(sel)
        return range(self.domain.index * s, (self.domain.index + 1) * s)

    def forward(
        self, x: torch.Tensor, sel: ModeSelection, slab: Slab | None = None
    ) -> torch.Tensor:
        partial = self.local.forward(x, sel, slab).permute(2, 0, 1)  # (M, B, C): this slab's
        rows = self.domain.size * self.rows(sel) - partial.shape[0]
        padded = torch.cat([partial, partial.new_zeros(rows, *partial.shape[1:])])  # (k·s, B, C)
        return scatter_sum(padded, self.domain).permute(1, 2, 0)  # (B, C, s): this share's sum

    def inverse(
        self, coeffs: torch.Tensor, sel: ModeSelection, slab: Slab | None = None
    ) -> torch.Tensor:
        block = gather_shares(coeffs.permute(2, 0, 1), self.domain)  # (k·s, B, C)
        block = block[: math.prod(sel.block_shape)]  # (M, B, C): the padding rows dropped
        return self.local.inverse(block.permute(1, 2, 0), sel, slab)
