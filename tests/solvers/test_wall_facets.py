"""The walls of a family's box (``boundary_facets`` in solvers/fem.py): the exterior facets of a
serial box mesh, and only the box's walls on a mesh partitioned into x slabs, where in 1D the
point a rank shares with the next slab is an exterior facet of that rank's mesh too; a 1D sample
of a family with zero walls solved in two x slabs equals the serial one."""

from mpi4py import MPI

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from dolfinx import mesh

from pdeladder.solvers.fem import boundary_facets, box_mesh

MPIEXEC = os.path.join(os.path.dirname(sys.executable), "mpiexec")


@pytest.mark.parametrize("dim", [1, 2, 3])
def test_on_one_rank_the_walls_are_the_exterior_facets(dim: int):
    msh = box_mesh(MPI.COMM_SELF, dim, 4)
    walls = boundary_facets(msh)
    exterior = mesh.exterior_facet_indices(msh.topology)
    np.testing.assert_array_equal(np.sort(walls), np.sort(exterior))
    assert len(walls) == {1: 2, 2: 4 * 4, 3: 6 * 4 * 4 * 2}[dim]  # triangles, tetrahedra
    x = mesh.compute_midpoints(msh, dim - 1, walls)[:, :dim]
    assert np.all(np.any(np.isclose(x, 0) | np.isclose(x, 1), axis=1))


# On 2 ranks in x slabs, 17 points: where the ranks' wall facets are, and
# the 1D samples of the families with zero walls, in slabs against the serial solve.
_SLABS = textwrap.dedent(
    """
    import json, sys
    from mpi4py import MPI
    import numpy as np
    from dolfinx import mesh
    from pdeladder import slabs as cut
    from pdeladder.curriculum.slab_solve import solve_slab
    from pdeladder.solvers import get_family
    from pdeladder.solvers.fem import boundary_facets, grid_mesh
    from pdeladder.solvers.grid import SlabGrid

    comm, out = MPI.COMM_WORLD, {}
    slabs = tuple(cut.slabs(17, cut.slab_chunk(17, comm.size), comm.size))

    def x_of(msh, facets):
        points = mesh.compute_midpoints(msh, 0, np.asarray(facets, dtype=np.int32))
        return sorted(np.concatenate(comm.allgather(points[:, 0])).round(6).tolist())

    msh = grid_mesh(comm, SlabGrid(1, 17, 1, 0.0, slabs))
    out["walls"] = x_of(msh, boundary_facets(msh))
    for name in json.loads(sys.argv[1]):
        fam = get_family(name)
        g = fam.grid(1, 17, 1 if fam.steady else 5)
        sg = SlabGrid(g.dim, g.resolution, g.snapshots, g.t_end, slabs)
        fields, stats, _ = solve_slab(fam, fam.Params(), sg, 7, comm)
        assert stats.status == "ok", stats.reason
        parts = comm.gather(fields, root=0)
        if comm.rank == 0:
            serial = fam.run(fam.Params(), g, 7).fields
            whole = np.concatenate(parts, axis=2)
            out[name] = float(np.abs(whole - serial).max() / np.abs(serial).max())
    if comm.rank == 0:
        print(json.dumps(out))
    """
)


@pytest.mark.mpi
def test_a_1d_sample_in_two_x_slabs_has_walls_at_the_ends_only_and_is_the_serial_one():
    families = ["darcy", "wave", "burgers"]  # zero walls: u = 0 where the walls are
    done = subprocess.run(
        [MPIEXEC, "-n", "2", sys.executable, "-c", _SLABS, json.dumps(families)],
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["walls"] == [0.0, 1.0]  # not x = 9/16, the point the slabs share
    for name in families:
        assert out[name] <= 1e-6, (name, out[name])  # the bound of solvers check's two_ranks
