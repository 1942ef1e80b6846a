"""A family's package is its physics without the FEM: a trainer that imports pdeladder.trainer and
computes every family's residual (and draws its inputs, where that needs no solve) loads no
DOLFINx, PETSc, UFL or basix. Run in a fresh interpreter, so ``sys.modules`` starts empty."""

CODE = """
import sys
import numpy as np
import torch
import pdeladder.trainer
import pdeladder.trainer.losses
from pdeladder.solvers import family_names, get_family

for name in family_names():
    fam = get_family(name)
    dim = max(d for d in fam.dims if d <= 2)
    grid = fam.grid(dim, 9, 1 if fam.steady else 4)
    channels = len(fam.channels_for(dim))
    fields = torch.randn(2, channels, grid.snapshots, *grid.shape, dtype=torch.float64)
    params = torch.from_numpy(np.stack([fam.Params().vector()] * 2))
    r = fam.residual(fields, params, grid)
    assert r.shape[0] == 2 and torch.isfinite(r).all(), name
    if name != "navier_stokes":  # its initial state is a discrete (FEM) projection
        fam.draw_inputs(fam.Params(), grid, seed=0)
loaded = sorted({m.split(".")[0] for m in sys.modules} & {"dolfinx", "petsc4py", "ufl", "basix"})
print("loaded:", ",".join(loaded))
"""


def test_residuals_and_inputs_load_no_fem(fresh_python):
    assert fresh_python(CODE)[-1] == "loaded:"


def test_a_solve_loads_the_fem_part_on_first_use(fresh_python):
    code = (
        "import sys\n"
        "from pdeladder.solvers import get_family\n"
        "fam = get_family('heat')\n"
        "assert 'dolfinx' not in sys.modules\n"
        "s = fam.run(fam.Params(), fam.grid(1, 9, 3), seed=0)\n"
        "print(s.ok, 'dolfinx' in sys.modules, 'pdeladder.solvers.heat.fem' in sys.modules)\n"
    )
    assert fresh_python(code)[-1].split() == ["True", "True", "True"]
