"""Batches for the training loop: solver samples from a store (unsolved samples for
self-improvement are drawn in :mod:`pdeladder.trainer.training.unsolved`). They are pure
functions of the step, so a resumed run sees exactly the batches it would have seen.

Samples are split per group into training and held-out sets by index (the last
``held_out`` fraction of the group's ok samples, at least one when the group has two or more).
Every batch holds samples of one group (one grid); batch ``i`` of an epoch goes to rank
``i mod world`` (see :mod:`pdeladder.trainer.training.processor` for the batch dict).
"""

import itertools
import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from pdeladder.dataset.collate import prefetched
from pdeladder.dataset.format import OK
from pdeladder.dataset.loader import PREFETCH_BATCHES
from pdeladder.dataset.store import open_store, read_samples
from pdeladder.errors import UserInputError
from pdeladder.solvers.grid import Grid
from pdeladder.solvers.registry import get_family
from pdeladder.trainer.distributed.collectives import DomainGroup
from pdeladder.trainer.training.layout import SlotLayout


def split(ok: np.ndarray, held_out: float) -> tuple[np.ndarray, np.ndarray]:
    """Sample indices ``ok`` → (training, held-out)."""
    n_test = math.ceil(held_out * len(ok)) if len(ok) > 1 else 0
    return ok[: len(ok) - n_test], ok[len(ok) - n_test :]


def make_batch(
    layout: SlotLayout,
    family: str,
    grid: Grid,
    fields: np.ndarray,
    params: np.ndarray,
    solved: bool,
) -> dict[str, Any]:
    """Assemble a batch from one family's ``(B, T, C_f, X, Y, Z)`` fields (the whole grid, or
    one rank's slab of it) and ``(B, P_f)`` params."""
    fam = get_family(family)
    b, t, _, *space = fields.shape
    slotted = np.zeros((b, t, len(layout.slots), *space), np.float32)
    slotted[:, :, layout.slot_indices(fam, grid.dim)] = fields
    padded = np.zeros((b, max(layout.n_params, params.shape[1])), np.float32)
    padded[:, : params.shape[1]] = params
    present, predicted = layout.roles(fam, grid.dim)
    return {
        "fields": torch.from_numpy(slotted),
        "present": torch.from_numpy(np.repeat(present[None], b, 0)),
        "predicted": torch.from_numpy(np.repeat(predicted[None], b, 0)),
        "params": torch.from_numpy(padded),
        "params_norm": torch.from_numpy(layout.normalise_params(fam, params)),
        "family": torch.full((b,), layout.family_id(family), dtype=torch.long),
        "solved": torch.full((b,), solved),
        "grid": grid,
    }


class StoreBatches:
    """Batches of solver samples from store groups, sharded over ranks.

    Args (keyword-only): store_url, paths (group paths), layout, batch_size, rank, world, seed,
    held_out (fraction of each group kept out of training), domain.

    ``rank`` and ``world`` count data-parallel groups. With a ``domain`` group that splits
    ``x``, every rank of the group gets the group's batches but reads only its own x slab of
    each sample (:meth:`Group.read_slab`), never the whole sample.
    """

    def __init__(
        self,
        *,
        store_url: str,
        paths: list[str],
        layout: SlotLayout,
        batch_size: int,
        rank: int = 0,
        world: int = 1,
        seed: int = 0,
        held_out: float = 0.1,
        domain: DomainGroup | None = None,
    ):
        if domain is not None and domain.layout.t > 1:
            raise UserInputError("training reads x slabs: a domain layout must not split time")
        self.domain = domain
        if not paths:
            raise UserInputError(f"{store_url}: no sample groups to train on")
        self.layout, self.batch_size = layout, batch_size
        self.rank, self.world, self.seed = rank, world, seed
        store = open_store(store_url)
        self.groups = [store.group(p) for p in paths]
        self._status = [g.status() for g in self.groups]
        self._checksums = [g.checksums() for g in self.groups]
        self._params = [g.params() for g in self.groups]
        self.train, self.test = [], []
        for status in self._status:
            tr, te = split(np.flatnonzero(status == OK), held_out)
            self.train.append(tr)
            self.test.append(te)
        if not any(len(a) + len(b) for a, b in zip(self.train, self.test, strict=True)):
            raise UserInputError(f"{store_url}: groups {paths} hold no ok samples")

    def load(self, gi: int, indices: np.ndarray, solved: bool = True) -> dict[str, Any]:
        """The batch of samples ``indices`` of group ``gi``."""
        g = self.groups[gi]
        if self.domain is not None and self.domain.size > 1:
            slab = self.domain.slab((g.grid.snapshots, *g.grid.shape))
            if slab.holds(1):
                lo, hi = slab.lo[1], slab.hi[1]
                fields = np.stack([g.read_slab(int(i), "x", lo, hi) for i in indices])
            else:  # a rank of padding only reads nothing
                t, c, _, y, z = g.chunks["fields"].shape[1:]
                fields = np.zeros((len(indices), t, c, 0, y, z), np.float32)
        else:
            fields = np.empty((len(indices), *g.chunks["fields"].shape), np.float32)
            samples = [(g, int(i), int(self._checksums[gi][i])) for i in indices]
            read_samples(samples, out=list(fields))
        return make_batch(self.layout, g.family, g.grid, fields, self._params[gi][indices], solved)

    def _epoch(self, epoch: int) -> list[tuple[int, np.ndarray]]:
        rng = np.random.default_rng([self.seed, epoch])
        plan = []
        for gi, idx in enumerate(self.train):
            perm = rng.permutation(idx)
            plan += [
                (gi, perm[i : i + self.batch_size]) for i in range(0, len(perm), self.batch_size)
            ]
        order = rng.permutation(len(plan))
        plan = [plan[i] for i in order]
        per_rank = max(1, len(plan) // self.world)
        plan = (plan * math.ceil(per_rank * self.world / len(plan)))[: per_rank * self.world]
        return plan[self.rank :: self.world]

    def batch(self, step: int) -> dict[str, Any]:
        """This rank's training batch at ``step`` (epochs reshuffled, deterministic)."""
        per_rank = len(self._epoch(0))
        gi, idx = self._epoch(step // per_rank)[step % per_rank]
        return self.load(gi, np.sort(idx))

    def batches(self, start: int) -> Iterator[dict[str, Any]]:
        """``batch(start), batch(start + 1), ...``, read ahead in background threads so that a
        training step rarely waits for the store (see :func:`pdeladder.dataset.collate.prefetched`)."""
        for _, batch in prefetched(self.batch, itertools.count(start), PREFETCH_BATCHES):
            yield batch

    def held_out(self) -> list[tuple[dict[str, Any], float]]:
        """This rank's share of the held-out batches, as (batch, weight) pairs.

        Every rank gets the same number of batches (FSDP runs collectives in each forward):
        ranks short of batches repeat one with weight 0.
        """
        plan = [
            (gi, idx[i : i + self.batch_size])
            for gi, idx in enumerate(self.test)
            for i in range(0, len(idx), self.batch_size)
        ]
        if not plan:
            return []
        mine = plan[self.rank :: self.world]
        rounds = math.ceil(len(plan) / self.world)
        out = [(self.load(gi, idx), 1.0) for gi, idx in mine]
        filler = mine[0] if mine else plan[0]
        out += [(self.load(*filler), 0.0)] * (rounds - len(mine))
        return out
