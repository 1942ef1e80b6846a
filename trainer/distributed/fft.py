"""The spectral transform of a sample split across the ranks of a domain group.

The kept Fourier block is small and does not grow with the grid (DESIGN.md): each rank computes
its slab's contribution to the global kept block (:class:`~pdeladder.trainer.layers.fft.LocalFFT`
on a slab: the DFT rows of its own global offsets on a split axis, the pruned local transform on
the others) and one all-reduce sums them. The inverse needs no communication: every rank holds
the whole kept block and evaluates it at its own points. Per forward transform a rank hands
``8 · B · C · M`` bytes (complex64, ``M`` kept modes) to the all-reduce, whatever the grid.
"""

import torch

from pdeladder.trainer.distributed.collectives import DomainGroup, sum_partials
from pdeladder.trainer.distributed.slab import Slab
from pdeladder.trainer.layers.fft import LocalFFT, ModeSelection, SpectralTransform


class SlabFFT(SpectralTransform):
    """:class:`LocalFFT` on this rank's slab, its kept block summed over the domain group."""

    def __init__(self, domain: DomainGroup):
        self.domain = domain
        self.local = LocalFFT()

    def forward(
        self, x: torch.Tensor, sel: ModeSelection, slab: Slab | None = None
    ) -> torch.Tensor:
        return sum_partials(self.local.forward(x, sel, slab), self.domain)

    def inverse(
        self, block: torch.Tensor, sel: ModeSelection, slab: Slab | None = None
    ) -> torch.Tensor:
        return self.local.inverse(block, sel, slab)
