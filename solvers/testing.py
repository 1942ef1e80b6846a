"""The family contract (:mod:`pdeladder.solvers.checks`) as a pytest base class subclassed once
per family (the pattern of ``zarr.testing.store.StoreTests``): one test per check, the two-rank
one marked ``mpi``, and convergence studies in as many dimensions as ``studies`` names.
Imported by tests only; needs pytest.

Subclass it, set ``family`` (and any smaller study plans), and pytest runs every check::

    class TestHeat(FamilyContract):
        family = "heat"
"""

from typing import ClassVar

import pytest

from pdeladder.solvers import checks
from pdeladder.solvers.checks import CheckResult, Target
from pdeladder.solvers.registry import get_family


def assert_passed(result: CheckResult) -> None:
    assert result.passed, f"{result.name}: {result.detail} ({result.figure})"


class FamilyContract:
    #: registry name of the family under test
    family: ClassVar[str]
    #: dimension of the sample-level checks (solve, determinism, residual, two ranks)
    dim: ClassVar[int] = 2
    #: convergence studies run in CI: {(dim, kind): (levels, fixed)}; families shrink them to fit
    studies: ClassVar[dict[tuple[int, str], tuple[tuple[int, ...] | None, int | None]]] = {}
    #: whether ``draw_inputs`` loads no FEM either (not where the initial state is a projection)
    pure_inputs: ClassVar[bool] = True

    @pytest.fixture(scope="class")
    @classmethod
    def target(cls) -> Target:
        return Target(get_family(cls.family), cls.dim)

    @pytest.mark.parametrize(
        "check",
        [pytest.param(n, marks=pytest.mark.mpi) if n == "two_ranks" else n for n in checks.CHECKS],
    )
    def test_check(self, target: Target, check: str) -> None:
        options = {"pure_inputs": self.pure_inputs} if check == "pure" else {}
        assert_passed(checks.CHECKS[check](target, **options))

    def test_convergence_orders(self, target: Target) -> None:
        plans = self.studies or {(self.dim, "space"): (None, None)}
        for (dim, kind), (levels, fixed) in plans.items():
            study = Target(target.family, dim)
            assert_passed(checks.convergence(study, kind, levels=levels, fixed=fixed))
