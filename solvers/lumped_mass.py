"""P1 with lumped mass (vertex quadrature), shared by the reaction–diffusion families: the
vertex-quadrature measure, the diffusion system solved once per time step, and sources
evaluated at the vertices.

Lumping makes the P1 mass matrix diagonal, with entries ``m_i = ∫ φ_i``; on the structured box
meshes the diffusion matrix is then an M-matrix, which is what gives the explicit reaction
steps of these families their discrete maximum principles.
"""

from mpi4py import MPI  # noqa: F401  (first: DOLFINx needs libmpi loaded)

from typing import Any

import numpy as np
import ufl
from dolfinx import fem
from dolfinx.fem.petsc import assemble_matrix, assemble_vector
from petsc4py import PETSc

from pdeladder.solvers.fem import choose_solver, make_ksp, solve_checked

#: Measure of lumped-mass (vertex-quadrature) integrals: the P1 mass matrix becomes diagonal.
VERTEX_QUADRATURE = {"quadrature_rule": "vertex", "quadrature_degree": 1}


class LumpedDiffusion:
    """The linear system ``(σ M_L + κ K) x = M_L r`` for P1 on ``V``, assembled and factorized
    (or preconditioned) once and solved once per time step.

    ``M_L`` is the lumped (vertex-quadrature) mass matrix, diagonal with entries ``mass``; ``K``
    the stiffness matrix. On the structured box meshes the matrix is an M-matrix with row sums
    ``σ m_i``, so ``min r / σ <= x <= max r / σ``: a discrete maximum principle. ``r`` and
    ``mass`` are the values of the dofs owned by this rank.
    """

    def __init__(self, V: fem.FunctionSpace, sigma: float, kappa: float, name: str):
        msh = V.mesh
        u, v = ufl.TrialFunction(V), ufl.TestFunction(V)
        lumped = ufl.dx(metadata=VERTEX_QUADRATURE)
        # Constants, not floats, so that one compiled form serves every σ and κ.
        sigma_c, kappa_c = fem.Constant(msh, sigma), fem.Constant(msh, kappa)
        a = (
            sigma_c * ufl.inner(u, v) * lumped
            + kappa_c * ufl.inner(ufl.grad(u), ufl.grad(v)) * ufl.dx
        )
        m = assemble_vector(fem.form(v * lumped))
        m.ghostUpdate(addv=PETSc.InsertMode.ADD, mode=PETSc.ScatterMode.REVERSE)
        self.mass = m.array.copy()
        m.destroy()
        self.dofs = V.dofmap.index_map.size_global
        self.solver = choose_solver("mass", msh.topology.dim, self.dofs, msh.comm.size)
        self.A = assemble_matrix(fem.form(a))
        self.A.assemble()
        try:  # a failed set-up must not leave the matrix behind
            self.ksp = make_ksp(msh.comm, self.A, self.solver, prefix=f"{name}_{id(self.A)}_")
        except BaseException:
            self.A.destroy()
            raise
        self.rhs = self.A.createVecRight()

    def solve(self, r: np.ndarray, u: fem.Function) -> int:
        """Set ``u`` to the solution for the right-hand side ``M_L r``; returns the iterations."""
        self.rhs.array[:] = self.mass * r
        iterations = solve_checked(self.ksp, self.rhs, u.x.petsc_vec)
        u.x.scatter_forward()
        return iterations

    def destroy(self) -> None:
        for obj in (self.ksp, self.A, self.rhs):
            obj.destroy()


class VertexSource:
    """Owned vertex values of a UFL source ``f(x, t)`` on a P1 space, with ``t`` a
    :class:`dolfinx.fem.Constant` in ``f``: the lumped load is ``mass * values``."""

    def __init__(self, V: fem.FunctionSpace, f: Any, t: fem.Constant):
        self.t, self.fh = t, fem.Function(V)
        self.expr = fem.Expression(f, V.element.interpolation_points)
        self.owned = V.dofmap.index_map.size_local

    def __call__(self, time: float) -> np.ndarray:
        self.t.value = time
        self.fh.interpolate(self.expr)
        return self.fh.x.array[: self.owned]
