"""A cost model calibrated on this machine's own solves: DOF-steps, bytes and seconds per group.

For each (family, dimension) a calibration solves the family at its default parameters on two
small grids (17 and 33 points per axis, 9 and 17 in 3D; 5 snapshots, or 1 when steady), each
after an untimed solve that compiles its forms, and records ``dofs / points``, the time steps taken, and the wall time.
From those two points it fits

- DOF-steps = ``dofs_per_point · points · steps``, with ``steps = c · cells^p`` (``p`` fitted:
  0 for a fixed time step, 1 for a CFL-like one; never fewer than ``snapshots - 1``);
- seconds = ``seconds_per_sample + seconds_per_dof_step · DOF-steps``.

It is a linear model fitted on small problems: large problems with direct solvers cost more per
DOF-step, so read the estimates as lower bounds.

Memory is measured the same way, in a fresh Python process per (family, dimension) so that no
earlier allocation hides in its high-water mark: ``resource.getrusage`` peak RSS once the family
is imported (the idle process), then after a solve on each of two grids (:data:`MEMORY_RESOLUTIONS`).
Above the idle process and the sample's float32 fields (known exactly), the peak is fitted as
``overhead_bytes + bytes_per_dof · dofs``. A sample solved on K ranks (x slabs) is predicted to
need, per rank, ``idle + overhead + (bytes_per_dof · dofs + fields) / K`` (each rank draws only
its rows of the initial state: :meth:`pdeladder.solvers.family.Family.initial_fields`).

Stored bytes: each codec of :data:`pdeladder.dataset.format.COMPRESSIONS` compresses the fields
of one solve on the larger memory grid (the family's default parameters), and a group's stored
bytes are its float32 field bytes over its codec's measured ratio. Real parameters and finer grids
change the ratio (smoother fields compress better): read it as the calibration's, not a bound.

Calibrations are cached in ``<user cache dir>/pdeladder/cost-model.json`` per host, family,
dimension and DOLFINx version (memory and compression under the same key with ``|memory`` and
``|compression``); an entry of an older format is measured again.
"""

from mpi4py import MPI

import dataclasses
import json
import math
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import platformdirs

from pdeladder.curriculum.plan import GroupPlan, StagePlan
from pdeladder.dataset.chunks import numcodec
from pdeladder.dataset.format import COMPRESSIONS
from pdeladder.errors import UserInputError
from pdeladder.solvers.grid import Grid
from pdeladder.solvers.registry import get_family

#: calibration grids per dimension, points per axis
CALIBRATION_RESOLUTIONS = {1: (17, 33), 2: (17, 33), 3: (9, 17)}
#: memory calibration grids per dimension (large enough for the RSS to move), points per axis
MEMORY_RESOLUTIONS = {1: (257, 1025), 2: (33, 65), 3: (13, 21)}


@dataclass(frozen=True)
class Calibration:
    """Measured cost of one family in one dimension on this host."""

    family: str
    dim: int
    dofs_per_point: float
    steps_coefficient: float
    steps_exponent: float
    seconds_per_sample: float
    seconds_per_dof_step: float
    measured: str  # what was solved, where and when

    def dof_steps(self, grid: Grid) -> float:
        """Estimated DOF-steps of one sample on ``grid``."""
        steps = max(grid.snapshots - 1, self.steps_coefficient * grid.cells**self.steps_exponent, 1)
        return self.dofs_per_point * grid.points * steps

    def seconds(self, grid: Grid) -> float:
        """Estimated wall seconds of one sample on ``grid`` (one core)."""
        return self.seconds_per_sample + self.seconds_per_dof_step * self.dof_steps(grid)


def calibrate(family: str, dim: int) -> Calibration:
    """Time two small solves of ``family`` in ``dim`` dimensions (module docstring)."""
    fam = get_family(family)
    params = fam.Params()
    grids = [fam.grid(dim, r, 1 if fam.steady else 5) for r in CALIBRATION_RESOLUTIONS[dim]]
    rows = []
    for grid in grids:
        fam.run(params, grid, 0, MPI.COMM_SELF)  # compiles the forms (some per grid); not timed
        t0 = time.perf_counter()
        s = fam.run(params, grid, 0, MPI.COMM_SELF)
        rows.append((grid, s.stats.dofs, max(s.stats.steps, 1), time.perf_counter() - t0))
    (g0, d0, s0, t0), (g1, d1, s1, t1) = rows
    exponent = math.log(s1 / s0) / math.log(g1.cells / g0.cells)
    work0, work1 = d0 * s0, d1 * s1
    per_dof_step = max((t1 - t0) / (work1 - work0), 0.0) if work1 > work0 else t1 / work1
    return Calibration(
        family=family,
        dim=dim,
        dofs_per_point=d1 / g1.points,
        steps_coefficient=s1 / g1.cells**exponent,
        steps_exponent=exponent,
        seconds_per_sample=max(t1 - per_dof_step * work1, 0.0),
        seconds_per_dof_step=per_dof_step,
        measured=(
            f"{family} {dim}D at {CALIBRATION_RESOLUTIONS[dim]} points per axis, default parameters, "
            f"one core, {platform.node()}, {time.strftime('%Y-%m-%d')}"
        ),
    )


@dataclass(frozen=True)
class MemoryCalibration:
    """Measured peak memory of one family's solve in one dimension on this host (bytes)."""

    family: str
    dim: int
    idle_bytes: float  # the process with the family imported, before any solve
    overhead_bytes: float  # above idle and the fields, whatever the size
    bytes_per_dof: float
    measured: str

    def per_rank(self, dofs: float, field_bytes: float, ranks: int) -> float:
        """Predicted peak RSS of one of ``ranks`` processes solving a sample (module docstring)."""
        return (
            self.idle_bytes
            + self.overhead_bytes
            + (self.bytes_per_dof * dofs + field_bytes) / ranks
        )


def _memory_probe(family: str, dim: int) -> None:
    """In a fresh process: print the idle peak RSS, then per memory grid its dofs, field bytes
    and the peak RSS after solving it (bytes, one JSON line)."""
    import resource

    fam = get_family(family)
    peak = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # noqa: E731
    out = {"idle": peak(), "rows": []}
    for r in MEMORY_RESOLUTIONS[dim]:
        grid = fam.grid(dim, r, 1 if fam.steady else 5)
        s = fam.run(fam.Params(), grid, 0, MPI.COMM_SELF)
        out["rows"].append([s.stats.dofs, s.fields.nbytes, peak()])
        del s
    print(json.dumps(out), flush=True)


def calibrate_memory(family: str, dim: int) -> MemoryCalibration:
    """Measure the peak memory of ``family``'s solve in ``dim`` dimensions (module docstring)."""
    code = f"from pdeladder.curriculum.cost import _memory_probe; _memory_probe({family!r}, {dim})"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    probe = json.loads(done.stdout.strip().splitlines()[-1])
    idle = probe["idle"]
    (d0, f0, p0), (d1, f1, p1) = probe["rows"]
    y0, y1 = p0 - idle - f0, p1 - idle - f1
    per_dof = (y1 - y0) / (d1 - d0) if d1 > d0 and y1 > y0 else max(y1, 0) / d1
    return MemoryCalibration(
        family=family,
        dim=dim,
        idle_bytes=float(idle),
        overhead_bytes=float(max(y1 - per_dof * d1, 0.0)),
        bytes_per_dof=float(per_dof),
        measured=(
            f"{family} {dim}D peak RSS at {MEMORY_RESOLUTIONS[dim]} points per axis, default "
            f"parameters, one process, {platform.node()}, {time.strftime('%Y-%m-%d')}"
        ),
    )


@dataclass(frozen=True)
class CompressionCalibration:
    """Measured compression ratio (float32 bytes / encoded bytes) of one family's fields in one
    dimension, per codec name."""

    family: str
    dim: int
    ratios: dict[str, float]
    measured: str


def calibrate_compression(family: str, dim: int) -> CompressionCalibration:
    """Encode the fields of one solve with every codec (module docstring)."""
    fam = get_family(family)
    r = MEMORY_RESOLUTIONS[dim][-1]
    fields = fam.run(
        fam.Params(), fam.grid(dim, r, 1 if fam.steady else 5), 0, MPI.COMM_SELF
    ).fields
    raw = np.ascontiguousarray(fields, dtype=np.float32)
    ratios = {}
    for name in COMPRESSIONS:
        codec = numcodec(name)
        ratios[name] = 1.0 if codec is None else raw.nbytes / len(codec.encode(raw))
    return CompressionCalibration(
        family=family,
        dim=dim,
        ratios=ratios,
        measured=(
            f"{family} {dim}D fields at {r} points per axis, default parameters, "
            f"{platform.node()}, {time.strftime('%Y-%m-%d')}"
        ),
    )


def node_memory_bytes() -> int:
    """This machine's physical memory."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def human_time(seconds: float) -> str:
    """``seconds`` in the largest unit that keeps it at least 1: s, min, h, days, years."""
    for unit, size in (("years", 365.25 * 86400), ("days", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.3g} s"


class CostModel:
    """Calibrations by (family, dimension), measured on first use and cached on disk.

    ``on_measure``: told, as one line each, when a measurement starts (what, and that it is
    done once) and when it ends (its seconds): a first plan measures for minutes."""

    def __init__(self, cache: Path | None = None, on_measure: Callable[[str], None] | None = None):
        self.cache = cache or Path(platformdirs.user_cache_dir("pdeladder")) / "cost-model.json"
        self.on_measure = on_measure

    def _key(self, family: str, dim: int) -> str:
        import dolfinx

        return f"{platform.node()}|{family}|{dim}|dolfinx-{dolfinx.__version__}"

    def _cached[C](self, key: str, cls: type[C], measure: Callable[[], C], what: str) -> C:
        try:
            entries = json.loads(self.cache.read_text())
        except (OSError, ValueError):
            entries = {}
        try:
            return cls(**entries[key])
        except (KeyError, TypeError):  # not measured yet, or an older format: measure again
            pass
        tell = self.on_measure or (lambda line: None)
        tell(f"calibrating the cost model: {what} on this machine (once; cached in {self.cache})")
        t0 = time.perf_counter()
        cal = measure()
        tell(f"calibrated {what} in {time.perf_counter() - t0:.0f} s")
        try:  # re-read: another process may have cached other entries meanwhile
            entries = json.loads(self.cache.read_text())
        except (OSError, ValueError):
            entries = {}
        entries[key] = asdict(cal)
        self.cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.cache.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(entries, indent=1))
        tmp.replace(self.cache)
        return cal

    def calibration(self, family: str, dim: int) -> Calibration:
        return self._cached(
            self._key(family, dim),
            Calibration,
            lambda: calibrate(family, dim),
            f"{family} {dim}D solve times",
        )

    def memory(self, family: str, dim: int) -> MemoryCalibration:
        return self._cached(
            self._key(family, dim) + "|memory",
            MemoryCalibration,
            lambda: calibrate_memory(family, dim),
            f"{family} {dim}D memory",
        )

    def compression(self, family: str, dim: int) -> CompressionCalibration:
        return self._cached(
            self._key(family, dim) + "|compression",
            CompressionCalibration,
            lambda: calibrate_compression(family, dim),
            f"{family} {dim}D compression ratio",
        )

    def per_rank_bytes(self, g: GroupPlan, ranks: int) -> float:
        """Predicted peak RSS per rank of one sample of ``g`` solved on ``ranks`` processes."""
        mem = self.memory(g.family, g.grid.dim)
        dofs = self.calibration(g.family, g.grid.dim).dofs_per_point * g.grid.points
        return mem.per_rank(dofs, g.field_bytes / g.n, ranks)

    def ranks(self, g: GroupPlan, budget_gb: float | None, *, cluster: bool) -> int:
        """The ranks per sample of ``g``: its own K, checked, or for ``auto`` the fewest whose
        per-rank memory fits ``budget_gb`` (UserInputError, one line, when none does or K
        exceeds the cells along x, or this machine's cores unless on a ``cluster``)."""
        cores = os.cpu_count() or 1
        most = g.grid.cells if cluster else min(g.grid.cells, cores)
        where = f"{g.path}: ranks_per_sample"
        if g.ranks != "auto":
            k = int(g.ranks)
            if k > g.grid.cells:
                raise UserInputError(
                    f"{where} {k} exceeds the {g.grid.cells} cells along x: every rank needs "
                    "a slab of cells"
                )
            if k > most:
                raise UserInputError(
                    f"{where} {k} exceeds the {cores} cores of this machine; give --address "
                    "to run on a cluster"
                )
            return k
        if budget_gb is None:
            raise UserInputError(f"{where}: auto needs generation.memory_budget_gb")
        budget = budget_gb * 2**30
        for k in range(1, most + 1):
            if self.per_rank_bytes(g, k) <= budget:
                return k
        raise UserInputError(
            f"{where}: auto finds no K up to {most} whose per-rank memory fits "
            f"generation.memory_budget_gb {budget_gb:g} (K = {most} needs "
            f"{self.per_rank_bytes(g, most) / 2**30:.3g} GB per rank)"
        )

    def resolve(self, plan: StagePlan, budget_gb: float | None, *, cluster: bool) -> StagePlan:
        """``plan`` with every group's ``ranks`` a number (:meth:`ranks`)."""
        groups = tuple(
            dataclasses.replace(g, ranks=self.ranks(g, budget_gb, cluster=cluster))
            for g in plan.groups
        )
        return dataclasses.replace(plan, groups=groups)

    def estimate(
        self, plan: StagePlan, budget_gb: float | None = None, *, cluster: bool = False
    ) -> list[dict]:
        """Per group of ``plan``: samples, estimated DOF-steps, field bytes and the bytes stored
        with the group's codec (its measured ratio), one-core seconds, peak memory of one sample
        on one process, ranks per sample and memory per rank, and whether a sample is larger
        than one node (this machine's memory or cores)."""
        rows = []
        for g in self.resolve(plan, budget_gb, cluster=cluster).groups:
            cal = self.calibration(g.family, g.grid.dim)
            k = int(g.ranks)
            memory = self.per_rank_bytes(g, 1)
            rows.append(
                {
                    "group": g.path,
                    "family": g.family,
                    "dim": g.grid.dim,
                    "resolution": g.grid.resolution,
                    "snapshots": g.grid.snapshots,
                    "samples": g.n,
                    "dof_steps": g.n * cal.dof_steps(g.grid),
                    "bytes": g.field_bytes,
                    "stored_bytes": g.field_bytes
                    / self.compression(g.family, g.grid.dim).ratios[g.compression],
                    "compression": g.compression,
                    "seconds": g.n * cal.seconds(g.grid),
                    "memory_per_sample_bytes": memory,
                    "ranks_per_sample": k,
                    "memory_per_rank_bytes": self.per_rank_bytes(g, k),
                    "larger_than_node": memory > node_memory_bytes() or k > (os.cpu_count() or 1),
                }
            )
        return rows
