"""Real solver output for the benchmarks: heat-equation trajectories, solved once and cached,
and solves on two grids from one initial draw."""

from mpi4py import MPI  # noqa: F401  (loaded before DOLFINx)

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from rich.progress import track

from pdeladder.solvers import Sample, get_family
from pdeladder.solvers.grid import Grid


def heat_samples(n: int, dim: int, resolution: int, snapshots: int, cache: Path) -> list[Sample]:
    """``n`` heat solves with seeds ``0..n-1`` and spread diffusivities; fields cached in
    ``cache`` (a .npy per sample) so that repeated runs measure the store, not the solver."""
    fam = get_family("heat")
    grid = fam.grid(dim, resolution, snapshots)
    cache.mkdir(parents=True, exist_ok=True)
    out = []
    for k in track(range(n), description=f"heat {dim}D n={resolution} T={snapshots}"):
        params = fam.parse_params({"diffusivity": 0.005 + 0.09 * k / max(1, n - 1)})
        path = cache / f"heat_{dim}d_{resolution}_{snapshots}_{k}.npy"
        if path.exists():
            s = fam.run(params, fam.grid(dim, 5, snapshots), seed=k)  # stats and provenance only
            s.grid, s.fields = grid, np.load(path)
        else:
            s = fam.run(params, grid, seed=k)
            np.save(path, s.fields)
        out.append(s)
    return out


@contextmanager
def coarse_from_fine(family_name: str, fine: Grid, coarse: Grid) -> Iterator[None]:
    """While active, a solve of ``family_name`` on ``coarse`` starts from the draw of the same
    seed on ``fine``, taken at the coarse points (its points every ``(fine - 1) / (coarse - 1)``
    along each axis), so that the two grids solve one initial state; other grids as they are."""
    cls = type(get_family(family_name))
    draw, stride = cls.initial_fields, (fine.resolution - 1) // (coarse.resolution - 1)

    def shared(self, params, g, rng, comm=None):
        if g != coarse:
            return draw(self, params, g, rng, comm)
        return draw(self, params, fine, rng, comm)[
            (slice(None), *[slice(None, None, stride)] * coarse.dim)
        ]

    cls.initial_fields = shared
    try:
        yield
    finally:
        cls.initial_fields = draw
