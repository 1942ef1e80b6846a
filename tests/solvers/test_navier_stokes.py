"""Navier–Stokes: the family contract, plus agreement with Kovasznay flow, a velocity divergence
that falls with h, the discrete kinetic-energy budget, the lagged factorization of the steps'
Oseen systems against one refactorized every step, and a tiny 3D sample."""

from mpi4py import MPI  # first: the DOLFINx wheel loads libmpi through it

import itertools
import math

import numpy as np
import pytest
import torch
import ufl
from dolfinx import fem

from pdeladder.solvers import fem as solver_fem
from pdeladder.solvers import get_family
from pdeladder.solvers.fem import LaggedFactorization, box_mesh, make_ksp
from pdeladder.solvers.grid import Grid
from pdeladder.solvers.navier_stokes import NavierStokesParams
from pdeladder.solvers.navier_stokes.fem import TaylorHoodFlow, random_potential
from pdeladder.solvers.testing import FamilyContract


class TestNavierStokes(FamilyContract):
    family = "navier_stokes"
    pure_inputs = False  # its initial state is a discrete (FEM) projection
    studies = {  # noqa: RUF012
        (2, "space"): (None, None),
        (2, "time"): (None, None),
        (3, "space"): ((3, 6), None),
        (3, "time"): (None, 2),
    }


def norm(expr, comm=MPI.COMM_SELF) -> float:
    """L2 norm of a UFL expression."""
    return math.sqrt(comm.allreduce(fem.assemble_scalar(fem.form(ufl.inner(expr, expr) * ufl.dx))))


def kovasznay(cells: int) -> tuple[float, float, float]:
    """Start from rest with the Kovasznay velocity (Re = 20) on the walls and march to the steady
    state; returns the velocity error, ||div u_h|| and ||∇u_h||."""
    re = 20.0
    lam = re / 2 - math.sqrt(re**2 / 4 + 4 * math.pi**2)
    msh = box_mesh(MPI.COMM_SELF, 2, cells)
    x = ufl.SpatialCoordinate(msh)
    exact = ufl.as_vector(
        [
            1 - ufl.exp(lam * x[0]) * ufl.cos(2 * ufl.pi * x[1]),
            lam / (2 * ufl.pi) * ufl.exp(lam * x[0]) * ufl.sin(2 * ufl.pi * x[1]),
        ]
    )
    with TaylorHoodFlow(msh, 1 / re, 0.1, wall=exact) as flow:
        flow.advance(60)
        u = flow.velocity()
        return norm(u - exact), norm(ufl.div(u)), norm(ufl.grad(u))


def test_steady_flow_agrees_with_kovasznay_and_stays_divergence_free():
    (e8, div8, grad8), (e16, div16, _) = kovasznay(8), kovasznay(16)
    assert e16 < 2e-3 and math.log2(e8 / e16) > 2.7, (e8, e16)  # P2: third order in L2
    assert div16 < 1e-2 * grad8 and math.log2(div8 / div16) > 1.7, (div8, div16)  # second in H1


def random_flow(cells: int, reynolds: float, tau: float, seed: int) -> TaylorHoodFlow:
    """A 2D flow on ``cells`` cells per axis, started as the family starts its samples."""
    rng = np.random.default_rng(seed)
    potential, fine = random_potential(
        Grid(2, cells + 1, 1, 0.0), NavierStokesParams().length_scale, rng
    )
    flow = TaylorHoodFlow(box_mesh(MPI.COMM_SELF, 2, cells), 1 / reynolds, tau)
    flow.start_from_potential(potential, fine)
    return flow


def test_kinetic_energy_budget_closes_step_by_step():
    # Testing with u^{n+1}: the pressure and the skew-symmetric convection drop out, so
    # implicit Euler:  |a|² - |b|² + |a - b|²  = -2τν |∇a|²,
    # BDF2: G(a, b) - G(b, c) + |a - 2b + c|² = -4τν |∇a|²,  G(a, b) = |a|² + |2a - b|².
    nu, tau = 1 / 200, 0.02
    with random_flow(12, 1 / nu, tau, seed=1) as flow:
        states = [flow.velocity() for _ in flow.run(6)]  # u^0 .. u^6
    assert norm(ufl.div(states[0])) < 0.05 * norm(ufl.grad(states[0]))
    sq = [norm(u) ** 2 for u in states]
    assert all(b < a for a, b in itertools.pairwise(sq))  # energy decays
    a, b = states[1], states[0]
    euler = sq[1] - sq[0] + norm(a - b) ** 2 + 2 * tau * nu * norm(ufl.grad(a)) ** 2
    assert abs(euler) < 1e-9 * sq[0]
    for n in range(2, len(states)):
        a, b, c = states[n], states[n - 1], states[n - 2]
        bdf2 = (
            sq[n]
            + norm(2 * a - b) ** 2
            - sq[n - 1]
            - norm(2 * b - c) ** 2
            + norm(a - 2 * b + c) ** 2
            + 4 * tau * nu * norm(ufl.grad(a)) ** 2
        )
        assert abs(bdf2) < 1e-9 * sq[0], (n, bdf2)


def march(steps: int, max_it: int | None = None) -> tuple[np.ndarray, list[int], int]:
    """The state after ``steps`` steps of a random 2D flow (17², Re 200, τ = 1/128), the GMRES
    iterations of each step, and the factorizations its steps' solver took; ``max_it`` (an
    injected fault): the iterations allowed from the second step on."""
    with random_flow(16, 200.0, 1 / 128, seed=2) as flow:
        iterations = []
        for n in range(1, steps + 1):
            iterations.append(flow.step(n))
            if n == 1 and max_it is not None:
                flow._lagged.ksp.setTolerances(max_it=max_it)
        return flow.state.x.array.copy(), iterations, flow._lagged.factorizations


def test_a_lagged_factorization_steps_as_a_fresh_one_each_step(monkeypatch):
    steps = 16
    lagged, iterations, factorizations = march(steps)
    # limit 0: each solve leaves the factorization stale, so each step refactorizes (the
    # reference: one iteration of GMRES on an exact factorization, as LU alone)
    monkeypatch.setattr(solver_fem, "LAGGED_ITERATIONS", 0)
    fresh, once, every = march(steps)
    assert every == steps and once == [1] * steps
    # reused (a step on an old factorization takes more than one iteration), and refreshed
    assert 1 < factorizations <= steps // 2, iterations
    assert iterations.count(1) == factorizations and max(iterations) <= 20, iterations
    assert np.abs(lagged - fresh).max() <= 1e-9 * np.abs(fresh).max()


def test_a_lagged_solve_that_does_not_converge_is_repeated_on_a_new_factorization():
    steps = 6
    fresh, _, _ = march(steps)
    # one GMRES iteration allowed: every solve on an old factorization fails, then converges on
    # a new one of the same matrix in that one iteration
    retried, iterations, factorizations = march(steps, max_it=1)
    assert factorizations == steps and iterations == [1] * steps
    assert np.abs(retried - fresh).max() <= 1e-9 * np.abs(fresh).max()


def test_a_lagged_factorization_refuses_a_direct_solve():
    from petsc4py import PETSc

    A = PETSc.Mat().createAIJ((2, 2), comm=MPI.COMM_SELF)
    A.setValues([0, 1], [0, 1], [2.0, 0.0, 0.0, 3.0])
    A.assemble()
    ksp = make_ksp(MPI.COMM_SELF, A, "lu", "lagged_test_")
    try:
        with pytest.raises(ValueError, match="not preonly"):
            LaggedFactorization(ksp)
    finally:
        ksp.destroy()
        A.destroy()


def test_tiny_three_dimensional_sample():
    fam = get_family("navier_stokes")
    grid = fam.grid(3, 7, 3)
    sample = fam.run(fam.Params(reynolds=50.0), grid, seed=0)
    assert sample.ok, sample.stats.reason
    assert fam.channel_names(3) == ["u", "v", "w", "p"]
    assert sample.fields.shape == (3, 4, 7, 7, 7)
    u = sample.fields[:, :3]
    assert np.all(u[..., 0, :, :] == 0) and np.all(u[..., -1] == 0)  # no-slip walls
    speed = np.sqrt(np.mean(np.sum(u**2, axis=1), axis=(1, 2, 3)))
    assert speed[2] < speed[1] < speed[0]  # decaying
    pressure_mean = sample.fields[:, 3].mean(axis=(1, 2, 3))
    assert np.all(np.abs(pressure_mean) < 0.1 * np.abs(sample.fields[:, 3]).max())
    r = fam.residual(
        torch.from_numpy(sample.fields).movedim(0, 1)[None].double(),  # (1, C, T, X, Y, Z)
        torch.from_numpy(sample.params.vector())[None],
        grid,
    )
    assert r.shape == (1, 4, 1, 5, 5, 5) and torch.all(torch.isfinite(r))


def test_two_dimensional_channels_drop_w():
    assert get_family("navier_stokes").channel_names(2) == ["u", "v", "p"]
