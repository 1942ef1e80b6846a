"""The conforming DOLFINx mesh of a :class:`~pdeladder.solvers.geometry.domain.Domain`, made by
gmsh (OpenCASCADE: the box less the obstacles' disks) and converted by DOLFINx's gmsh module.

gmsh runs on one rank of the communicator, quiet and single-threaded, and DOLFINx distributes the
mesh to all ranks. Facets carry the tags below: the inlet is the wall ``x = 0``, the outlet the
wall ``x = L_0``, the walls the others, and obstacle ``i``'s boundary ``OBSTACLE + i``.
"""

from mpi4py import MPI  # first: the DOLFINx wheel loads libmpi through it

from dataclasses import dataclass

import gmsh
import numpy as np
from dolfinx import mesh
from dolfinx.io import gmsh as gmshio

from pdeladder.errors import SolveError, UserInputError
from pdeladder.solvers.geometry.domain import Domain

#: Cell tag of the domain's cells.
FLUID = 1
#: Facet tags: the wall x = 0, the wall x = L_0, the other walls, and obstacle i's boundary
#: ``OBSTACLE + i``.
INLET, OUTLET, WALLS, OBSTACLE = 1, 2, 3, 10


def obstacle_tag(i: int) -> int:
    """The facet tag of obstacle ``i``'s boundary."""
    return OBSTACLE + i


@dataclass(frozen=True)
class DomainMesh:
    """A domain's mesh and its tags.

    Attributes:
        domain: what was meshed.
        mesh: the DOLFINx mesh, distributed over its communicator.
        facets: facet tags (:data:`INLET`, :data:`OUTLET`, :data:`WALLS`, ``OBSTACLE + i``).
        size, obstacle_size: the mesh sizes far from and on the obstacles, in metres.
    """

    domain: Domain
    mesh: mesh.Mesh
    facets: mesh.MeshTags
    size: float
    obstacle_size: float

    def obstacle_tags(self) -> tuple[int, ...]:
        return tuple(obstacle_tag(i) for i in range(len(self.domain.obstacles)))


def domain_mesh(
    domain: Domain,
    comm: MPI.Comm,
    size: float,
    *,
    obstacle_size: float | None = None,
    grading: float | None = None,
    order: int = 1,
    rank: int = 0,
) -> DomainMesh:
    """Mesh ``domain`` with triangles on ``comm`` (collective), made on ``rank``.

    Args:
        size: the cells' size in metres far from the obstacles.
        obstacle_size: the size on the obstacles' boundaries (``size / 4`` when None); it grows
            linearly with the distance to the nearest obstacle up to ``size``.
        grading: the distance in metres over which it grows (twice the largest obstacle's
            diameter when None).
        order: geometric degree of the cells: 1 (straight edges) or 2 (edges on an obstacle
            curved onto it, a quadratic coordinate map).

    Raises :class:`UserInputError` for sizes that are not positive or a 3D domain (2D only so
    far), and :class:`SolveError` (one line) when gmsh fails.
    """
    if domain.dim != 2:
        raise UserInputError(f"meshing {domain.dim}D domains is not supported yet; only 2D")
    obstacle_size = size / 4 if obstacle_size is None else obstacle_size
    if not (size > 0 and obstacle_size > 0) or order not in (1, 2):
        raise UserInputError(
            f"mesh sizes must be positive and order 1 or 2, got size {size}, "
            f"obstacle_size {obstacle_size}, order {order}"
        )
    if grading is None:
        grading = 4 * max((c.radius for c in domain.obstacles), default=0.0)
    failure = None
    if comm.rank == rank:
        owner = not gmsh.isInitialized()
        if owner:  # no signal handler: the caller may run in a thread (a Ray actor's)
            gmsh.initialize(readConfigFiles=False, interruptible=False)
        gmsh.model.add("pdeladder_domain")
        try:
            gmsh.option.setNumber("General.Terminal", 0)
            gmsh.option.setNumber("General.Verbosity", 0)
            gmsh.option.setNumber("General.NumThreads", 1)
            _build(gmsh.model, domain, size, obstacle_size, grading, order)
        except Exception as err:  # gmsh raises Exception with its last error
            failure = f"gmsh could not mesh the domain: {' '.join(str(err).split())}"
    failure = comm.bcast(failure, root=rank)
    try:
        if failure is not None:
            raise SolveError(failure)
        data = gmshio.model_to_mesh(gmsh.model if comm.rank == rank else None, comm, rank, gdim=2)
    finally:
        if comm.rank == rank:
            gmsh.model.remove()
            if owner:
                gmsh.finalize()
    return DomainMesh(domain, data.mesh, data.facet_tags, size, obstacle_size)


def _build(model, domain: Domain, size: float, obstacle_size: float, grading: float, order: int):
    """Geometry, physical groups, mesh size fields and the 2D mesh in gmsh's ``model``."""
    occ = model.occ
    length, height = domain.lengths
    box = occ.addRectangle(0.0, 0.0, 0.0, length, height)
    disks = [(2, occ.addDisk(*c.centre, 0.0, c.radius, c.radius)) for c in domain.obstacles]
    surface = occ.cut([(2, box)], disks)[0] if disks else [(2, box)]
    occ.synchronize()
    model.addPhysicalGroup(2, [tag for _, tag in surface], FLUID, name="fluid")

    groups: dict[int, list[int]] = {}
    for _, curve in model.getBoundary(surface, oriented=False):
        x, y, _ = occ.getCenterOfMass(1, curve)
        groups.setdefault(_curve_tag(domain, x, y), []).append(curve)
    names = {INLET: "inlet", OUTLET: "outlet", WALLS: "walls"}
    for tag, curves in sorted(groups.items()):
        model.addPhysicalGroup(1, curves, tag, name=names.get(tag, f"obstacle_{tag - OBSTACLE}"))

    opt = model.mesh.field
    if domain.obstacles:
        distance = opt.add("Distance")
        obstacles = [c for tag, cs in groups.items() if tag >= OBSTACLE for c in cs]
        opt.setNumbers(distance, "CurvesList", obstacles)
        opt.setNumber(distance, "Sampling", 200)
        threshold = opt.add("Threshold")
        opt.setNumber(threshold, "InField", distance)
        opt.setNumber(threshold, "SizeMin", obstacle_size)
        opt.setNumber(threshold, "SizeMax", size)
        opt.setNumber(threshold, "DistMin", 0.0)
        opt.setNumber(threshold, "DistMax", grading)
        opt.setAsBackgroundMesh(threshold)
    for name, value in (
        ("Mesh.MeshSizeMax", size),
        ("Mesh.MeshSizeFromPoints", 0),
        ("Mesh.MeshSizeFromCurvature", 0),
        ("Mesh.MeshSizeExtendFromBoundary", 0),
        ("Mesh.MaxNumThreads2D", 1),
    ):
        gmsh.option.setNumber(name, value)
    model.mesh.generate(2)
    if order == 2:
        model.mesh.setOrder(2)


def _curve_tag(domain: Domain, x: float, y: float) -> int:
    """The facet tag of the boundary curve whose centre of mass is ``(x, y)``: a wall's is its
    midpoint, a circle's its centre."""
    length, height = domain.lengths
    tol = 1e-8 * max(domain.lengths)
    if abs(x) < tol:
        return INLET
    if abs(x - length) < tol:
        return OUTLET
    if abs(y) < tol or abs(y - height) < tol:
        return WALLS
    i = int(np.argmin([np.hypot(x - c.centre[0], y - c.centre[1]) for c in domain.obstacles]))
    return obstacle_tag(i)
