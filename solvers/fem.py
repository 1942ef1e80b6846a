"""DOLFINx pieces shared by the families: the structured mesh of a grid, the exact map between
dofs at grid points and the grid, and linear-solver settings chosen per problem.

``from mpi4py import MPI`` comes before any DOLFINx import, as the DOLFINx wheel requires.
"""

from mpi4py import MPI

from typing import Any

import numpy as np
from dolfinx import fem, mesh

from pdeladder.errors import SolveError
from pdeladder.solvers.grid import Grid


def box_mesh(comm: MPI.Comm, dim: int, cells: int) -> mesh.Mesh:
    """Unit interval, square (triangles) or cube (tetrahedra) with ``cells`` cells per axis; its
    vertices are the grid points of a :class:`Grid` with ``resolution = cells + 1``."""
    if dim == 1:
        return mesh.create_unit_interval(comm, cells)
    if dim == 2:
        return mesh.create_unit_square(comm, cells, cells, mesh.CellType.triangle)
    return mesh.create_unit_cube(comm, cells, cells, cells, mesh.CellType.tetrahedron)


def grid_mesh(comm: MPI.Comm, grid: Grid) -> mesh.Mesh:
    """The structured mesh whose vertices are ``grid``'s points."""
    return box_mesh(comm, grid.dim, grid.cells)


def boundary_facets(msh: mesh.Mesh) -> np.ndarray:
    """Indices of the exterior facets of ``msh`` (owned by this rank)."""
    fdim = msh.topology.dim - 1
    msh.topology.create_connectivity(fdim, msh.topology.dim)
    return mesh.exterior_facet_indices(msh.topology)


class GridSampler:
    """Exact map between the dofs of a Lagrange space that sit on grid points and the grid.

    For P1 on :func:`grid_mesh` every dof is a grid point; for P2 the vertex dofs are. Grid
    values are dof values, reordered: no interpolation, no point search. Works in parallel: each
    rank contributes its owned dofs and every rank receives the whole grid.
    """

    def __init__(self, V: fem.FunctionSpace, grid: Grid):
        self.grid = grid
        self.comm = V.mesh.comm
        self.bs = V.dofmap.index_map_bs
        owned = V.dofmap.index_map.size_local
        x = V.tabulate_dof_coordinates()[:owned, : grid.dim] * grid.cells
        ijk = np.rint(x)
        on_grid = np.all(np.abs(x - ijk) < 1e-6, axis=1)
        self.dofs = np.flatnonzero(on_grid).astype(np.int32)
        index = np.zeros((len(self.dofs), 3), dtype=np.int64)
        index[:, : grid.dim] = ijk[on_grid]
        self.flat = np.ravel_multi_index(index.T, grid.shape)
        counts = self.comm.allgather(len(self.flat))
        if sum(counts) != grid.points:
            raise ValueError(f"space has {sum(counts)} dofs on grid points, grid has {grid.points}")
        self._all_flat = (
            np.concatenate(self.comm.allgather(self.flat)) if self.comm.size > 1 else self.flat
        )

    def to_grid(self, u: fem.Function) -> np.ndarray:
        """Grid values of ``u``: float64 ``(bs, X, Y, Z)``, identical on every rank."""
        local = u.x.array.reshape(-1, self.bs)[self.dofs]
        values = np.concatenate(self.comm.allgather(local)) if self.comm.size > 1 else local
        out = np.empty((self.grid.points, self.bs))
        out[self._all_flat] = values
        return out.T.reshape(self.bs, *self.grid.shape)

    def from_grid(self, u: fem.Function, values: np.ndarray) -> None:
        """Set ``u``'s dofs at grid points from ``values`` ``(bs, X, Y, Z)`` or ``(X, Y, Z)``.

        Exact for P1 (every dof is a grid point); dofs off the grid are left untouched.
        """
        flat = np.asarray(values).reshape(self.bs, -1).T
        u.x.array.reshape(-1, self.bs)[self.dofs] = flat[self.flat]
        u.x.scatter_forward()


#: Linear-solver settings by name: a dict of PETSc options. The heat benchmark measured, on
#: this kind of machine, CG + Jacobi ~3x faster than CG + AMG for implicit heat steps, and a
#: reused Cholesky factorization ahead of AMG in 2D; :func:`choose_solver` encodes that.
SOLVERS: dict[str, dict[str, Any]] = {
    "cg_jacobi": {"ksp_type": "cg", "pc_type": "jacobi", "ksp_rtol": 1e-10},
    "cg_amg": {"ksp_type": "cg", "pc_type": "gamg", "ksp_rtol": 1e-10},
    "cholesky": {"ksp_type": "preonly", "pc_type": "cholesky"},
    "lu": {"ksp_type": "preonly", "pc_type": "lu"},
    "gmres_ilu": {"ksp_type": "gmres", "pc_type": "ilu", "ksp_rtol": 1e-10},
    "gmres_amg": {"ksp_type": "gmres", "pc_type": "gamg", "ksp_rtol": 1e-10},
}


def choose_solver(kind: str, dim: int, dofs: int) -> str:
    """Pick a solver for one linear system that is reused across time steps.

    Args:
        kind: ``"mass"`` (SPD, mass-dominated: M + dt K with small dt), ``"elliptic"`` (SPD,
            stiffness-dominated: Poisson, Darcy), ``"nonsymmetric"`` (advection, Oseen) or
            ``"saddle"`` (Stokes/Navier–Stokes blocks).
        dim, dofs: problem size, for the direct/iterative switch.
    """
    small = dofs <= (200_000 if dim <= 2 else 30_000)
    if kind == "saddle":
        return "lu"
    if kind == "nonsymmetric":
        return "lu" if small else "gmres_ilu"
    if kind == "elliptic":
        return "cholesky" if small else "cg_amg"
    if kind == "mass":
        return "cholesky" if small and dim <= 2 else "cg_jacobi"
    raise ValueError(f"unknown system kind {kind!r}")


def make_ksp(comm: MPI.Comm, A: Any, solver: str, prefix: str) -> Any:
    """A PETSc KSP for the matrix ``A`` with the named settings, set up once for reuse.

    ``prefix`` must be unique per problem (it scopes the options). For ``cholesky``/``lu`` the
    factorization is computed here and reused by every later solve.
    """
    from petsc4py import PETSc

    ksp = PETSc.KSP().create(comm)
    ksp.setOptionsPrefix(prefix)
    opts = PETSc.Options()
    for key, value in SOLVERS[solver].items():
        opts[f"{prefix}{key}"] = value
    if solver in ("cholesky", "lu") and comm.size > 1:
        opts[f"{prefix}pc_factor_mat_solver_type"] = "mumps"
    ksp.setOperators(A)
    ksp.setFromOptions()
    ksp.setUp()
    for key in SOLVERS[solver]:
        opts.delValue(f"{prefix}{key}")
    return ksp


def solve_checked(ksp: Any, b: Any, x: Any) -> int:
    """``ksp.solve(b, x)``, raising :class:`SolveError` unless PETSc reports convergence;
    returns the iteration count."""
    ksp.solve(b, x)
    reason = ksp.getConvergedReason()
    if reason <= 0:
        raise SolveError(f"Krylov solve diverged (PETSc reason {reason})")
    return ksp.getIterationNumber()
