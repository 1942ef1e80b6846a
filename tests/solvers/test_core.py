"""The solver core: grids, random fields, grid sampling of FEM spaces, finite-difference stencils."""

from mpi4py import MPI

import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from dolfinx import fem

from pdeladder.errors import UserInputError
from pdeladder.solvers import stencils
from pdeladder.solvers.fem import GridSampler, grid_mesh
from pdeladder.solvers.grid import Grid
from pdeladder.solvers.random_fields import (
    divergence_free_field,
    gaussian_random_field,
    wall_bubble,
)


def test_grid_shapes_times_and_validation():
    g = Grid(2, 17, 5, 2.0)
    assert g.shape == (17, 17, 1) and g.cells == 16 and g.h == pytest.approx(1 / 16)
    np.testing.assert_allclose(g.times(), [0.0, 0.5, 1.0, 1.5, 2.0])
    assert g.mesh_grid().shape == (3, 17, 17, 1)
    assert Grid(1, 9, 1, 0.0).shape == (9, 1, 1)
    for bad in [(4, 9, 2, 1.0), (2, 2, 2, 1.0), (2, 9, 0, 1.0), (2, 9, 3, 0.0)]:
        with pytest.raises(UserInputError):
            Grid(*bad)


def test_gaussian_random_field_is_seeded_unit_variance_and_smooth_at_its_length_scale():
    shape = (65, 65, 1)
    a = gaussian_random_field(shape, 0.1, np.random.default_rng(1))
    b = gaussian_random_field(shape, 0.1, np.random.default_rng(1))
    assert np.array_equal(a, b) and a.shape == shape
    assert not np.array_equal(a, gaussian_random_field(shape, 0.1, np.random.default_rng(2)))
    draws = np.stack(
        [gaussian_random_field(shape, 0.1, np.random.default_rng(s)) for s in range(40)]
    )
    assert draws.std() == pytest.approx(1.0, rel=0.1)

    def roughness(ell: float) -> float:  # mean squared gradient, ∝ 1/ℓ² for this covariance
        f = np.stack(
            [gaussian_random_field(shape, ell, np.random.default_rng(s)) for s in range(20)]
        )
        return float(np.mean(np.diff(f, axis=1) ** 2))

    assert roughness(0.05) / roughness(0.2) == pytest.approx(16, rel=0.35)


@pytest.mark.parametrize(
    "shape, periodic",
    [((33, 1, 1), False), ((20, 17, 1), True), ((13, 11, 9), False), ((12, 9, 7), True)],
)
@pytest.mark.parametrize("length_scale", [0.03, 0.1, 0.5, 10.0])
def test_a_rows_draw_is_the_whole_draws_rows_and_leaves_the_generator_alike(
    shape, periodic, length_scale
):
    for rows in [(0, 3), (shape[0] // 3, shape[0] - 2), (shape[0] - 1, shape[0])]:
        whole_rng, rows_rng = np.random.default_rng(4), np.random.default_rng(4)
        whole = gaussian_random_field(shape, length_scale, whole_rng, periodic=periodic)
        part = gaussian_random_field(shape, length_scale, rows_rng, periodic=periodic, rows=rows)
        assert part.shape == (rows[1] - rows[0], *shape[1:])
        scale = np.abs(whole).max()
        assert np.abs(part - whole[rows[0] : rows[1]]).max() <= 1e-12 * scale, rows
        assert whole_rng.standard_normal() == rows_rng.standard_normal()  # the same stream
    with pytest.raises(ValueError, match="not rows"):
        gaussian_random_field(shape, 0.1, np.random.default_rng(0), rows=(2, 1))


def test_a_rows_draw_holds_memory_of_its_rows_not_of_the_grid():
    import tracemalloc

    def peak(rows):
        tracemalloc.start()
        gaussian_random_field((257, 257, 1), 0.1, np.random.default_rng(0), rows=rows)
        _, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return top

    whole, quarter = peak(None), peak((0, 64))
    assert whole > 16 * 257 * 257  # the extended box of complex noise: 4x the grid, 16 B each
    assert quarter < 0.3 * whole, (quarter, whole)


@pytest.mark.parametrize("dim", [1, 2, 3])
def test_wall_bubble_is_one_at_the_centre_and_zero_on_the_walls(dim):
    grid = Grid(dim, 5, 1, 0.0)
    b = wall_bubble(grid)
    assert b.shape == grid.shape and b[(2,) * dim].item() == 1.0
    inside = tuple(slice(1, -1) if n > 1 else slice(None) for n in grid.shape)
    walls = np.ones(grid.shape, dtype=bool)
    walls[inside] = False
    assert np.all(b[walls] == 0.0) and np.all(b[inside] > 0.0)


@pytest.mark.parametrize("dim", [1, 2, 3])
def test_divergence_free_field_is_discretely_divergence_free_and_tangential(dim):
    grid = Grid(dim, 17, 1, 0.0)
    u = divergence_free_field(grid, 0.3, 2.0, np.random.default_rng(0))
    assert u.shape == (dim, *grid.shape)
    assert np.sqrt(np.mean(np.sum(u**2, axis=0))) == pytest.approx(2.0)
    if dim == 1:  # a constant ±speed
        assert np.all(np.abs(u) == 2.0) and np.ptp(u) == 0.0
        return
    # Central differences commute: away from the one-sided edge stencils the divergence vanishes.
    div = sum(np.gradient(u[a], grid.h, axis=a) for a in range(dim))
    grad = np.sqrt(sum(np.gradient(u[a], grid.h, axis=a) ** 2 for a in range(dim)))
    assert np.abs(div)[(slice(2, -2),) * dim].max() < 1e-10 * grad.max()
    for a in range(dim):  # b·n = 0 on both walls normal to each axis
        assert np.all(u[a].take([0, -1], axis=a) == 0.0)


@pytest.mark.parametrize("degree", [1, 2])
def test_grid_sampler_reads_exact_vertex_values(degree):
    grid = Grid(2, 9, 1, 0.0)
    V = fem.functionspace(grid_mesh(MPI.COMM_SELF, grid), ("Lagrange", degree))
    u = fem.Function(V)
    u.interpolate(lambda x: np.sin(3 * x[0]) + x[1] ** 2)
    X = grid.mesh_grid()
    expected = np.sin(3 * X[0]) + X[1] ** 2
    sampler = GridSampler(V, grid)
    np.testing.assert_allclose(sampler.to_grid(u)[0], expected, atol=1e-13)
    if degree == 1:  # P1: every dof is a grid point, so grid -> dofs -> grid is the identity
        w = fem.Function(V)
        sampler.from_grid(w, expected)
        np.testing.assert_allclose(w.x.array, u.x.array, atol=1e-13)


def _field(n: int, f) -> tuple[torch.Tensor, Grid]:
    """``f(x, y, t)`` sampled on a 2D grid with 5 snapshots: ``(1, T, X, Y, 1)``."""
    grid = Grid(2, n, 5, 1.0)
    X = torch.from_numpy(grid.mesh_grid())
    t = torch.from_numpy(grid.times()).reshape(-1, 1, 1, 1)
    return f(X[0], X[1], t)[None], grid


def test_stencils_are_exact_on_quadratics():
    u, grid = _field(9, lambda x, y, t: x**2 + 3 * y**2 + t**2)
    np.testing.assert_allclose(stencils.laplacian(u, grid).numpy(), 8.0, atol=1e-9)
    u_t = stencils.time_derivative(u, grid)
    assert u_t.shape == (1, 3, 9, 9, 1)
    np.testing.assert_allclose(u_t[0, :, 4, 4, 0].numpy(), 2 * grid.times()[1:-1], atol=1e-9)
    x_derivative = stencils.diff(u, 0, grid)
    assert x_derivative.shape == (1, 5, 7, 7, 1)
    np.testing.assert_allclose(
        x_derivative[0, 0, :, 0, 0].numpy(), 2 * grid.axis(0)[1:-1], atol=1e-9
    )
    div = stencils.divergence(torch.stack([u, -u], dim=1), grid, channel_axis=1)
    np.testing.assert_allclose(
        div.numpy(), (stencils.diff(u, 0, grid) - stencils.diff(u, 1, grid)).numpy()
    )


def test_laplacian_is_second_order_on_smooth_fields():
    def error(n: int) -> float:
        u, grid = _field(n, lambda x, y, t: torch.sin(2 * x) * torch.cos(y) + 0 * t)
        X = stencils.interior(torch.from_numpy(grid.mesh_grid()), 2)
        exact = -5 * torch.sin(2 * X[0]) * torch.cos(X[1])
        return float((stencils.laplacian(u, grid) - exact).abs().max())

    assert np.log2(error(17) / error(33)) == pytest.approx(2.0, abs=0.2)


def test_a_broken_pipe_does_not_abort_a_process_that_solved():
    """PETSc's signal handlers are off in pdeladder processes: a SIGPIPE (a closed socket to Ray or
    Prefect) leaves Python's handling in place instead of calling MPI_Abort."""
    code = (
        "import os, signal\n"
        "from pdeladder.solvers import Grid, get_family\n"
        "fam = get_family('heat')\n"
        "fam.run(fam.Params(), Grid(dim=1, resolution=9, snapshots=3, t_end=0.1), seed=0)\n"
        "os.kill(os.getpid(), signal.SIGPIPE)\n"
        "print('alive')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PETSC_OPTIONS"}
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "alive", proc.stderr[-2000:]


_STEADY = """
from mpi4py import MPI
import sys
import numpy as np
import ufl
from dolfinx import fem, mesh
from pdeladder.solvers.fem import solve_steady, solver_options

comm = MPI.COMM_WORLD if sys.argv[1] == "world" else MPI.COMM_SELF
kind = sys.argv[2]
msh = mesh.create_unit_cube(comm, 32, 32, 32)
V = fem.functionspace(msh, ("Lagrange", 1))
u, v = ufl.TrialFunction(V), ufl.TestFunction(V)
a = 0.05 * ufl.inner(ufl.grad(u), ufl.grad(v)) * ufl.dx
if kind == "nonsymmetric":
    a += ufl.dot(ufl.as_vector((1.0, 0.5, 0.0)), ufl.grad(u)) * v * ufl.dx
L = fem.Constant(msh, 1.0) * v * ufl.dx
msh.topology.create_connectivity(2, 3)
walls = mesh.exterior_facet_indices(msh.topology)
bc = fem.dirichletbc(0.0, fem.locate_dofs_topological(V, 2, walls), V)
u_h, used = solve_steady(a, L, [bc], kind, "two_ranks")
norm = msh.comm.allreduce(fem.assemble_scalar(fem.form(u_h * u_h * ufl.dx)), op=MPI.SUM)
options = solver_options(msh.comm, used.split()[0])
if msh.comm.rank == 0:
    print(options["pc_type"], options.get("pc_gamg_aggressive_coarsening"), used, repr(norm))
"""


@pytest.mark.mpi
@pytest.mark.parametrize(
    ("kind", "serial", "parallel"),
    [
        ("nonsymmetric", "ilu None gmres_ilu", "asm None gmres_ilu (ASM)"),
        ("elliptic", "gamg None cg_amg", "gamg 0 cg_amg"),
    ],
)
def test_a_large_system_solves_on_two_ranks_as_on_one(two_ranks, kind, serial, parallel):
    """3D systems past the direct solvers' range (35 937 dofs) solve on two ranks with the
    options :func:`~pdeladder.solvers.fem.solver_options` gives them there: ILU(0) on each
    rank's overlapping block (PETSc's ILU is serial only), GAMG without aggressive coarsening.
    The solution is the one-rank solution to the solvers' tolerance."""
    (line,) = two_ranks(_STEADY, "world", kind)
    one = subprocess.run(
        [sys.executable, "-c", _STEADY, "self", kind], capture_output=True, text=True, check=True
    ).stdout.strip()
    (used, norm), (used_one, norm_one) = line.rsplit(" ", 1), one.rsplit(" ", 1)
    assert (used_one, used) == (serial, parallel)
    assert float(norm) == pytest.approx(float(norm_one), rel=1e-8)
