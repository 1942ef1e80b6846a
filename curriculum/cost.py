"""A cost model calibrated on this machine's own solves: DOF-steps, bytes and seconds per group.

For each (family, dimension) a calibration solves the family at its default parameters on two
small grids (17 and 33 points per axis, 9 and 17 in 3D; 5 snapshots, or 1 when steady), each
after an untimed solve that compiles its forms, and records ``dofs / points``, the time steps taken, and the wall time.
From those two points it fits

- DOF-steps = ``dofs_per_point · points · steps``, with ``steps = c · cells^p`` (``p`` fitted:
  0 for a fixed time step, 1 for a CFL-like one; never fewer than ``snapshots - 1``);
- seconds = ``seconds_per_sample + seconds_per_dof_step · DOF-steps``.

It is a linear model fitted on small problems: large problems with direct solvers cost more per
DOF-step, so read the estimates as lower bounds. Calibrations are cached in
``<user cache dir>/pdeladder/cost-model.json`` per host, family, dimension and DOLFINx version.
"""

from mpi4py import MPI

import json
import math
import os
import platform
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import platformdirs

from pdeladder.curriculum.plan import StagePlan
from pdeladder.solvers.grid import Grid
from pdeladder.solvers.registry import get_family

#: calibration grids per dimension, points per axis
CALIBRATION_RESOLUTIONS = {1: (17, 33), 2: (17, 33), 3: (9, 17)}


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


class CostModel:
    """Calibrations by (family, dimension), measured on first use and cached on disk."""

    def __init__(self, cache: Path | None = None):
        self.cache = cache or Path(platformdirs.user_cache_dir("pdeladder")) / "cost-model.json"

    def _key(self, family: str, dim: int) -> str:
        import dolfinx

        return f"{platform.node()}|{family}|{dim}|dolfinx-{dolfinx.__version__}"

    def calibration(self, family: str, dim: int) -> Calibration:
        try:
            entries = json.loads(self.cache.read_text())
        except (OSError, ValueError):
            entries = {}
        key = self._key(family, dim)
        if key in entries:
            return Calibration(**entries[key])
        cal = calibrate(family, dim)
        entries[key] = asdict(cal)
        self.cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.cache.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(entries, indent=1))
        tmp.replace(self.cache)
        return cal

    def estimate(self, plan: StagePlan) -> list[dict]:
        """Per group of ``plan``: samples, estimated DOF-steps, field bytes and one-core seconds."""
        rows = []
        for g in plan.groups:
            cal = self.calibration(g.family, g.grid.dim)
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
                    "seconds": g.n * cal.seconds(g.grid),
                }
            )
        return rows
