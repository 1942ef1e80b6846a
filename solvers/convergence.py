"""Manufactured-solution convergence studies: refine space (or time), measure the L2 error at
the final time, and report the observed order against the family's theoretical one."""

from dataclasses import asdict, dataclass
from typing import Any, Literal

from pdeladder.solvers.family import MANUFACTURED_T_END, Family, observed_rates

#: How far below the theoretical order an observed order may fall.
TOLERANCE = 0.2


@dataclass(frozen=True)
class ConvergenceRow:
    """One refinement level: ``h`` is the mesh size (space study) or the time step (time study)."""

    h: float
    error: float
    rate: float | None


@dataclass(frozen=True)
class ConvergenceStudy:
    family: str
    dim: int
    kind: Literal["space", "time"]
    rows: list[ConvergenceRow]
    expected_rate: float
    observed_rate: float

    @property
    def passed(self) -> bool:
        """The observed order reaches the theoretical one within :data:`TOLERANCE`."""
        return self.observed_rate >= self.expected_rate - TOLERANCE

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "passed": self.passed}


def study(
    family: Family,
    dim: int,
    kind: Literal["space", "time"],
    *,
    levels: tuple[int, ...] | None = None,
    fixed: int | None = None,
    comm: Any = None,
) -> ConvergenceStudy:
    """Run one study. The family's plan for ``kind`` (or for ``f"{kind}_{dim}d"`` where it has one)
    gives the refinement levels; ``levels`` overrides them (cells per axis for
    space, steps for time); ``fixed`` its fixed counterpart. The observed rate is the one between
    the two finest levels."""
    if comm is None:
        from mpi4py import MPI

        comm = MPI.COMM_SELF
    plan = family.convergence_plan.get(f"{kind}_{dim}d") or family.convergence_plan[kind]
    if kind == "space":
        levels = levels or plan["cells"]
        steps = fixed or plan["steps"]
        h = [1.0 / c for c in levels]
        err = [family.manufactured_error(dim, c, steps, comm, kind) for c in levels]
        expected = family.expected_rate_space
    else:
        if family.expected_rate_time is None:
            raise ValueError(f"{family.name} is steady: it has no time convergence study")
        levels = levels or plan["steps"]
        cells = fixed or plan["cells"]
        h = [MANUFACTURED_T_END / s for s in levels]
        err = [family.manufactured_error(dim, cells, s, comm, kind) for s in levels]
        expected = family.expected_rate_time
    rates = observed_rates(h, err)
    rows = [
        ConvergenceRow(hi, ei, None if i == 0 else rates[i - 1])
        for i, (hi, ei) in enumerate(zip(h, err, strict=True))
    ]
    return ConvergenceStudy(family.name, dim, kind, rows, expected, rates[-1])
