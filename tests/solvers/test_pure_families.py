"""A family's package is its physics without the FEM: the trainer loads no DOLFINx, PETSc, UFL
or basix, and a family loads its FEM part on its first solve. That each family's residual (and
inputs) load none is the contract's ``pure`` check (solvers/checks.py). Run in a fresh
interpreter, so ``sys.modules`` starts empty."""

CODE = """
import sys
import pdeladder.trainer
import pdeladder.trainer.losses
from pdeladder.solvers import family_names

family_names()
loaded = sorted({m.split(".")[0] for m in sys.modules} & {"dolfinx", "petsc4py", "ufl", "basix"})
print("loaded:", ",".join(loaded))
"""


def test_the_trainer_loads_no_fem(fresh_python):
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
