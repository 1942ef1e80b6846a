"""``pdeladder solvers check FAMILY``: the family contract (solvers/checks.py) from the shell,
on a built-in family, on a family broken on purpose (only its check fails), and refused input."""

import json
import os
import subprocess
import sys

import pytest

from pdeladder.solvers import checks
from pdeladder.solvers.checks import CheckResult, Target, run_checks

PDELADDER = os.path.join(os.path.dirname(sys.executable), "pdeladder")
NAMES = [*checks.CHECKS, "convergence_space", "convergence_time"]

#: Heat broken on purpose, in a package a fresh interpreter imports (the pure and two-rank
#: checks run in one): Dirichlet walls declared where its solver sets zero flux, and a declared
#: order of convergence above its solver's.
BROKEN = {
    "broken_heat/__init__.py": (
        "from pdeladder.solvers.family import Channel\n"
        "from pdeladder.solvers.heat import Heat\n\n\n"
        "class WrongWalls(Heat):\n"
        '    channels = (Channel("u", "temperature", wall="zero"),)\n\n\n'
        "class TooFast(Heat):\n"
        "    expected_rate_space = 3.0\n"
    ),
    "broken_heat/fem.py": "from pdeladder.solvers.heat.fem import manufactured_error, solve\n",
}


@pytest.mark.mpi
def test_heat_passes_every_check_exit_0():
    done = subprocess.run(
        [PDELADDER, "solvers", "check", "heat", "--dim", "2", "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    results = json.loads(done.stdout)
    assert [r["name"] for r in results] == NAMES
    assert all(r["passed"] and r["figure"] and not r["detail"] for r in results), results


@pytest.fixture
def broken(tmp_path, monkeypatch):
    """The module ``broken_heat``, importable here and in fresh interpreters."""
    for path, text in BROKEN.items():
        (tmp_path / path).parent.mkdir(exist_ok=True)
        (tmp_path / path).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), *sys.path]))
    import broken_heat

    yield broken_heat
    del sys.modules["broken_heat"], sys.modules["broken_heat.fem"]


@pytest.mark.mpi
def test_a_family_declaring_the_wrong_walls_fails_that_check_only(broken):
    results = run_checks(broken.WrongWalls(), dim=2, studies={"space": ((8, 16), None)})
    assert [r.name for r in results] == NAMES
    failed = [r for r in results if not r.passed]
    assert [r.name for r in failed] == ["walls"], failed
    assert "not 0 on 'zero' walls" in failed[0].detail and "\n" not in failed[0].detail


def test_a_rate_below_the_declared_one_fails_the_study(broken):
    r = checks.convergence(Target(broken.TooFast(), 1), "space", levels=(8, 16))
    assert not r.passed and "more than 0.2 below" in r.detail and "declared 3" in r.figure


def test_an_exception_in_a_check_fails_that_check_in_one_line():
    def broken() -> CheckResult:
        raise RuntimeError("the residual\nexploded")

    r = checks.isolated("residual", broken)
    assert r == CheckResult("residual", False, "", "RuntimeError: the residual exploded")


@pytest.mark.parametrize(
    ("args", "words"),
    [(["nope"], "unknown family 'nope'"), (["heat", "--dim", "5"], "not 5")],
)
def test_bad_input_is_one_line_exit_2(refused, args, words):
    assert words in refused("solvers", "check", *args)
