"""``pdeladder solvers check FAMILY``: the family contract (solvers/checks.py) from the shell,
on a built-in family, on a family broken on purpose (only its check fails), and refused input;
the residual check's two resolutions solving one drawn field, and the symmetry check in 1D."""

import json
import os
import subprocess
import sys
import types

import numpy as np
import pytest

from pdeladder.solvers import checks, get_family
from pdeladder.solvers.checks import CheckResult, Target, run_checks
from pdeladder.solvers.heat import Heat

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
def test_a_family_declaring_the_wrong_walls_fails_the_walls_and_the_residual(broken):
    """Heat declaring ``"zero"`` walls for its no-flux solve: its data are not 0 there, and
    its residual, on the data completed by the declared walls, no longer falls."""
    results = run_checks(broken.WrongWalls(), dim=2, studies={"space": ((8, 16), None)})
    assert [r.name for r in results] == NAMES
    failed = {r.name: r for r in results if not r.passed}
    assert sorted(failed) == ["residual", "walls"], failed
    assert "do not hold their walls' values" in failed["walls"].detail
    assert "\n" not in failed["walls"].detail


def test_a_rate_below_the_declared_one_fails_the_study(broken):
    r = checks.convergence(Target(broken.TooFast(), 1), "space", levels=(8, 16))
    assert not r.passed and "more than 0.2 below" in r.detail and "declared 3" in r.figure


def test_an_exception_in_a_check_fails_that_check_in_one_line():
    def broken() -> CheckResult:
        raise RuntimeError("the residual\nexploded")

    r = checks.isolated("residual", broken)
    assert r == CheckResult("residual", False, "", "RuntimeError: the residual exploded")


@pytest.mark.parametrize("dim", [1, 2])
def test_the_coarse_sample_starts_from_the_fine_draw_at_every_other_point(dim: int):
    fam = get_family("wave")  # a drawn field times the wall bubble
    params, coarse, fine = fam.Params(), fam.grid(dim, 17, 5), fam.grid(dim, 33, 9)
    rng, fine_rng = np.random.default_rng(7), np.random.default_rng(7)
    drawn = checks.coarse_draw(fam).initial_fields(params, coarse, rng)
    whole = fam.initial_fields(params, fine, fine_rng)
    np.testing.assert_array_equal(drawn, whole[(slice(None), *checks.every_other(dim))])
    assert drawn.shape == (2, *coarse.shape)
    assert rng.random() == fine_rng.random()  # the generator left as the fine solve leaves it


class OwnDraw(Heat):
    """Heat whose solve draws its initial state from the class, not the instance: the residual
    check cannot hand it the fine draw, so each resolution solves its own."""

    def fem(self) -> types.SimpleNamespace:
        from pdeladder.solvers.heat import fem

        return types.SimpleNamespace(solve=lambda _, *args: fem.solve(Heat(), *args))


def test_the_residual_check_in_1d_solves_one_field_at_both_resolutions():
    r = checks.residual(Target(get_family("heat"), 1))
    assert r.passed and "own draws" not in r.figure, r
    # each resolution's own draw: two fields, whose residuals barely differ in 1D
    own = checks.residual(Target(OwnDraw(), 1))
    assert not own.passed and "own draws" in own.figure, own
    assert "does not fall by 0.7" in own.detail


def test_the_symmetry_check_of_a_vector_family_in_1d():
    r = checks.symmetry(Target(get_family("burgers"), 1))  # the reflection flips u's sign
    assert r.passed and r.figure.startswith("1 elements"), r


@pytest.mark.parametrize(
    ("args", "words"),
    [(["nope"], "unknown family 'nope'"), (["heat", "--dim", "5"], "not 5")],
)
def test_bad_input_is_one_line_exit_2(refused, args, words):
    assert words in refused("solvers", "check", *args)
