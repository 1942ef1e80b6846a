r"""The FEM part of the chip stack (:mod:`pdeladder.solvers.chip_stack`): weak form, a sample's
solve and the quantities it reports, the manufactured solution, and the spreading-resistance
benchmark with its reference series.

Weak form: find :math:`\theta \in V_h` (P2) such that

.. math::
    (k \nabla \theta, \nabla v) + \langle h \theta, v \rangle_{\Gamma_{sink}} = (q, v)
    \quad \forall v \in V_h,

whose natural conditions are the sink's Robin condition on :math:`\Gamma_{sink}` (the top face)
and zero flux on the other faces. :math:`k` is piecewise constant (a DG0 function, one value
per layer); :math:`q` is the die's power map as a UFL expression of the drawn hot spots (a
uniform background plus Gaussians, their parameters :class:`~dolfinx.fem.Constant`\ s: one
compiled form for every sample), integrated exactly to quadrature. The SPD system is solved
once, by Cholesky or CG + AMG (:func:`~pdeladder.solvers.fem.solve_steady`, its convergence
checked).

The mesh is the grid's own structured mesh (:func:`~pdeladder.solvers.fem.grid_mesh`): a grid
of ``16 n + 1`` points per axis puts every layer interface, a whole number of ``H / 16``, on a
plane of mesh vertices, so the mesh conforms to the layers and the solution is smooth inside
every cell, which keeps P2's order across the jumps of ``k``. The stack is layers of the box,
nothing curved: a structured mesh conforms exactly, where an unstructured one (gmsh) would only
add cost, and keeps the grid's points as vertices (sampling is a reordering, and a sample splits
into x slabs across ranks as every box family does).

Benchmark: a heat flux on a patch of the bottom face of a two-layer flux channel with a
convective sink, the compound-channel problem of Muzychka, Culham & Yovanovich, "Thermal
spreading resistance of eccentric heat sources on rectangular flux channels", J. Electronic
Packaging 125 (2003) 178-185. :func:`series_source_temperature` is its Fourier-series solution
(a strip in 2D, a rectangular channel in 3D) in the form of a transfer of each mode's thermal
impedance through the layers (:func:`mode_impedance`); :func:`fem_source_temperature` solves
the same problem on a layered mesh.
"""

from mpi4py import MPI  # first: the DOLFINx wheel loads libmpi through it

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import ufl
from dolfinx import fem, mesh
from petsc4py import PETSc

from pdeladder.errors import UserInputError
from pdeladder.solvers.chip_stack import (
    LAYERS,
    SPOTS,
    THICKNESS,
    UNITS,
    WIDTH,
    ChipStack,
    ChipStackParams,
    Stack,
    draw_stack,
    stack_inputs,
)
from pdeladder.solvers.family import SolveStats
from pdeladder.solvers.fem import GridSampler, box_mesh, grid_mesh, l2_norm, solve_steady
from pdeladder.solvers.grid import Grid

#: Facet tags: the sink (top face) and a heated patch of the bottom face (the benchmark's).
SINK, SOURCE = 1, 2
#: Quadrature degree of the source terms (a P2 test function times Gaussians or cosines).
SOURCE_DEGREE = 6


def tag_facets(msh: mesh.Mesh, markers: dict[int, Callable[[np.ndarray], np.ndarray]]) -> Any:
    """Meshtags of the boundary facets where each marker (points ``(3, N)`` → bool) holds on
    every vertex, with its key as tag."""
    fdim = msh.topology.dim - 1
    msh.topology.create_connectivity(fdim, msh.topology.dim)
    found = [(mesh.locate_entities_boundary(msh, fdim, m), t) for t, m in markers.items()]
    indices = np.concatenate([f for f, _ in found]).astype(np.int32)
    values = np.concatenate([np.full(len(f), t, dtype=np.int32) for f, t in found])
    order = np.argsort(indices)
    return mesh.meshtags(msh, fdim, indices[order], values[order])


def layered(msh: mesh.Mesh, tops: tuple[float, ...], values: tuple[float, ...]) -> fem.Function:
    """The DG0 function that is ``values[i]`` on the cells of layer ``i``: those whose midpoint
    along the last axis lies below ``tops[i]`` and above ``tops[i - 1]`` (m)."""
    s = msh.topology.dim - 1
    f = fem.Function(fem.functionspace(msh, ("DG", 0)))
    f.interpolate(lambda x: np.asarray(values)[np.searchsorted(tops, x[s])])
    return f


def solve_conduction(
    V: fem.FunctionSpace,
    k: Any,
    h: Any,
    load: Callable[[Any], Any],
    ds: Any,
    name: str,
    stats: SolveStats | None = None,
) -> tuple[fem.Function, str]:
    """Solve ``(k∇θ, ∇v) + <hθ, v>_sink = load(v)`` for ``θ`` in ``V``: ``k``, ``h`` UFL
    expressions or numbers, ``ds`` the boundary measure whose :data:`SINK` facets are the sink.
    Returns the solution and the linear solver as provenance names it."""
    theta, v = ufl.TrialFunction(V), ufl.TestFunction(V)
    a = ufl.inner(k * ufl.grad(theta), ufl.grad(v)) * ufl.dx + h * theta * v * ds(SINK)
    return solve_steady(a, load(v), [], "elliptic", name, stats)


def power_density(msh: mesh.Mesh, stack: Stack) -> tuple[Any, Any]:
    """The die's power density as a UFL expression (W/m³), and the DG0 indicator of the die it
    multiplies: the background plus as many Gaussians as a stack can have (``SPOTS[1]``), those
    this stack lacks of zero amplitude, every number a :class:`~dolfinx.fem.Constant`."""
    s = msh.topology.dim - 1
    x = ufl.SpatialCoordinate(msh)
    spots = SPOTS[1]
    pad = spots - len(stack.amplitudes)
    amplitude = fem.Constant(msh, np.array([*stack.amplitudes, *[0.0] * pad]))
    width = fem.Constant(msh, np.array([*stack.widths, *[1.0] * pad]))
    centre = fem.Constant(msh, np.array([*stack.centres, *[(0.0,) * s] * pad]).reshape(spots, s))
    background = fem.Constant(msh, PETSc.ScalarType(stack.background))
    q = background
    for m in range(spots):
        r2 = sum((x[i] - centre[m, i]) ** 2 for i in range(s))
        q = q + amplitude[m] * ufl.exp(-r2 / (2 * width[m] ** 2))
    die = layered(msh, stack.interfaces, (1.0, 0.0, 0.0))
    return q, die


def solve(
    family: ChipStack,
    params: ChipStackParams,
    grid: Grid,
    rng: np.random.Generator,
    comm: MPI.Comm,
    stats: SolveStats,
) -> tuple[np.ndarray, dict[str, Any]]:
    """:meth:`Family.solve` of :class:`ChipStack`: the stack drawn from ``rng`` (as
    :meth:`~ChipStack.initial_fields` draws it), solved on the grid's mesh and sampled at its
    vertices; on a :class:`~pdeladder.solvers.grid.SlabGrid` of several ranks, this rank's
    slab. Refuses a grid of another box or one whose mesh would cut a layer.

    The provenance reports the stack (layers, hot spots), the hot spot of the solution
    (:func:`hot_spot`: ``hot_spot_temperature`` in K above the ambient, ``hot_spot_location``
    in m), and the die's ``power`` and the ``sink_heat_flow`` ``∫ hθ`` over the sink, which
    balance (both in ``heat_units``: W/m in 2D, W in 3D)."""
    box = family.box(grid.dim)
    if tuple(grid.lengths[: grid.dim]) != box:
        raise UserInputError(
            f"chip_stack samples the box {box} m, not a grid of lengths {grid.lengths[: grid.dim]}"
        )
    if grid.cells % UNITS:
        raise UserInputError(
            f"chip_stack: {grid.resolution} points per axis put layer interfaces between grid "
            f"points; use a resolution of {UNITS} n + 1 points (17, 33, 65, ...)"
        )
    stack = draw_stack(params, grid.dim, rng)
    inputs = stack_inputs(stack, grid, grid.drawn_rows(comm))  # as initial_fields draws them
    msh = grid_mesh(comm, grid)
    s = grid.dim - 1
    V = fem.functionspace(msh, ("Lagrange", 2))
    k = layered(msh, stack.interfaces, stack.conductivity)
    q, die = power_density(msh, stack)
    h = fem.Constant(msh, PETSc.ScalarType(params.sink_coefficient))
    ds = ufl.Measure("ds", msh, subdomain_data=tag_facets(msh, {SINK: on_plane(s, THICKNESS)}))
    dx_q = ufl.dx(metadata={"quadrature_degree": SOURCE_DEGREE})
    theta, solver = solve_conduction(V, k, h, lambda v: die * q * v * dx_q, ds, "chip_stack", stats)
    sampler = GridSampler(V, grid)
    fields = np.concatenate([sampler.local(inputs), sampler.to_grid(theta)])[None]
    hottest, where = hot_spot(theta)
    return fields.astype(np.float32), {
        "element": "P2",
        "time_scheme": "steady",
        "mesh": f"{msh.topology.cell_name()} {grid.cells}^{grid.dim}, conforming to the layers",
        "linear_solver": solver,
        "layers": [
            {"name": n, "thickness": THICKNESS * u / UNITS, "conductivity": c}
            for n, u, c in zip(LAYERS, stack.units, stack.conductivity, strict=True)
        ],
        "hot_spots": [
            {"centre": list(c), "width": w, "peak_power_density": a}
            for a, c, w in zip(stack.amplitudes, stack.centres, stack.widths, strict=True)
        ],
        "background_power_density": stack.background,
        "hot_spot_temperature": hottest,
        "hot_spot_location": where,
        "power": integral(die * q * dx_q),
        "sink_heat_flow": integral(h * theta * ds(SINK)),
        "heat_units": "W m-1" if grid.dim == 2 else "W",
    }


def on_plane(axis: int, value: float) -> Callable[[np.ndarray], np.ndarray]:
    """The marker of the points ``(3, N)`` on the plane ``x_axis = value`` (m)."""
    return lambda x: np.isclose(x[axis], value, rtol=0.0, atol=1e-9 * THICKNESS)


def integral(form: Any) -> float:
    """A scalar form assembled over every rank."""
    compiled = fem.form(form)
    return float(compiled.mesh.comm.allreduce(fem.assemble_scalar(compiled), op=MPI.SUM))


def hot_spot(theta: fem.Function) -> tuple[float, list[float]]:
    """The largest dof value of ``theta`` over every rank (K) and its dof's point (m, to the
    picometre), the first in rank order on ties: the same on every rank."""
    V = theta.function_space
    owned = V.dofmap.index_map.size_local
    values = theta.x.array[:owned]
    i = int(np.argmax(values)) if owned else -1
    dim = V.mesh.geometry.dim
    point = V.tabulate_dof_coordinates()[i, :dim] if owned else None
    local = (float(values[i]), [round(c, 12) + 0.0 for c in point.tolist()]) if owned else None
    found = [c for c in V.mesh.comm.allgather(local) if c is not None]
    return max(found, key=lambda c: c[0])


#: The manufactured stack: layer tops (fractions of H) and conductivities (W/m/K), the sink
#: (W/m²/K) and the flux scale Φ (W/m²).
MANUFACTURED_TOPS, MANUFACTURED_K = (0.25, 0.5, 1.0), (130.0, 5.0, 390.0)
MANUFACTURED_SINK, MANUFACTURED_FLUX = 1e4, 1e5


def manufactured_error(
    dim: int, cells: int, steps: int, comm: MPI.Comm, study: Literal["space", "time"]
) -> float:
    """:meth:`Family.manufactured_error` of :class:`ChipStack` (steady: ``steps`` is ignored):
    the L2 error (K m^(d/2)) on the family's box, ``cells`` cells per axis (a multiple of 4:
    the mesh then conforms to the layers), three layers of :data:`MANUFACTURED_K` with a jump
    of 26 and 78.

    ``θ = f(x) g(s)``, ``f = Π cos(π x_a / W)`` over the lateral axes (zero flux on the side
    faces) and ``g`` the temperature of the flux ``-k g' = Φ sin(π s / 2H)``: zero at the
    bottom, continuous across the interfaces by construction (so is ``g``), and ``Φ = h g(H)``
    at the sink. The source is ``-∇·(k∇θ) = k λ² f g + f Φ π/2H cos(π s / 2H)``, ``λ² = (d - 1)
    (π/W)²``."""
    msh = box_mesh(comm, dim, cells, lengths=ChipStack.box(dim))
    s, height, phi = dim - 1, THICKNESS, MANUFACTURED_FLUX
    x = ufl.SpatialCoordinate(msh)
    tops = tuple(height * t for t in MANUFACTURED_TOPS)
    scale = [2 * height * phi / (math.pi * k) for k in MANUFACTURED_K]

    def cos(z: float) -> float:
        return math.cos(math.pi * z / (2 * height))

    wave = ufl.cos(ufl.pi * x[s] / (2 * height))
    pieces, at_top = [], phi / MANUFACTURED_SINK  # g at each layer's top, from the sink down
    for i in reversed(range(len(tops))):
        pieces.insert(0, at_top + scale[i] * (wave - cos(tops[i])))
        at_top += scale[i] * (cos(tops[i - 1] if i else 0.0) - cos(tops[i]))
    g = pieces[-1]
    for top, piece in zip(tops[-2::-1], pieces[-2::-1], strict=True):
        g = ufl.conditional(ufl.lt(x[s], top), piece, g)
    f = math.prod(ufl.cos(ufl.pi * x[a] / WIDTH) for a in range(s))
    exact = f * g
    k = layered(msh, tops, MANUFACTURED_K)
    lam2 = s * (math.pi / WIDTH) ** 2
    source = k * lam2 * f * g + f * phi * math.pi / (2 * height) * wave
    ds = ufl.Measure("ds", msh, subdomain_data=tag_facets(msh, {SINK: on_plane(s, height)}))
    dx_q = ufl.dx(metadata={"quadrature_degree": SOURCE_DEGREE})
    V = fem.functionspace(msh, ("Lagrange", 2))
    theta, _ = solve_conduction(
        V, k, MANUFACTURED_SINK, lambda v: source * v * dx_q, ds, "chip_stack_mms"
    )
    return l2_norm(theta - exact, dx=ufl.dx(metadata={"quadrature_degree": 8}))


# -- the benchmark: spreading from a heated patch in a compound flux channel ---------------------


@dataclass(frozen=True)
class FluxChannel:
    """A flux channel heated on a patch of its bottom face and cooled by a sink on its top.

    Attributes:
        width: the side of the footprint ``(0, W)^(d-1)`` (m).
        layers: ``(thickness m, conductivity W/m/K)`` from the heated face up.
        patch: the heated interval ``(lo, hi)`` (m) per lateral axis: one in 2D, two in 3D.
        flux: the heat flux into the patch (W/m²).
        sink: the sink's heat transfer coefficient h (W/m²/K).
    """

    width: float
    layers: tuple[tuple[float, float], ...]
    patch: tuple[tuple[float, float], ...]
    flux: float
    sink: float

    @property
    def dim(self) -> int:
        return len(self.patch) + 1

    @property
    def area(self) -> float:
        """The patch's length (2D, m) or area (3D, m²)."""
        return math.prod(hi - lo for lo, hi in self.patch)

    @property
    def power(self) -> float:
        """The heat into the channel, W/m in 2D and W in 3D."""
        return self.flux * self.area

    def one_dimensional_resistance(self) -> float:
        """The resistance of the uniformly heated channel, ``(Σ t/k + 1/h) / W^(d-1)`` (K m/W
        in 2D, K/W in 3D)."""
        return (sum(t / k for t, k in self.layers) + 1 / self.sink) / self.width ** (self.dim - 1)


def mode_impedance(beta: np.ndarray, layers: tuple[tuple[float, float], ...], sink: float):
    """The thermal impedance ``Z = θ̂ / q̂`` (m² K/W) at the heated face of the Fourier mode of
    wavenumber ``β`` (1/m, an array): ``Z = 1/h`` at the sink, carried down through each layer
    ``(t, k)`` by ``Z ← (Z + T/kβ) / (1 + Z kβ T)``, ``T = tanh βt``; ``Z ← Z + t/k`` for
    ``β = 0``. A layer's mode is ``a cosh βs + b sinh βs``; eliminating ``a, b`` between its
    faces gives this map, the layered form of the spreading function ``φ`` of Muzychka, Culham
    & Yovanovich (2003), bounded for large ``βt`` where their cosh/sinh form overflows."""
    z = np.full(beta.shape, 1.0 / sink)
    zero = beta == 0
    for t, k in reversed(layers):
        kb = k * np.where(zero, 1.0, beta)
        tanh = np.tanh(beta * t)
        z = np.where(zero, z + t / k, (z + tanh / kb) / (1 + z * kb * tanh))
    return z


def series_source_temperature(channel: FluxChannel, terms: int) -> float:
    """The patch's mean temperature rise (K) from the Fourier series of Muzychka, Culham &
    Yovanovich (2003), ``terms`` modes per lateral axis: with ``λ_m = mπ/W``, the patch ``c =
    hi - lo`` and ``s_m = (sin λ_m hi - sin λ_m lo) / (λ_m c)`` (``s_0 = 1``) per axis,

    .. math::
        \\bar\\theta = q \\sum_{m (,n)} Z(\\beta) \\prod_a \\epsilon_{m_a} \\frac{c_a}{W}
        s_{m_a}^2, \\qquad \\beta = \\sqrt{\\lambda_m^2 (+ \\lambda_n^2)}, \\
        \\epsilon_0 = 1, \\ \\epsilon_{m>0} = 2.

    The terms fall as ``m^-3``: the tail past ``terms`` is about ``terms^-2`` of the spreading
    part."""
    m = np.arange(terms)
    lam = m * math.pi / channel.width
    safe = np.where(m == 0, 1.0, lam)
    weights = []
    for lo, hi in channel.patch:
        c = hi - lo
        s = np.where(m == 0, 1.0, (np.sin(lam * hi) - np.sin(lam * lo)) / (safe * c))
        weights.append(np.where(m == 0, 1.0, 2.0) * c / channel.width * s**2)
    if channel.dim == 2:
        beta, weight = lam, weights[0]
    else:
        beta = np.sqrt(lam[:, None] ** 2 + lam[None, :] ** 2)
        weight = weights[0][:, None] * weights[1][None, :]
    return float(channel.flux * np.sum(mode_impedance(beta, channel.layers, channel.sink) * weight))


#: The benchmark's stack: a silicon die on a copper spreader, (thickness m, W/m/K) from the
#: heated face up; 10 mm wide, 100 W/cm² on an eccentric patch, a sink of 10⁴ W/m²/K.
BENCHMARK_LAYERS = ((0.5e-3, 130.0), (1.5e-3, 390.0))
#: The strip (2D), heated on x in [2, 4] mm, and the rectangular channel (3D), on [2, 4] x [3, 5]
#: mm.
BENCHMARK_STRIP = FluxChannel(WIDTH, BENCHMARK_LAYERS, ((2e-3, 4e-3),), flux=1e6, sink=1e4)
BENCHMARK_CHANNEL = FluxChannel(
    WIDTH, BENCHMARK_LAYERS, ((2e-3, 4e-3), (3e-3, 5e-3)), flux=1e6, sink=1e4
)


def reference_source_temperature(channel: FluxChannel) -> float:
    """The series' value of the patch's mean temperature rise (K) to about 1e-9 of it: 10⁶
    terms in 2D; in 3D 1000² and 2000² terms with their tail's ``terms^-2`` extrapolated
    (Richardson), which the 3D terms' count would otherwise need ~10⁴ per axis for."""
    if channel.dim == 2:
        return series_source_temperature(channel, 1_000_000)
    coarse, fine = (series_source_temperature(channel, n) for n in (1000, 2000))
    return fine + (fine - coarse) / 3


def fem_source_temperature(
    channel: FluxChannel, cells: tuple[int, ...], comm: MPI.Comm = MPI.COMM_SELF
) -> tuple[float, int]:
    """The patch's mean temperature rise (K) from the P2 solve of ``channel`` on a structured
    mesh of ``cells`` cells per axis (the last along the stack), and the dofs. The mesh must
    put the interfaces and the patch's edges on vertices (a ValueError says which does not)."""
    dim, s = channel.dim, channel.dim - 1
    height = sum(t for t, _ in channel.layers)
    lengths = (channel.width,) * s + (height,)
    spacing = [n / c for n, c in zip(lengths, cells, strict=True)]
    tops = tuple(np.cumsum([t for t, _ in channel.layers]).tolist())
    planes = [(s, z) for z in tops] + [
        (a, e) for a, edges in enumerate(channel.patch) for e in edges
    ]
    for a, value in planes:
        if abs(value / spacing[a] - round(value / spacing[a])) > 1e-9:
            raise ValueError(f"{cells} cells put no vertex plane at {value:g} m along axis {a}")
    corners = [np.zeros(dim), np.array(lengths)]
    if dim == 2:
        msh = mesh.create_rectangle(comm, corners, list(cells), mesh.CellType.triangle)
    else:
        msh = mesh.create_box(comm, corners, list(cells), mesh.CellType.tetrahedron)
    tol = 1e-9 * channel.width

    def on_patch(x: np.ndarray) -> np.ndarray:
        inside = np.isclose(x[s], 0.0, rtol=0.0, atol=tol)
        for a, (lo, hi) in enumerate(channel.patch):
            inside &= (x[a] > lo - tol) & (x[a] < hi + tol)
        return inside

    tags = tag_facets(msh, {SINK: on_plane(s, height), SOURCE: on_patch})
    ds = ufl.Measure("ds", msh, subdomain_data=tags)
    k = layered(msh, tops, tuple(k for _, k in channel.layers))
    V = fem.functionspace(msh, ("Lagrange", 2))
    theta, _ = solve_conduction(
        V, k, channel.sink, lambda v: channel.flux * v * ds(SOURCE), ds, "chip_stack_channel"
    )
    area = integral(fem.Constant(msh, PETSc.ScalarType(1.0)) * ds(SOURCE))
    if not math.isclose(area, channel.area, rel_tol=1e-9):
        raise ValueError(f"the tagged patch measures {area:g}, not {channel.area:g}")
    return integral(theta * ds(SOURCE)) / area, V.dofmap.index_map.size_global
