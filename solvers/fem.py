"""DOLFINx pieces shared by the families: the structured mesh of a grid, the exact map between
dofs at grid points and the grid, and linear-solver settings chosen per problem.

On a :class:`~pdeladder.solvers.grid.SlabGrid` the mesh is partitioned into x slabs (one per
rank, :func:`x_slab_partitioner`) and each rank samples its own slab: no gather.

``from mpi4py import MPI`` comes before any DOLFINx import, as the DOLFINx wheel requires.
"""

from mpi4py import MPI

import math
import os
import time
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
import ufl
from dolfinx import fem, mesh

from pdeladder.errors import SolveError, UserInputError
from pdeladder.solvers.grid import Grid, SlabGrid


def box_mesh(
    comm: MPI.Comm,
    dim: int,
    cells: int,
    partitioner: Any = None,
    lengths: tuple[float, ...] = (1.0, 1.0, 1.0),
) -> mesh.Mesh:
    """The box ``[0, lengths[a]]`` per axis (default the unit box): an interval, a rectangle of
    triangles or a box of tetrahedra with ``cells`` cells per axis; its vertices are the grid
    points of a :class:`Grid` with ``resolution = cells + 1`` and these lengths.
    ``partitioner``: DOLFINx's cell partitioner when None."""
    if dim == 1:
        return mesh.create_interval(comm, cells, [0.0, lengths[0]], partitioner=partitioner)
    corners = [np.zeros(dim), np.array(lengths[:dim], dtype=np.float64)]
    if dim == 2:
        return mesh.create_rectangle(
            comm, corners, [cells, cells], mesh.CellType.triangle, partitioner=partitioner
        )
    return mesh.create_box(
        comm, corners, [cells, cells, cells], mesh.CellType.tetrahedron, partitioner=partitioner
    )


def grid_mesh(comm: MPI.Comm, grid: Grid) -> mesh.Mesh:
    """The structured mesh whose vertices are ``grid``'s points, partitioned into ``grid``'s x
    slabs when it is a :class:`SlabGrid` solved on more than one rank."""
    slabs = isinstance(grid, SlabGrid) and comm.size > 1
    if slabs and comm.size != len(grid.slabs):
        raise ValueError(f"{len(grid.slabs)} x slabs on {comm.size} ranks")
    partitioner = x_slab_partitioner(grid) if slabs else None
    return box_mesh(comm, grid.dim, grid.cells, partitioner, grid.lengths)


def taylor_hood(msh: mesh.Mesh) -> tuple[fem.FunctionSpace, ...]:
    """The Taylor–Hood space of ``msh``, P2 velocity × P1 pressure, and its collapsed parts:
    ``(W, V, u_dofs, Q, p_dofs)``, ``u_dofs``/``p_dofs`` the parts' dofs in ``W``."""
    import basix.ufl

    cell, dim = msh.basix_cell(), msh.topology.dim
    velocity = basix.ufl.element("Lagrange", cell, 2, shape=(dim,))
    W = fem.functionspace(
        msh, basix.ufl.mixed_element([velocity, basix.ufl.element("Lagrange", cell, 1)])
    )
    return W, *W.sub(0).collapse(), *W.sub(1).collapse()


def part_of(state: fem.Function, space: fem.FunctionSpace, dofs: Any) -> fem.Function:
    """A copy of the part of the mixed ``state`` at ``dofs`` (:func:`taylor_hood`'s
    ``u_dofs``/``p_dofs``), in its collapsed ``space``."""
    part = fem.Function(space)
    part.x.array[:] = state.x.array[dofs]
    return part


def slab_cell_owners(grid: SlabGrid) -> np.ndarray:
    """The rank of each column of cells along x, ``(cells,)`` int32: column ``i`` (between x rows
    ``i`` and ``i + 1``) goes to the rank whose slab holds row ``i``, but the last column goes
    to the last rank, so that every rank's cells touch every row of its slab."""
    owners = np.zeros(grid.cells, dtype=np.int32)
    for rank, (lo, hi) in enumerate(grid.slabs):
        owners[lo : min(hi, grid.cells)] = rank
    owners[-1] = len(grid.slabs) - 1
    if len(np.unique(owners)) != len(grid.slabs):
        raise ValueError(
            f"x slabs {list(grid.slabs)}: a rank gets no cells ({grid.cells} along x); "
            "two one-row slabs at the end of the axis cannot be meshed"
        )
    return owners


def x_slab_partitioner(grid: SlabGrid) -> Any:
    """A DOLFINx cell partitioner (``partitioner=`` of ``create_rectangle`` and kin) that
    sends each cell of :func:`box_mesh` to the rank of its x column (:func:`slab_cell_owners`).

    DOLFINx's structured meshes number the vertex at grid index ``(i, j, k)`` as
    ``i + (nx + 1) (j + (ny + 1) k)``, so a cell's x column is the least ``v mod (nx + 1)`` of
    its vertices ``v``. No ghost cells (the default ``GhostMode.none``); no communication.
    """
    owners = slab_cell_owners(grid)
    vertices = grid.dim + 1  # simplices: interval, triangle, tetrahedron

    def partition(comm: Any, nparts: int, cell_types: Any, cells: list[np.ndarray]) -> Any:
        from dolfinx import cpp

        if nparts != len(grid.slabs):
            raise ValueError(f"{len(grid.slabs)} x slabs, {nparts} parts asked for")
        column = (cells[0].reshape(-1, vertices) % (grid.cells + 1)).min(axis=1)
        return cpp.graph.AdjacencyList_int32(np.ascontiguousarray(owners[column]))

    return partition


def boundary_facets(msh: mesh.Mesh) -> np.ndarray:
    """Indices of the facets of ``msh`` on the walls of its box (owned by this rank): the
    facets whose vertices all lie on a face of the axis-aligned box the mesh's vertices span,
    the unit box for :func:`box_mesh`. Collective over ``msh.comm`` (the box is reduced over
    its ranks).

    On a box mesh these are its exterior facets, found by place rather than by topology alone:
    on a 1D mesh partitioned into x slabs (:func:`grid_mesh`), DOLFINx's
    ``exterior_facet_indices`` also counts the point a rank shares with the next slab, which
    would put a wall inside the domain.
    """
    dim = msh.topology.dim
    x = msh.geometry.x[:, :dim]
    lo = x.min(axis=0) if len(x) else np.full(dim, np.inf)
    hi = x.max(axis=0) if len(x) else np.full(dim, -np.inf)
    msh.comm.Allreduce(MPI.IN_PLACE, lo, op=MPI.MIN)
    msh.comm.Allreduce(MPI.IN_PLACE, hi, op=MPI.MAX)
    atol = 1e-8 * float(np.max(hi - lo))

    def on_walls(y: np.ndarray) -> np.ndarray:  # y: (3, N) points
        y = y[:dim].T
        return np.any(
            np.isclose(y, lo, rtol=0, atol=atol) | np.isclose(y, hi, rtol=0, atol=atol), axis=1
        )

    msh.topology.create_connectivity(dim - 1, dim)
    return mesh.locate_entities_boundary(msh, dim - 1, on_walls)


class GridSampler:
    """Exact map between the dofs of a Lagrange space that sit on grid points and the grid.

    For P1 on :func:`grid_mesh` every dof is a grid point; for P2 the vertex dofs are. Grid
    values are dof values, reordered: no interpolation, no point search. Works in parallel: each
    rank contributes its owned dofs and every rank receives the whole grid.

    On a :class:`SlabGrid` (the mesh partitioned by :func:`grid_mesh` into its x slabs), each
    rank samples only its slab ``[lo, hi)`` from its local dofs, owned and ghost (the ghosts
    are the shared rows at the slab's right end, refreshed from their owners first): the slabs
    tile the grid, no gather, every point sampled by one rank. :meth:`from_grid` and
    :meth:`local` then take the rows the rank draws of a sample's initial fields
    (:meth:`Grid.drawn_rows`), never the whole grid.
    """

    def __init__(self, V: fem.FunctionSpace, grid: Grid):
        self.grid = grid
        self.comm = V.mesh.comm
        self.bs = V.dofmap.index_map_bs
        self.slab: tuple[int, int] | None = None
        owned = V.dofmap.index_map.size_local
        coordinates = V.tabulate_dof_coordinates()
        self.dofs, index = self._on_grid(coordinates[:owned])
        self.rows = grid.drawn_rows(self.comm)
        lo, hi = self.rows
        if index.size and not (lo <= index[:, 0].min() and index[:, 0].max() < hi):
            raise ValueError(f"rank {self.comm.rank} owns dofs outside its x rows [{lo}, {hi})")
        self.flat = np.ravel_multi_index((index - [lo, 0, 0]).T, (hi - lo, *grid.shape[1:]))
        if isinstance(grid, SlabGrid):
            self._init_slab(coordinates, grid)
            return
        counts = self.comm.allgather(len(self.flat))
        if sum(counts) != grid.points:
            raise ValueError(f"space has {sum(counts)} dofs on grid points, grid has {grid.points}")
        self._all_flat = (
            np.concatenate(self.comm.allgather(self.flat)) if self.comm.size > 1 else self.flat
        )

    def _on_grid(self, coordinates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The dofs (rows of ``coordinates``) at grid points, and those points' grid indices
        ``(n, 3)``."""
        x = coordinates[:, : self.grid.dim] / np.array(self.grid.spacing)
        ijk = np.rint(x)
        on_grid = np.all(np.abs(x - ijk) < 1e-6, axis=1)
        dofs = np.flatnonzero(on_grid).astype(np.int32)
        index = np.zeros((len(dofs), 3), dtype=np.int64)
        index[:, : self.grid.dim] = ijk[on_grid]
        return dofs, index

    def _init_slab(self, coordinates: np.ndarray, grid: SlabGrid) -> None:
        lo, hi = self.slab = (
            grid.slabs[self.comm.rank] if self.comm.size > 1 else (0, grid.shape[0])
        )
        dofs, index = self._on_grid(coordinates)
        inside = (index[:, 0] >= lo) & (index[:, 0] < hi)
        index = index[inside] - [lo, 0, 0]
        shape = (hi - lo, *grid.shape[1:])
        self._slab_dofs = dofs[inside]
        self._slab_flat = np.ravel_multi_index(index.T, shape)
        found = len(np.unique(self._slab_flat))
        if found != len(self._slab_flat) or found != math.prod(shape):
            raise ValueError(
                f"rank {self.comm.rank}: {found} of the {math.prod(shape)} grid points of its x "
                f"slab [{lo}, {hi}) are local dofs; the mesh is not partitioned in these slabs"
            )

    def to_grid(self, u: fem.Function) -> np.ndarray:
        """Grid values of ``u``: float64 ``(bs, X, Y, Z)``, identical on every rank; on a
        :class:`SlabGrid`, this rank's slab ``(bs, hi - lo, Y, Z)``."""
        if self.slab is not None:
            if self.comm.size > 1:
                u.x.scatter_forward()
            lo, hi = self.slab
            out = np.empty((math.prod((hi - lo, *self.grid.shape[1:])), self.bs))
            out[self._slab_flat] = u.x.array.reshape(-1, self.bs)[self._slab_dofs]
            return out.T.reshape(self.bs, hi - lo, *self.grid.shape[1:])
        local = u.x.array.reshape(-1, self.bs)[self.dofs]
        values = np.concatenate(self.comm.allgather(local)) if self.comm.size > 1 else local
        out = np.empty((self.grid.points, self.bs))
        out[self._all_flat] = values
        return out.T.reshape(self.bs, *self.grid.shape)

    def from_grid(self, u: fem.Function, values: np.ndarray) -> None:
        """Set ``u``'s dofs at grid points from ``values`` ``(bs, X, Y, Z)`` or ``(X, Y, Z)``
        (on a :class:`SlabGrid` of several ranks, ``X`` the rows :meth:`Grid.drawn_rows` gives).

        Exact for P1 (every dof is a grid point); dofs off the grid are left untouched.
        """
        flat = np.asarray(values).reshape(self.bs, -1).T
        u.x.array.reshape(-1, self.bs)[self.dofs] = flat[self.flat]
        u.x.scatter_forward()

    def local(self, values: np.ndarray) -> np.ndarray:
        """The part of ``values`` ``(..., X, Y, Z)`` (as :meth:`from_grid` takes them) that
        :meth:`to_grid` returns on this rank: its x slab on a :class:`SlabGrid`, all of it
        otherwise."""
        if self.slab is None:
            return values
        return values[..., self.slab[0] - self.rows[0] : self.slab[1] - self.rows[0], :, :]

    def max(self, value: float) -> float:
        """The largest of ``value`` over the ranks sampling slabs (``value`` itself otherwise),
        for a decision on sampled values that every rank must take alike."""
        if self.slab is None or self.comm.size == 1:
            return value
        return self.comm.allreduce(value, op=MPI.MAX)

    def on_all_ranks(self, flag: bool) -> bool:
        """Whether ``flag`` holds on every rank sampling slabs (``flag`` itself otherwise)."""
        if self.slab is None or self.comm.size == 1:
            return flag
        return self.comm.allreduce(flag, op=MPI.LAND)


#: PETSc's option to start a Krylov solve from the vector it is given.
_WARM = {"ksp_initial_guess_nonzero": True}

#: Linear-solver settings by name: a dict of PETSc options. The heat benchmark measured, on
#: this kind of machine, CG + Jacobi ~3x faster than CG + AMG for implicit heat steps, and a
#: reused Cholesky factorization ahead of AMG in 2D; :func:`choose_solver` encodes that. The
#: ``*_warm`` entries start CG from the solution already in ``x`` (the previous step's).
#: ``gmres_lagged_lu`` is GMRES preconditioned by the LU factorization of an earlier step's
#: matrix (:class:`LaggedFactorization`), for a time-stepped system that changes a little each
#: step: the Navier–Stokes Oseen system, whose numeric factorization was most of a step.
SOLVERS: dict[str, dict[str, Any]] = {
    "cg_jacobi": {"ksp_type": "cg", "pc_type": "jacobi", "ksp_rtol": 1e-10},
    "cg_amg": {"ksp_type": "cg", "pc_type": "gamg", "ksp_rtol": 1e-10},
    "cholesky": {"ksp_type": "preonly", "pc_type": "cholesky"},
    "lu": {"ksp_type": "preonly", "pc_type": "lu"},
    "gmres_ilu": {"ksp_type": "gmres", "pc_type": "ilu", "ksp_rtol": 1e-10},
    "gmres_amg": {"ksp_type": "gmres", "pc_type": "gamg", "ksp_rtol": 1e-10},
    "gmres_lagged_lu": {
        "ksp_type": "gmres",
        "pc_type": "lu",
        "ksp_rtol": 1e-12,
        "ksp_atol": 0.0,
        "ksp_max_it": 20,
        **_WARM,
    },
    "cg_jacobi_warm": {"ksp_type": "cg", "pc_type": "jacobi", "ksp_rtol": 1e-10, **_WARM},
    "cg_amg_warm": {"ksp_type": "cg", "pc_type": "gamg", "ksp_rtol": 1e-10, **_WARM},
    "cg_bjacobi_icc_warm": {
        "ksp_type": "cg",
        "pc_type": "bjacobi",
        "sub_pc_type": "icc",
        "ksp_rtol": 1e-10,
        **_WARM,
    },
    "cg_asm_icc1_warm": {
        "ksp_type": "cg",
        "pc_type": "asm",
        "sub_pc_type": "icc",
        "sub_pc_factor_levels": 1,
        "ksp_rtol": 1e-10,
        **_WARM,
    },
}

#: The environment variable that names the :data:`SOLVERS` entry of a mass system that one rank
#: would factorize, on more than one rank (``benchmarks/solve_ranks.py --solver``).
PARALLEL_SOLVER_ENV = "PDELADDER_PARALLEL_SOLVER"


def choose_solver(kind: str, dim: int, dofs: int, ranks: int = 1) -> str:
    """Pick a solver for one linear system that is reused across time steps.

    Args:
        kind: ``"mass"`` (SPD, mass-dominated: M + dt K with small dt), ``"elliptic"`` (SPD,
            stiffness-dominated: Poisson, Darcy), ``"nonsymmetric"`` (advection, Oseen) or
            ``"saddle"`` (Stokes/Navier–Stokes blocks: :class:`LaggedFactorization`).
        dim, dofs: problem size, for the direct/iterative switch.
        ranks: the MPI processes sharing the system. A factorization on more than one is
            MUMPS's and an ILU(0) one per rank's overlapping block (:func:`solver_options`;
            every family measured on two ranks: docs/curriculum.md), except a mass system's:
            CG + overlapping Schwarz with ICC(1) blocks, warm-started (``cg_asm_icc1_warm``,
            or the entry that :data:`PARALLEL_SOLVER_ENV` names). Measured
            (``benchmarks/solve_ranks.py``, heat 2D 257², 260 steps, 2 ranks on 2 shared
            cores, 3 rounds): solve 6.1 s best, 23 ms of CPU a step per rank, against MUMPS's
            16.8 s and 43 ms (serial Cholesky: 2.7 s).
    """
    small = dofs <= (200_000 if dim <= 2 else 30_000)
    if kind == "saddle":
        return "gmres_lagged_lu"
    if kind == "nonsymmetric":
        return "lu" if small else "gmres_ilu"
    if kind == "elliptic":
        return "cholesky" if small else "cg_amg"
    if kind == "mass" and not (small and dim <= 2):
        return "cg_jacobi"
    if kind == "mass" and ranks == 1:
        return "cholesky"
    if kind == "mass":
        name = os.environ.get(PARALLEL_SOLVER_ENV, "cg_asm_icc1_warm")
        if name not in SOLVERS:
            raise UserInputError(f"{PARALLEL_SOLVER_ENV}={name!r} is not one of {list(SOLVERS)}")
        return name
    raise ValueError(f"unknown system kind {kind!r}")


def solver_options(comm: MPI.Comm, solver: str) -> dict[str, Any]:
    """The PETSc options of the named solver on ``comm``: :data:`SOLVERS`, with MUMPS for a
    factorization on more than one rank, an incomplete factorization there on each rank's
    overlapping block (additive Schwarz, overlap 1: PETSc's ILU is serial only), and GAMG
    there without aggressive coarsening of its first level."""
    options = dict(SOLVERS[solver])
    if comm.size == 1:
        return options
    if options["pc_type"] in ("cholesky", "lu"):
        options["pc_factor_mat_solver_type"] = "mumps"
    elif options["pc_type"] == "ilu":
        options |= {"pc_type": "asm", "sub_pc_type": "ilu"}
    elif options["pc_type"] == "gamg":
        # measured (Darcy, chip stack 3D 65³): faster on two ranks, slower on one
        options["pc_gamg_aggressive_coarsening"] = 0
    return options


def solver_provenance(comm: MPI.Comm, solver: str) -> str:
    """The named solver as a sample's provenance records it (``linear_solver``): what runs on
    ``comm``, the :data:`SOLVERS` name followed by the package that factorizes, where one does
    (:func:`solver_options`: ``"cholesky (MUMPS)"`` on more than one rank), or the
    preconditioner that takes the named one's place there (``"gmres_ilu (ASM)"``)."""
    options = solver_options(comm, solver)
    replaced = options["pc_type"] if options["pc_type"] != SOLVERS[solver]["pc_type"] else None
    package = options.get("pc_factor_mat_solver_type") or replaced
    return f"{solver} ({package.upper()})" if package else solver


def solve_steady(
    a: Any, L: Any, bcs: list[Any], kind: str, name: str, stats: Any = None
) -> tuple[fem.Function, str]:
    """The solution of the steady linear problem ``a(u, v) = L(v)`` for all ``v`` under the
    Dirichlet conditions ``bcs``, by the solver :func:`choose_solver` picks for the system's
    ``kind`` and size (one DOLFINx ``LinearProblem``, its convergence checked: DOLFINx does
    not). ``name`` scopes its PETSc options; ``stats`` (a ``SolveStats``) receives the dofs, the
    Krylov iterations and the solve's seconds. Returns the solution and the solver as a
    sample's provenance names it (:func:`solver_provenance`)."""
    from dolfinx.fem.petsc import LinearProblem

    V = a.arguments()[-1].ufl_function_space()
    msh, dofs = V.mesh, V.dofmap.index_map.size_global
    solver = choose_solver(kind, msh.topology.dim, dofs)
    problem = LinearProblem(
        a,
        L,
        bcs=bcs,
        petsc_options_prefix=f"{name}_{id(a)}_",
        petsc_options=solver_options(msh.comm, solver),
    )
    t0 = time.perf_counter()
    try:
        u_h = problem.solve()
        iterations = converged(problem.solver)
    finally:
        for obj in (problem.solver, problem.A, problem.b, problem.x):
            obj.destroy()
    if stats is not None:
        stats.dofs, stats.steps = dofs, 1
        stats.krylov_iterations += iterations
        stats.solve_s += time.perf_counter() - t0
    return u_h, solver_provenance(msh.comm, solver)


def make_ksp(comm: MPI.Comm, A: Any, solver: str, prefix: str) -> Any:
    """A PETSc KSP for the matrix ``A`` with the named settings, set up once for reuse.

    ``prefix`` must be unique per problem (it scopes the options). A factorization
    (``cholesky``, ``lu``, ``gmres_lagged_lu``) is computed here; the first two reuse it while
    ``A`` is unchanged (PETSc refactorizes a changed ``A``), :class:`LaggedFactorization`
    beyond that."""
    from petsc4py import PETSc

    ksp = PETSc.KSP().create(comm)
    ksp.setOptionsPrefix(prefix)
    opts = PETSc.Options()
    options = solver_options(comm, solver)
    for key, value in options.items():
        opts[f"{prefix}{key}"] = value
    ksp.setOperators(A)
    ksp.setFromOptions()
    ksp.setUp()
    for key in options:
        opts.delValue(f"{prefix}{key}")
    return ksp


def converged(ksp: Any) -> int:
    """The iteration count of ``ksp``'s last solve, raising :class:`SolveError` unless PETSc
    reports convergence (DOLFINx does not check it)."""
    reason = ksp.getConvergedReason()
    if reason <= 0:
        raise SolveError(f"Krylov solve diverged (PETSc reason {reason})")
    return ksp.getIterationNumber()


def solve_checked(ksp: Any, b: Any, x: Any) -> int:
    """``ksp.solve(b, x)``, checked by :func:`converged`; returns the iteration count."""
    ksp.solve(b, x)
    return converged(ksp)


#: A lagged factorization is refreshed after a solve that needed more GMRES iterations than this.
LAGGED_ITERATIONS = 5


class LaggedFactorization:
    """Solves with a ``gmres_lagged_lu`` KSP (:func:`make_ksp`, which factorizes its matrix)
    whose matrix is reassembled in place before each solve (a time step's).

    GMRES is preconditioned by the factorization of an earlier step's matrix while a solve
    converges in at most :data:`LAGGED_ITERATIONS` iterations; after one that needs more, the
    next solve refactorizes first (numerically: the symbolic analysis stays), and a solve that
    does not converge within ``ksp_max_it`` with the old factorization is repeated with a new
    one. So every solve meets ``ksp_rtol`` (1e-12), and a step costs a few triangular solves
    instead of a factorization. Measured (Navier–Stokes 2D, the first 40 steps at 129² and 14 at 257², one
    rank): 0.66 s a step against 0.91 s refactorized each step, and 3.1 s against 6.0 s; on two
    ranks at 129², 0.38 s against 0.59 s. Deterministic for a given number of ranks.
    """

    def __init__(self, ksp: Any):
        if ksp.getType() == "preonly":  # it would apply the old factorization as the answer
            raise ValueError("a lagged factorization needs a Krylov method, not preonly")
        self.ksp = ksp
        #: numeric factorizations so far (:func:`make_ksp` computed the first)
        self.factorizations = 1
        self._stale = False  # refactorize before the next solve
        ksp.getPC().setReusePreconditioner(True)

    def solve(self, b: Any, x: Any) -> int:
        """Solve ``A x = b`` from the initial guess in ``x``; returns the GMRES iterations."""
        pc = self.ksp.getPC()
        if self._stale:
            pc.setReusePreconditioner(False)  # the changed matrix is factorized at setup
            self.factorizations += 1
        self.ksp.solve(b, x)
        if self.ksp.getConvergedReason() <= 0 and not self._stale:
            A, P = self.ksp.getOperators()
            pc.reset()  # the old factorization did not do: a new one of the same matrix
            self.ksp.setOperators(A, P)
            self.factorizations += 1
            self.ksp.solve(b, x)
        iterations = converged(self.ksp)
        self._stale = iterations > LAGGED_ITERATIONS
        pc.setReusePreconditioner(True)
        return iterations


def l2_norm(*errors: Any, dx: Any = None) -> float:
    """``sqrt(∫ Σ_k |e_k|² dx)`` over all ranks for UFL expressions ``errors`` (scalar or
    vector) on one mesh: the L2 error of a manufactured solution. ``dx``: ``ufl.dx`` when None
    (a measure with a quadrature degree where UFL's estimate for the exact solution is high)."""
    integrand = errors[0] ** 2
    for e in errors[1:]:
        integrand = integrand + e**2
    form = fem.form(integrand * (ufl.dx if dx is None else dx))
    return math.sqrt(form.mesh.comm.allreduce(fem.assemble_scalar(form), op=MPI.SUM))


def time_profile(
    study: Literal["space", "time"], omega: float
) -> tuple[Callable[[float], float], Callable[[float], float]]:
    """The time factor ``g`` of a manufactured solution ``g(t) φ(x)`` and its derivative ``g'``:
    ``g = 1 + t`` for the space study (implicit Euler and Crank–Nicolson integrate it exactly,
    so only the spatial error remains), ``g = 1 + sin(ω t)`` for the time study."""
    if study == "space":
        return (lambda t: 1.0 + t), (lambda t: 1.0)
    return (lambda t: 1.0 + math.sin(omega * t)), (lambda t: omega * math.cos(omega * t))
