"""DOLFINx functions on a :class:`~pdeladder.solvers.geometry.domain.Domain`'s mesh, evaluated
at points and sampled onto the regular grid of its bounding box with a mask.

Each point is evaluated once, on the lowest rank one of whose owned cells contains it, and the
values are summed over the ranks, so every rank gets the whole array and the result does not
depend on the number of ranks (to rounding where a point lies on a cell edge).
"""

from mpi4py import MPI  # first: the DOLFINx wheel loads libmpi through it

import numpy as np
from dolfinx import fem, geometry

from pdeladder.solvers.geometry.domain import Domain


def evaluate(u: fem.Function, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``u`` at ``points`` ``(N, 3)`` in metres (collective over ``u``'s mesh's ranks).

    Returns float64 ``(N, value_size)`` values, 0 at a point in no cell, and the bool ``(N,)``
    mask of the points in the mesh; identical on every rank.
    """
    msh = u.function_space.mesh
    comm, tdim = msh.comm, msh.topology.dim
    points = np.ascontiguousarray(points, dtype=msh.geometry.x.dtype)
    owned = np.arange(msh.topology.index_map(tdim).size_local, dtype=np.int32)
    tree = geometry.bb_tree(msh, tdim, entities=owned)
    cells = geometry.compute_colliding_cells(
        msh, geometry.compute_collisions_points(tree, points), points
    )
    found = np.diff(cells.offsets) > 0
    # The lowest rank that finds a point evaluates it.
    claim = np.where(found, comm.rank, comm.size).astype(np.int32)
    if comm.size > 1:
        comm.Allreduce(MPI.IN_PLACE, claim, op=MPI.MIN)
    mine = np.flatnonzero(claim == comm.rank)
    values = np.zeros((len(points), u.function_space.value_size))
    if len(mine):
        first = cells.array[cells.offsets[mine]]
        values[mine] = u.eval(points[mine], first).reshape(len(mine), -1)
    if comm.size > 1:
        comm.Allreduce(MPI.IN_PLACE, values, op=MPI.SUM)
    return values, claim < comm.size


def sample_on_grid(
    u: fem.Function, domain: Domain, resolution: int
) -> tuple[np.ndarray, np.ndarray]:
    """``u`` on the regular grid of ``domain``'s box, ``resolution`` points per axis
    (:meth:`Domain.points`); collective.

    Returns float64 values ``(value_size, X, Y, Z)``, 0 outside the domain, and the float64
    mask ``(X, Y, Z)``, 1 at the grid points in the mesh, 0 elsewhere; identical on every
    rank.
    """
    points = domain.points(resolution)  # (3, X, Y, Z)
    shape = points.shape[1:]
    values, inside = evaluate(u, points.reshape(3, -1).T)
    return values.T.reshape(-1, *shape), inside.reshape(shape).astype(np.float64)
