"""The walls of a family's box (``boundary_facets`` in solvers/fem.py): the exterior facets of a
serial box mesh, and only the box's walls on a mesh partitioned into x slabs, where in 1D the
point a rank shares with the next slab is an exterior facet of that rank's mesh too; so a 1D
sample of a family with zero walls solved in two x slabs equals the serial one (the contract's
``two_ranks`` check)."""

from mpi4py import MPI

import json
import textwrap

import numpy as np
import pytest
from dolfinx import mesh

from pdeladder.solvers.checks import Target, two_ranks
from pdeladder.solvers.fem import boundary_facets, box_mesh
from pdeladder.solvers.registry import get_family


@pytest.mark.parametrize("dim", [1, 2, 3])
def test_on_one_rank_the_walls_are_the_exterior_facets(dim: int):
    msh = box_mesh(MPI.COMM_SELF, dim, 4)
    walls = boundary_facets(msh)
    exterior = mesh.exterior_facet_indices(msh.topology)
    np.testing.assert_array_equal(np.sort(walls), np.sort(exterior))
    assert len(walls) == {1: 2, 2: 4 * 4, 3: 6 * 4 * 4 * 2}[dim]  # triangles, tetrahedra
    x = mesh.compute_midpoints(msh, dim - 1, walls)[:, :dim]
    assert np.all(np.any(np.isclose(x, 0) | np.isclose(x, 1), axis=1))


# On 2 ranks in x slabs, 17 points: where the ranks' wall facets are.
_SLABS = textwrap.dedent(
    """
    import json
    from mpi4py import MPI
    import numpy as np
    from dolfinx import mesh
    from pdeladder import slabs as cut
    from pdeladder.solvers.fem import boundary_facets, grid_mesh
    from pdeladder.solvers.grid import SlabGrid

    comm = MPI.COMM_WORLD
    slabs = tuple(cut.slabs(17, cut.slab_chunk(17, comm.size), comm.size))
    msh = grid_mesh(comm, SlabGrid(1, 17, 1, 0.0, slabs=slabs))
    walls = mesh.compute_midpoints(msh, 0, np.asarray(boundary_facets(msh), dtype=np.int32))
    x = sorted(np.concatenate(comm.allgather(walls[:, 0])).round(6).tolist())
    if comm.rank == 0:
        print(json.dumps(x))
    """
)


@pytest.mark.mpi
def test_in_two_x_slabs_the_walls_are_the_ends_only(two_ranks):
    assert json.loads(two_ranks(_SLABS)[-1]) == [0.0, 1.0]  # not x = 9/16


@pytest.mark.mpi
@pytest.mark.parametrize("name", ["darcy", "wave", "burgers"])  # zero walls
def test_a_1d_sample_of_a_family_with_zero_walls_in_two_x_slabs_is_the_serial_one(name: str):
    result = two_ranks(
        Target(get_family(name), 1)
    )  # the contract's check, as solvers check runs it
    assert result.passed, result.detail
