"""Unsolved samples for the self-improvement phase, drawn from a stage's distribution without
solving: parameters uniform (or log-uniform) within the stage's ranges, and snapshot 0 (initial
state, coefficient fields) the family's own draw for a fresh sample seed
(:meth:`~pdeladder.solvers.family.Family.draw_inputs`), so that snapshot 0 has exactly the
distribution of the solver data's. Sample seeds are never those of the solver data. Every draw is a pure
function of its seed, so a resumed run sees the same samples.
"""

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import numpy as np

from pdeladder.dataset.collate import make_batch
from pdeladder.dataset.slots import SlotLayout
from pdeladder.dataset.store import open_store
from pdeladder.solvers.grid import Grid
from pdeladder.solvers.registry import get_family


@dataclass(frozen=True)
class UnsolvedSpec:
    """One group of a stage's distribution: a family on a grid with parameter ranges
    ``{name: (low, high, scale)}`` (fixed parameters have ``low == high``)."""

    family: str
    grid: Grid
    ranges: dict[str, tuple[float, float, str]]


def solver_seeds(store_url: str, paths: list[str]) -> frozenset[int]:
    """The sample seeds of the store groups ``paths``, all groups together."""
    store = open_store(store_url)
    return frozenset(int(s) for p in paths for s in store.group(p).column("seed"))


def unsolved_samples(
    spec: UnsolvedSpec, n: int, seed: Any, taken: Collection[int] = ()
) -> tuple[np.ndarray, np.ndarray]:
    """``n`` samples of the distribution ``spec``: parameters float64 ``(n, P)`` in the family's
    order and sample seeds int64 ``(n,)``.

    Args:
        seed: entropy of the draw (an int or a sequence of ints, as ``np.random.default_rng``).
        taken: seeds never to draw (the solver data's, :func:`solver_seeds`).
    """
    rng = np.random.default_rng(seed)
    names = get_family(spec.family).Params.names()
    params = np.empty((n, len(names)))
    for j, name in enumerate(names):
        lo, hi, scale = spec.ranges[name]
        u = rng.random(n)
        value = (
            np.exp(np.log(lo) + u * (np.log(hi) - np.log(lo)))
            if scale == "log"
            else lo + u * (hi - lo)
        )
        params[:, j] = np.clip(value, lo, hi)  # exp(log(lo)) may round to just outside
    seeds: list[int] = []
    while len(seeds) < n:
        candidate = int(rng.integers(2**63))
        if candidate not in taken:
            seeds.append(candidate)
    return params, np.array(seeds, dtype=np.int64)


def draw_unsolved(
    layout: SlotLayout, spec: UnsolvedSpec, n: int, seed: Any, taken: Collection[int] = ()
) -> dict[str, Any]:
    """A batch (see :mod:`~pdeladder.trainer.processor`) of the ``n`` samples of
    :func:`unsolved_samples`: snapshot 0 drawn by the family exactly as its solver would start
    those samples, later snapshots zero (unknown)."""
    fam = get_family(spec.family)
    grid = spec.grid
    params, seeds = unsolved_samples(spec, n, seed, taken)
    fields = np.zeros(
        (n, grid.snapshots, len(fam.channels_for(grid.dim)), *grid.shape), np.float32
    )  # (B, T, C_f, X, Y, Z)
    for i in range(n):
        fields[i, 0] = fam.draw_inputs(fam.Params.from_vector(params[i]), grid, int(seeds[i]))
    return make_batch(layout, spec.family, grid, fields, params, solved=False)
