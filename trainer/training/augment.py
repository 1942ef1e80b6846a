"""Symmetry augmentation of training batches: each solved sample of a box-symmetric family
(:attr:`~pdeladder.solvers.family.Family.box_symmetric`) is moved by one element of the unit
box's symmetry group (:mod:`pdeladder.solvers.symmetry`: reflections and axis permutations,
vectors turned with the points), an exact solution with the same parameters. A 2D group of 128
samples trains as up to 1024 distinct trajectories (benchmarks/RESULTS.md, "Symmetry augmentation
and symmetrized prediction").

The element of sample ``i`` at ``step`` on data-parallel rank ``rank`` is a pure function of
``(seed, step, rank, i)``: a resumed run sees the batches it would have seen, and the ranks of
one domain group (one data-parallel rank) draw the same elements from the whole group and move
their x slabs of a sample together (:func:`~pdeladder.trainer.distributed.symmetry.move`), so
that a run split over domain ranks trains on the batches of one rank. The held-out scores and the
self-improvement phase's unsolved draws are never moved; evaluation and prediction can average
the model over the group instead (:func:`~pdeladder.trainer.inference.predict`).
"""

from typing import Any

import numpy as np

from pdeladder.solvers.registry import get_family
from pdeladder.solvers.symmetry import BoxSymmetry, family_group
from pdeladder.trainer.distributed.collectives import DomainGroup
from pdeladder.trainer.processor import DataProcessor

#: Mixed into the augmentation's random stream, so that it is not the batch order's.
STREAM = 0x5EED


class Augmentation:
    """Moves the solved samples of a batch (the loader's dict) by drawn box symmetries; with a
    ``domain`` group, the batch holds this rank's x slab of each sample (the loader's)."""

    def __init__(
        self, processor: DataProcessor, seed: int, rank: int, domain: DomainGroup | None = None
    ):
        self.processor, self.seed, self.rank, self.domain = processor, seed, rank, domain

    def elements(self, family: str, dim: int, step: int, batch: int) -> list[BoxSymmetry]:
        """The elements drawn for the ``batch`` samples of ``family`` at ``step``."""
        group = family_group(get_family(family), dim)
        rng = np.random.default_rng([self.seed, STREAM, step, self.rank])
        return [group[i] for i in rng.integers(len(group), size=batch)]

    def __call__(self, batch: dict[str, Any], step: int) -> dict[str, Any]:
        """``batch`` (one group: one family and grid) with every sample moved
        (:meth:`DataProcessor.moved`)."""
        family, grid = self.processor.family(batch).name, batch["grid"]
        moves = self.elements(family, grid.dim, step, len(batch["fields"]))
        if all(g.is_identity for g in moves):
            return batch
        slab = self.domain.slab(grid.space_time) if self.domain else None
        return self.processor.moved(batch, moves, slab)
