"""Batches for the training loop: solver samples from a store, and unsolved samples drawn from a
stage's distribution for self-improvement. Both are pure functions of the step, so a resumed run
sees exactly the batches it would have seen.

Samples are split per group into training and held-out sets by index (the last
``held_out`` fraction of the group's ok samples, at least one when the group has two or more).
Every batch holds samples of one group (one grid); batch ``i`` of an epoch goes to rank
``i mod world`` (see :mod:`pdeladder.trainer.training.processor` for the batch dict).
"""

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from pdeladder.dataset.format import OK
from pdeladder.dataset.moments import mean_std, merge_moments
from pdeladder.dataset.store import Group, open_store
from pdeladder.errors import UserInputError
from pdeladder.solvers.grid import Grid
from pdeladder.solvers.random_fields import gaussian_random_field
from pdeladder.solvers.registry import get_family
from pdeladder.trainer.training.layout import SlotLayout


def split(ok: np.ndarray, held_out: float) -> tuple[np.ndarray, np.ndarray]:
    """Sample indices ``ok`` → (training, held-out)."""
    n_test = math.ceil(held_out * len(ok)) if len(ok) > 1 else 0
    return ok[: len(ok) - n_test], ok[len(ok) - n_test :]


def fill_stats(layout: SlotLayout, store_url: str, paths: list[str]) -> None:
    """Set each family's normalisation statistics from the store's groups (moments merged over
    all groups of the family)."""
    store = open_store(store_url)
    by_family: dict[str, list[Group]] = {}
    for p in paths:
        g = store.group(p)
        by_family.setdefault(g.family, []).append(g)
    for name, groups in by_family.items():
        fam = get_family(name)
        per_slot: dict[int, list[np.ndarray]] = {}
        for g in groups:
            for s, m in zip(layout.slot_indices(fam, g.grid.dim), g.moments(), strict=True):
                per_slot.setdefault(s, []).append(m)
        for s, parts in per_slot.items():
            mean, std = mean_std(merge_moments(np.stack(parts)))
            layout.stats[name]["mean"][s] = float(mean[0])
            layout.stats[name]["std"][s] = float(std[0]) if std[0] > 0 else 1.0


def make_batch(
    layout: SlotLayout,
    family: str,
    grid: Grid,
    fields: np.ndarray,
    params: np.ndarray,
    solved: bool,
) -> dict[str, Any]:
    """Assemble a batch from one family's ``(B, T, C_f, X, Y, Z)`` fields and ``(B, P_f)`` params."""
    fam = get_family(family)
    b = fields.shape[0]
    slotted = np.zeros((b, grid.snapshots, len(layout.slots), *grid.shape), np.float32)
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
    held_out (fraction of each group kept out of training).
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
    ):
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
        fields = np.stack([g.read_fields(int(i), int(self._checksums[gi][i])) for i in indices])
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

    def initial_stats(self, family: str, limit: int = 16) -> tuple[np.ndarray, np.ndarray]:
        """Mean and std ``(C_f,)`` of snapshot 0 over up to ``limit`` training samples per group
        of ``family`` (the amplitude of its initial states and coefficient fields)."""
        snaps = [
            self.load(gi, idx[:limit])["fields"][:, 0]  # (b, C, X, Y, Z)
            for gi, idx in enumerate(self.train)
            if self.groups[gi].family == family and len(idx)
        ]
        if not snaps:
            raise UserInputError(f"no training samples of {family} to take initial statistics from")
        fam = get_family(family)
        slots = self.layout.slot_indices(fam, self.groups[0].grid.dim)
        flat = torch.cat([s[:, slots].movedim(1, 0).reshape(len(slots), -1) for s in snaps], 1)
        return flat.mean(1).numpy(), flat.std(1).numpy()

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


@dataclass(frozen=True)
class UnsolvedSpec:
    """One group of a stage's distribution: a family on a grid with parameter ranges
    ``{name: (low, high, scale)}`` (fixed parameters have ``low == high``)."""

    family: str
    grid: Grid
    ranges: dict[str, tuple[float, float, str]]


def draw_unsolved(
    layout: SlotLayout,
    spec: UnsolvedSpec,
    n: int,
    seed: int,
    initial: tuple[np.ndarray, np.ndarray],
) -> dict[str, Any]:
    """``n`` samples of the stage's distribution, without solving: parameters drawn from the
    ranges, and every channel's snapshot 0 (initial state, coefficient fields) a Gaussian random
    field from the family's generator (length scale: the sample's ``*length_scale`` parameter, or
    0.15) with the ``initial`` mean and std ``(C_f,)`` of the solver data's snapshot 0. Later
    snapshots are zero (unknown).
    """
    fam = get_family(spec.family)
    rng = np.random.default_rng(seed)
    names = fam.Params.names()
    params = np.empty((n, len(names)))
    for j, name in enumerate(names):
        lo, hi, scale = spec.ranges[name]
        u = rng.random(n)
        params[:, j] = (
            np.exp(np.log(lo) + u * (np.log(hi) - np.log(lo)))
            if scale == "log"
            else lo + u * (hi - lo)
        )
    ell_index = next((j for j, p in enumerate(names) if p.endswith("length_scale")), None)
    slots = layout.slot_indices(fam, spec.grid.dim)
    mean, std = initial
    fields = np.zeros((n, spec.grid.snapshots, len(slots), *spec.grid.shape), np.float32)
    for i in range(n):
        ell = params[i, ell_index] if ell_index is not None else 0.15
        for c in range(len(slots)):
            grf = gaussian_random_field(spec.grid.shape, ell, rng)
            fields[i, 0, c] = mean[c] + std[c] * grf
    return make_batch(layout, spec.family, spec.grid, fields, params, solved=False)
