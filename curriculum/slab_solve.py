"""One sample solved on K MPI ranks, each rank writing its own x slab of it to the store.

Launched by ``pdeladder solve FAMILY ... --ranks K`` (and ``curriculum materialize``'s K-rank
samples) as ``mpiexec -n K python -m pdeladder.curriculum.slab_solve JOB`` (``JOB``: the JSON of
:func:`job`). The mesh is partitioned into the x slabs of the group's ``fields`` chunks
(:func:`pdeladder.slabs.slabs`), so every rank samples and writes its own slab, whole chunks,
and no rank gathers the sample. The store protocol (:meth:`~pdeladder.dataset.writer.WritableGroup.write_slab`):

1. rank 0 appends a placeholder sample to the group and :meth:`discard`\\ s it (status
   missing), and sends its index to the others; the placeholder's reason names the sample
   (:func:`placeholder_reason`), so that the rerun of a killed solve takes that index again
   (:func:`unfinished`) and the group verifies clean once it is committed;
2. every rank solves its part and writes its slab (fields and their digests);
3. after a barrier, rank 0 :meth:`commit`\\ s the sample: the only step that marks it ok.

A rank that dies before the commit leaves the sample missing (``store verify`` reports "a write
did not finish") until the same command completes it; a solve that fails (on every rank alike)
is recorded as failed. For a given K the sample is bitwise reproducible; across K it equals the
serial solve within the bounds of ``docs/curriculum.md`` ("One sample on K ranks").
"""

from mpi4py import MPI

import json
import os
import resource
import subprocess
import sys
import time
from typing import Any

import numpy as np

from pdeladder.dataset import format as fmt
from pdeladder.errors import SolveError, UserInputError
from pdeladder.network import mpi_env, mpiexec
from pdeladder.processes import tied
from pdeladder.slabs import slab_chunk, slabs
from pdeladder.solvers.family import Family, Sample, SolveStats, sample_generator
from pdeladder.solvers.grid import Grid, SlabGrid
from pdeladder.solvers.registry import get_family


def check_ranks(ranks: int, grid: Grid, *, hosts: str | None) -> None:
    """Refuse ``ranks`` that cannot solve ``grid`` here (UserInputError: one line, exit 2)."""
    if ranks < 1:
        raise UserInputError(f"--ranks must be at least 1, got {ranks}")
    if ranks > grid.cells:
        raise UserInputError(
            f"--ranks {ranks} exceeds the {grid.cells} cells along x of resolution "
            f"{grid.resolution}: every rank needs a slab of cells"
        )
    if hosts is not None:
        mpi_env(hosts)  # other machines need a configured interface
    cores = os.cpu_count() or 1
    if hosts is None and ranks > cores:
        raise UserInputError(
            f"--ranks {ranks} exceeds the {cores} cores of this machine; give --hosts to run "
            "across a cluster"
        )


def x_slabs(group: Any, ranks: int) -> tuple[tuple[int, int], ...]:
    """The x slabs that ``ranks`` processes write of a sample of ``group``: whole chunks of its
    ``fields`` (UserInputError when it has fewer x chunks than ranks)."""
    cx, X = group.chunks["fields"].chunks[2], group.sample_shape[2]
    try:
        return tuple(slabs(X, cx, ranks))
    except ValueError:
        raise UserInputError(
            f"{group.where()}: has {-(-X // cx)} x chunks of {cx} rows, too few for "
            f"{ranks} ranks; write to a new stage"
        ) from None


def job(
    family: str,
    out: str,
    grid: Grid,
    params: dict[str, float],
    seed: int,
    stage: str,
    *,
    group: str | None = None,
    index: int | None = None,
) -> dict[str, Any]:
    """The JSON-able description of one slab solve, the argument of this module's ``main``.

    By default the sample is appended to the (appendable) group of ``stage``; with ``group``
    and ``index`` it is written at ``index`` of that existing group, whose x chunks must allow
    the ranks' slabs (a curriculum's fixed-size group: ``curriculum materialize``)."""
    out_spec = {
        "family": family,
        "out": out,
        "grid": [grid.dim, grid.resolution, grid.snapshots, grid.t_end, list(grid.lengths)],
        "params": params,
        "seed": seed,
        "stage": stage,
    }
    if group is not None:
        out_spec.update(group=group, index=index)
    return out_spec


def open_group(spec: dict[str, Any], ranks: int) -> Any:
    """The store group of ``spec``, created (if absent) with x chunks for ``ranks`` slabs."""
    from pdeladder.dataset.store import open_store

    fam = get_family(spec["family"])
    grid = Grid(*spec["grid"])
    store = open_store(spec["out"], mode="a", check_writable=True)
    return store.require_group(spec["stage"], fam, grid, chunk_x=slab_chunk(grid.shape[0], ranks))


def placeholder_reason(params: Any, seed: int) -> str:
    """The reason recorded for the placeholder of the sample of ``params`` and ``seed``: it
    names the sample (kept by :meth:`discard` and :meth:`write_slab`, replaced by the commit)."""
    return f"being solved in x slabs: seed {seed}, parameters {params.vector().tolist()}"


def unfinished(group: Any, reason: str) -> int | None:
    """The first uncommitted sample of ``group`` whose placeholder has ``reason``: the one an
    interrupted solve of the same sample left, which the rerun completes at its index."""
    pending = group.status() != fmt.OK
    if not pending.any():
        return None
    hits = np.flatnonzero(pending & (group.column("reason", pending) == reason))
    return int(hits[0]) if len(hits) else None


def _existing_group(spec: dict[str, Any]) -> Any:
    from pdeladder.dataset.store import open_store

    return open_store(spec["out"], mode="a").group(spec["group"])


def solve_slab(
    fam: Family, params: Any, grid: SlabGrid, seed: int, comm: MPI.Comm
) -> tuple[np.ndarray | None, SolveStats, dict[str, Any]]:
    """This rank's slab of the sample, float32 ``(T, C, hi - lo, Y, Z)`` (None when the solve
    failed, on every rank alike), the solver statistics and provenance (as rank 0 has them,
    wall and solve times the slowest rank's)."""
    stats = SolveStats()
    t0 = time.perf_counter()
    fields, provenance, reason = None, {}, ""
    try:
        fields, provenance = fam.solve(params, grid, sample_generator(seed), comm, stats)
        lo, hi = grid.slabs[comm.rank]
        expected = (grid.snapshots, len(fam.channels_for(grid.dim)), hi - lo, *grid.shape[1:])
        if fields.shape != expected or fields.dtype != np.float32:
            raise AssertionError(
                f"{fam.name} returned {fields.dtype}{fields.shape} on rank {comm.rank}, "
                f"expected float32{expected}"
            )
        if not np.all(np.isfinite(fields)):
            raise SolveError("non-finite values (NaN/Inf) in the solution")
    except SolveError as err:
        fields, reason = None, err.reason
    reasons = comm.allgather(reason)
    stats.wall_s = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
    stats.solve_s = comm.allreduce(stats.solve_s, op=MPI.MAX)
    if any(reasons):
        fields = None
        stats.status, stats.reason = "failed", next(r for r in reasons if r)
    return fields, stats, provenance


def run_on_ranks(spec: dict[str, Any], ranks: int, hosts: str | None = None) -> dict[str, Any]:
    """Run the slab solve of ``spec`` on ``ranks`` MPI processes (on ``hosts``, hydra's
    ``-hosts``, when given) and return rank 0's JSON line. Raises SolveError when a rank died
    (the sample is then not committed). ``mpiexec`` is :func:`~pdeladder.processes.tied` to
    this process: a killed caller (the CLI, a Ray gang task, the driver that owns it) leaves no
    rank solving and writing into the store beside the rerun that resubmits the sample. The
    ranks run with :func:`pdeladder.network.mpi_env`: MPI on loopback unless configured."""
    command = [mpiexec(hosts), "-n", str(ranks), *(["-hosts", hosts] if hosts else [])]
    command += [sys.executable, "-m", "pdeladder.curriculum.slab_solve", json.dumps(spec)]
    env = {**mpi_env(hosts), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(tied(command), env=env, stdout=subprocess.PIPE, text=True, check=False)
    lines = done.stdout.strip().splitlines()
    # gforker exits 0 when a rank was killed; rank 0 then never printed its line
    if done.returncode not in (0, 1) or not lines:
        raise SolveError(
            f"a rank of the {ranks}-rank solve died (mpiexec exit {done.returncode}, no result "
            "line); the sample is not committed"
        )
    return json.loads(lines[-1])


def main(argv: list[str]) -> int:
    comm = MPI.COMM_WORLD
    spec = json.loads(argv[0])
    ranks, rank = comm.size, comm.rank
    fam = get_family(spec["family"])
    params = fam.parse_params(spec["params"])
    grid = Grid(*spec["grid"])
    index = slabs = None
    fixed = spec.get("group") is not None
    if rank == 0 and fixed:
        group = _existing_group(spec)
        slabs = x_slabs(group, ranks)
        index = int(spec["index"])
        group.discard(index)  # an earlier attempt's slabs no longer count
    elif rank == 0:
        group = open_group(spec, ranks)
        slabs = x_slabs(group, ranks)
        # The index: an interrupted solve's of this sample, else a placeholder grows the group
        # by one; either goes back to missing.
        reason = placeholder_reason(params, spec["seed"])
        index = unfinished(group, reason)
        if index is None:
            stats = SolveStats(status="failed", reason=reason)
            index = group.append(Sample(fam.name, None, grid, params, spec["seed"], stats))
        group.discard(index)
    index, slabs = comm.bcast((index, slabs), root=0)
    slab_grid = SlabGrid.of(grid, slabs)
    cpu = time.process_time()
    fields, stats, provenance = solve_slab(fam, params, slab_grid, spec["seed"], comm)
    cpu = time.process_time() - cpu  # this rank's CPU seconds in the solve
    lo, hi = slabs[rank]
    written = 0
    if fields is not None:
        if rank != 0:
            group = _existing_group(spec) if fixed else open_group(spec, ranks)
        group.write_slab(index, lo, hi, fields)
        written = fields.nbytes
    del fields
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # bytes (Linux: KiB)
    per_rank = comm.gather((written, peak, cpu), root=0)
    comm.Barrier()  # every slab has landed
    if rank == 0:
        provenance = {**provenance, "ranks": ranks, "x_slabs": [list(s) for s in slabs]}
        group.commit(index, Sample(fam.name, None, grid, params, spec["seed"], stats, provenance))
        line = {
            "family": fam.name,
            "dim": grid.dim,
            "resolution": grid.resolution,
            "ranks": ranks,
            "dofs": stats.dofs,
            "steps": stats.steps,
            "wall_s": round(stats.wall_s, 4),
            "solve_s": round(stats.solve_s, 4),
            "linear_solver": provenance.get("linear_solver") or provenance.get("nonlinear_solver"),
            "krylov_iterations": stats.krylov_iterations,
            "status": stats.status,
            "index": index,
            "x_slabs": [list(s) for s in slabs],
            "bytes_per_rank": [w for w, _, _ in per_rank],
            "peak_rss_mb_per_rank": [round(p / 2**20, 1) for _, p, _ in per_rank],
            "cpu_s_per_rank": [round(c, 3) for _, _, c in per_rank],
        }
        if stats.status != "ok":
            line["reason"] = stats.reason
        print(json.dumps(line), flush=True)
    comm.Barrier()
    return 0 if stats.status == "ok" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
