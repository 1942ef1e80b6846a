"""Planning: a stage expands, deterministically, into the specifications of its samples.

Within a group (stage, family, dimension, resolution, snapshots) sample ``i`` gets

- its seed from ``SeedSequence(curriculum seed, spawn_key=(stage, family, dim, resolution,
  snapshots, 0, i))``, the names hashed with CRC-32, so it depends on nothing but the curriculum
  and the sample's place, never on the worker or the order in which samples are solved;
- its parameters from row ``i`` of a seeded space-filling design over the varying parameters
  (scrambled Sobol' points, or a Latin hypercube; seed from the same key with ``(1,)`` instead
  of ``(0, i)``), mapped onto each range (linear or log) through the weights' region warp.
"""

import hashlib
import json
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
from scipy.stats import qmc

from pdeladder.curriculum.families import EntryBase
from pdeladder.curriculum.spec import Curriculum, Stage
from pdeladder.curriculum.weights import Weights, allocate, load_weights, region_warp
from pdeladder.dataset.format import group_path
from pdeladder.errors import UnknownNameError
from pdeladder.solvers.grid import Grid
from pdeladder.solvers.registry import get_family


@dataclass(frozen=True)
class SampleSpec:
    """Everything that determines one sample (with the family's solver)."""

    stage: str
    family: str
    grid: Grid
    index: int
    seed: int
    params: dict[str, float]


@dataclass(frozen=True)
class GroupPlan:
    """One group's samples: ``params`` float64 ``(N, P)`` in the family's parameter order,
    ``seeds`` int64 ``(N,)``; ``config_hash`` identifies the plan in the store's attributes."""

    stage: str
    family: str
    grid: Grid
    param_names: tuple[str, ...]
    params: np.ndarray
    seeds: np.ndarray
    config_hash: str
    compression: str  # codec of the group's fields, when the group is created
    ranks: "int | str" = 1  # ranks_per_sample: K, or "auto" until the cost model resolves it
    #: What ``config_hash`` hashes besides the count (seed, stage, family, grid, design,
    #: ranges, regions): :meth:`hash_at` tells a group of this configuration at another count.
    config: dict = field(default_factory=dict, compare=False)

    def hash_at(self, n: int) -> str:
        """The ``config_hash`` of this configuration with ``n`` samples (``config_hash`` is
        ``hash_at(self.n)``): a stored group whose hash is ``hash_at(its count)`` differs from
        this plan in its count only."""
        return config_hash(self.config, n)

    @property
    def prefix_stable(self) -> bool:
        """Whether the first samples stay the same when the count changes: true of the Sobol'
        design (a prefix of one sequence) and of the seeds (by index), not of a Latin
        hypercube, whose every point depends on the count."""
        return self.config.get("design", "sobol") == "sobol"

    @property
    def n(self) -> int:
        return len(self.seeds)

    @property
    def path(self) -> str:
        """The group's path in a store."""
        g = self.grid
        return group_path(self.stage, self.family, g.dim, g.resolution, g.snapshots)

    @property
    def field_bytes(self) -> int:
        """Uncompressed bytes of the group's float32 fields, ``N · T · C · points · 4``."""
        channels = len(get_family(self.family).channels_for(self.grid.dim))
        return self.n * self.grid.snapshots * channels * self.grid.points * 4

    def sample(self, index: int) -> SampleSpec:
        return SampleSpec(
            self.stage,
            self.family,
            self.grid,
            index,
            int(self.seeds[index]),
            dict(zip(self.param_names, self.params[index].tolist(), strict=True)),
        )

    def samples(self) -> Iterator[SampleSpec]:
        return (self.sample(i) for i in range(self.n))


@dataclass(frozen=True)
class StagePlan:
    curriculum: str
    stage: str
    groups: tuple[GroupPlan, ...]

    @property
    def n(self) -> int:
        return sum(g.n for g in self.groups)


def _key(stage: str, family: str, grid: Grid) -> tuple[int, ...]:
    return (
        zlib.crc32(stage.encode()),
        zlib.crc32(family.encode()),
        grid.dim,
        grid.resolution,
        grid.snapshots,
    )


def sample_seed(curriculum_seed: int, stage: str, family: str, grid: Grid, index: int) -> int:
    """The seed of sample ``index`` of a group, a non-negative int64."""
    ss = np.random.SeedSequence(curriculum_seed, spawn_key=(*_key(stage, family, grid), 0, index))
    return int(ss.generate_state(1, np.uint64)[0] >> np.uint64(1))


def unit_design(kind: str, d: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """``(n, d)`` points in the unit cube: the first ``n`` of ``2^ceil(log2 n)`` scrambled Sobol'
    points (the same prefix whatever ``n``), or an ``n``-point Latin hypercube."""
    if d == 0:
        return np.zeros((n, 0))
    if kind == "sobol":
        m = max(0, int(np.ceil(np.log2(n))))
        return qmc.Sobol(d, scramble=True, rng=rng).random_base2(m)[:n]
    return qmc.LatinHypercube(d, rng=rng).random(n)


def plan_group(
    curriculum_seed: int,
    stage: str,
    entry: EntryBase,
    grid: Grid,
    n: int,
    weights: Weights | None,
    compression: str,
) -> GroupPlan:
    ranges = entry.params.resolved()
    names = tuple(ranges)
    regions = list(weights.regions.get(entry.family, [])) if weights else []
    if unknown := sorted({r.parameter for r in regions} - set(names)):
        raise UnknownNameError(
            f"weights: {entry.family} has no parameter {', '.join(unknown)}; "
            f"available: {', '.join(names)}"
        )
    varying = [name for name in names if not ranges[name].fixed]
    key = _key(stage, entry.family, grid)
    rng = np.random.default_rng(np.random.SeedSequence(curriculum_seed, spawn_key=(*key, 1)))
    u = unit_design(entry.design, len(varying), n, rng)
    params = np.empty((n, len(names)))
    for j, name in enumerate(names):
        rng_j = ranges[name]
        if name in varying:
            col = region_warp(
                u[:, varying.index(name)], rng_j, [r for r in regions if r.parameter == name]
            )
            params[:, j] = np.clip(rng_j.at(col), rng_j.low, rng_j.high)
        else:
            params[:, j] = rng_j.low
    seeds = np.array(
        [sample_seed(curriculum_seed, stage, entry.family, grid, i) for i in range(n)],
        dtype=np.int64,
    )
    config = {
        "seed": curriculum_seed,
        "stage": stage,
        "family": entry.family,
        "grid": [grid.dim, grid.resolution, grid.snapshots, grid.t_end],
        "design": entry.design,
        "ranges": {k: r.model_dump() for k, r in ranges.items()},
        "regions": [r.model_dump() for r in regions],
    }
    return GroupPlan(
        stage,
        entry.family,
        grid,
        names,
        params,
        seeds,
        config_hash(config, n),
        compression,
        entry.ranks_per_sample,
        config,
    )


def config_hash(config: dict, n: int) -> str:
    """The ``config_hash`` of a group: 16 hex digits of the SHA-256 of its configuration and
    count ``n`` as sorted JSON (what stores made before growth existed hold, unchanged)."""
    identity = {**config, "n": n}
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]


def plan_stage(
    spec: Curriculum, stage: "str | Stage", weights: "Weights | str | dict | None" = None
) -> StagePlan:
    """Expand ``stage`` (a name or a :class:`Stage` of ``spec``) into its samples.

    ``weights`` (a :class:`Weights`, a file path or a mapping) reallocates the stage's budget
    across its groups and warps parameter regions (:mod:`pdeladder.curriculum.weights`); weights
    naming another stage are ignored.
    """
    st = spec.stage(stage) if isinstance(stage, str) else stage
    w = load_weights(weights)
    if w is not None and not w.applies_to(st.name):
        w = None
    groups = st.groups()
    counts = [entry.samples for entry, _ in groups]
    if w is not None:
        if unknown := sorted((set(w.families) | set(w.regions)) - {e.family for e, _ in groups}):
            raise UnknownNameError(
                f"weights name families not in stage {st.name!r}: {', '.join(unknown)}; "
                f"available: {', '.join(dict.fromkeys(e.family for e, _ in groups))}"
            )
        counts = allocate(
            counts, [w.family_weight(e.family) for e, _ in groups], w.minimum_fraction
        )
    return StagePlan(
        spec.name,
        st.name,
        tuple(
            plan_group(spec.seed, st.name, entry, grid, n, w, spec.compression)
            for (entry, grid), n in zip(groups, counts, strict=True)
        ),
    )
