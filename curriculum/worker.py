"""The solver worker: solves samples on ``MPI.COMM_SELF`` and writes each one straight into the
store, so no field data passes through the driver. :class:`Solver` is plain Python (usable in a
loop, as the benchmark does); :func:`solver_actor` wraps it as a restartable Ray actor.
"""

from mpi4py import MPI

import os
from dataclasses import dataclass
from typing import Any

from pdeladder.curriculum.plan import GroupPlan, SampleSpec
from pdeladder.dataset.store import Store, open_store
from pdeladder.dataset.writer import WritableGroup
from pdeladder.solvers.family import Sample, SolveStats
from pdeladder.solvers.registry import get_family


def group_attrs(plan: GroupPlan, curriculum: str) -> dict[str, Any]:
    """The attributes a curriculum's group carries beside the format's: its ``config_hash``,
    the curriculum's name and, for K-rank samples, ``ranks_per_sample``."""
    attrs: dict[str, Any] = {"config_hash": plan.config_hash, "curriculum": curriculum}
    if int(plan.ranks) > 1:
        attrs["ranks_per_sample"] = int(plan.ranks)
    return attrs


def create_group(store: Store, plan: GroupPlan, curriculum: str) -> WritableGroup:
    """Create (or reopen, if identical) the store group of ``plan``; the driver does this before
    any worker writes, so workers only open existing groups. A group of K-rank samples
    (``plan.ranks`` > 1) gets x chunks for K slabs and ``ranks_per_sample`` in its attributes,
    so that a rerun with another K is refused rather than mixing samples of two K."""
    from pdeladder.curriculum.slab_solve import x_slabs
    from pdeladder.slabs import slab_chunk

    attrs = group_attrs(plan, curriculum)
    ranks = int(plan.ranks)
    chunk_x = slab_chunk(plan.grid.shape[0], ranks) if ranks > 1 else None
    group = store.require_group(
        plan.stage,
        get_family(plan.family),
        plan.grid,
        plan.n,
        attrs,
        compression=plan.compression,
        chunk_x=chunk_x,
    )
    if ranks > 1:
        x_slabs(group, ranks)  # a group made before with too few x chunks is refused
    return group


@dataclass(frozen=True)
class Outcome:
    """The small record a worker returns for one sample (its data is already in the store)."""

    group: str
    index: int
    ok: bool
    reason: str
    dof_steps: int
    wall_s: float
    pid: int


def failed_sample(spec: SampleSpec, reason: str) -> Sample:
    """A failed sample for ``spec`` carrying ``reason`` (recorded without data)."""
    fam = get_family(spec.family)
    stats = SolveStats(status="failed", reason=reason)
    return Sample(spec.family, None, spec.grid, fam.Params(**spec.params), spec.seed, stats)


class Solver:
    """Solves samples and writes them into ``store`` (an open store or its URL)."""

    def __init__(self, store: Store | str):
        self.store = open_store(store, mode="a") if isinstance(store, str) else store
        self.groups: dict[str, WritableGroup] = {}

    def group(self, path: str) -> WritableGroup:
        if path not in self.groups:
            self.groups[path] = self.store.group(path)
        return self.groups[path]

    def solve(self, path: str, spec: SampleSpec) -> Outcome:
        """Solve ``spec`` and write it into the existing group at ``path``."""
        group = self.group(path)
        fam = get_family(spec.family)
        sample = fam.run(fam.Params(**spec.params), spec.grid, spec.seed, MPI.COMM_SELF)
        group.write(spec.index, sample)
        s = sample.stats
        return Outcome(
            group.path, spec.index, sample.ok, s.reason, s.dofs * s.steps, s.wall_s, os.getpid()
        )

    def record_failure(self, path: str, spec: SampleSpec, reason: str) -> None:
        """Record ``spec`` as failed with ``reason`` (when its worker could not)."""
        self.group(path).write(spec.index, failed_sample(spec, reason))


def gang_solve(url: str, path: str, spec: SampleSpec, ranks: int) -> Outcome:
    """Solve ``spec`` on ``ranks`` MPI processes (``mpiexec -n ranks`` of
    :mod:`pdeladder.curriculum.slab_solve`, the launch ``pdeladder solve --ranks`` uses), each
    writing its x slab of sample ``spec.index`` of the group at ``path``; rank 0 commits it.
    A rank that dies raises :class:`~pdeladder.errors.SolveError` (the sample stays missing);
    a solver failure is recorded as failed by rank 0 and returned."""
    from pdeladder.curriculum import slab_solve

    job = slab_solve.job(
        spec.family,
        url,
        spec.grid,
        spec.params,
        spec.seed,
        spec.stage,
        group=path,
        index=spec.index,
    )
    line = slab_solve.run_on_ranks(job, ranks)
    ok = line["status"] == "ok"
    dof_steps = line["dofs"] * line["steps"]
    return Outcome(
        path, spec.index, ok, line.get("reason", ""), dof_steps, line["wall_s"], os.getpid()
    )


def gang_task(ranks: int) -> Any:
    """The Ray task of :func:`gang_solve` for ``ranks``-rank samples: it reserves ``ranks``
    CPUs on one node (its MPI processes run there); not retried by Ray (the driver resubmits
    a lost attempt)."""
    import ray

    return ray.remote(
        num_cpus=ranks,
        max_retries=0,
        runtime_env={"env_vars": {"OMP_NUM_THREADS": "1", "RAY_USAGE_STATS_ENABLED": "0"}},
    )(gang_solve)


def solver_actor(max_restarts: int = 2, max_task_retries: int = 1) -> Any:
    """The Ray actor class of :class:`Solver`: one CPU, one OpenMP thread, spread over a
    cluster's nodes (each solve is bound by its node's memory bandwidth); restarted after a
    crash or a lost node (``max_restarts``) with its in-flight samples retried
    (``max_task_retries``)."""
    import ray

    return ray.remote(
        num_cpus=1,
        scheduling_strategy="SPREAD",
        max_restarts=max_restarts,
        max_task_retries=max_task_retries,
        runtime_env={"env_vars": {"OMP_NUM_THREADS": "1", "RAY_USAGE_STATS_ENABLED": "0"}},
    )(Solver)
